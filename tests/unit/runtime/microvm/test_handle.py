"""The VMM side's wrapper: proxy variables as the guest reaches them, and the console on loss."""

from __future__ import annotations

import pytest

from contain.egress.session import plan_sandbox_env
from contain.errors import SandboxLost
from contain.runtime.backend import CommandRequest, RecordingBackend, RecordingRunning
from contain.runtime.microvm.handle import GUEST_PROXY, MicroVMHandle, plan_guest_env
from contain.runtime.supervisor_channel import Exited


def test_only_proxy_variables_are_pointed_at_the_guests_forward():
    env = {**plan_sandbox_env("http://127.0.0.1:3128"), "MY_URL": "http://127.0.0.1:3128/x", "PATH": "/usr/bin"}
    guest = plan_guest_env(env)
    assert guest["HTTPS_PROXY"] == guest["http_proxy"] == guest["PIP_PROXY"] == f"http://{GUEST_PROXY}"
    assert guest["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert guest["MY_URL"] == "http://127.0.0.1:3128/x"  # not a proxy variable: left as the task wrote it
    assert guest["PATH"] == "/usr/bin"


@pytest.fixture
def inner(tmp_path):
    import socket

    ours, theirs = socket.socketpair()
    backend = RecordingBackend(wakeup_fd=ours.fileno(), replies=[Exited(0, 0, 0, 0)])
    yield backend
    ours.close()
    theirs.close()


def test_spawn_rewrites_the_env_only_with_a_network(inner):
    request = CommandRequest(("env",), plan_sandbox_env("http://127.0.0.1:3128"), "/work", ())
    handle = MicroVMHandle(RecordingRunning(inner), serial_tail=lambda n: "", network=True)
    handle.spawn(request, (0, 1, 2))
    sent = inner.calls[-1][1]
    assert sent.env["HTTP_PROXY"] == f"http://{GUEST_PROXY}"
    inner.replies.append(Exited(0, 0, 0, 0))
    quiet = MicroVMHandle(RecordingRunning(inner), serial_tail=lambda n: "", network=False)
    quiet.spawn(request, (0, 1, 2))
    assert inner.calls[-1][1].env["HTTP_PROXY"] == "http://127.0.0.1:3128"


def test_a_lost_guest_names_the_end_of_its_console_made_visible(inner):
    handle = MicroVMHandle(
        RecordingRunning(inner),
        serial_tail=lambda n: "Out of memory: Killed process 1 (contain-guest-a)\n\x1b[2Jpanic",
        network=False,
    )
    inner.replies.clear()  # the next spawn finds no reply: the recording backend raises SandboxLost
    with pytest.raises(SandboxLost) as lost:
        handle.spawn(CommandRequest(("true",), {}, "/work", ()), (0, 1, 2))
    assert "the guest console ended with:\nOut of memory: Killed process 1" in lost.value.cause
    assert "\x1b" not in lost.value.cause  # the escape is shown, not sent to a terminal


def test_a_deadline_that_passed_keeps_its_class_when_the_console_tail_is_added() -> None:
    from contain.errors import DeadlinePassed
    from contain.runtime.microvm.handle import MicroVMHandle

    class Frozen:
        def kill(self) -> None:
            raise DeadlinePassed("the run's deadline passed", "raise the limit")

    handle = MicroVMHandle(Frozen(), serial_tail=lambda n: "contain-guest: init done\x1b[2J", network=False)  # type: ignore[arg-type]
    with pytest.raises(DeadlinePassed) as caught:
        handle.kill()
    assert "init done" in caught.value.cause and "\x1b" not in caught.value.cause
