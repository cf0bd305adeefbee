"""The process backend's pure parts and helpers: bwrap's --info-fd reply, waiting on a pidfd, the
handle's attach points and who joins the cgroup. Starting bubblewrap itself is covered by
tests/integration/test_sandbox_containment.py and test_sandbox_spawn_and_attachments.py."""

from __future__ import annotations

import io
import os
import socket
import subprocess

import pytest

from contain.errors import FileTransferError, SandboxStartError
from contain.runtime.process_backend import ProcessBackend, ProcessSandbox, _read_child_pid, _wait_for_exit
from contain.runtime.supervisor_channel import SupervisorChannel
from fake_host import facts_as_user, user_backend_plan


class _Exited:
    def __init__(self, stderr: bytes) -> None:
        self.stderr = io.BytesIO(stderr)


def test_the_child_pid_is_read_from_info_fd_json_even_when_split_across_writes():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'{\n  "child-pid": 4')
    os.write(write_fd, b"242\n}\n")
    os.close(write_fd)
    assert _read_child_pid(read_fd, _Exited(b"")) == 4242  # type: ignore[arg-type]
    with pytest.raises(OSError):
        os.close(read_fd)  # the reader closed it


def test_bwrap_exiting_before_the_sandbox_started_is_a_start_error_quoting_its_stderr():
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    with pytest.raises(SandboxStartError) as caught:
        _read_child_pid(read_fd, _Exited(b"bwrap: No permissions to create new namespace\n"))  # type: ignore[arg-type]
    assert caught.value.cause == (
        "bubblewrap exited before the sandbox started: bwrap: No permissions to create new namespace"
    )
    assert caught.value.fix == "run `contain doctor`"


def test_waiting_on_a_pidfd_sees_the_exit_or_gives_up_at_the_timeout():
    done = subprocess.Popen(["/bin/true"])
    assert _wait_for_exit(done, 10.0) is True
    assert done.returncode == 0
    stuck = subprocess.Popen(["/bin/sleep", "30"])
    try:
        assert _wait_for_exit(stuck, 0.01) is False
        assert stuck.returncode is None
    finally:
        stuck.kill()
        stuck.wait()


@pytest.mark.parametrize(("is_root", "joins"), [(True, True), (False, False)])
def test_only_the_root_launcher_joins_the_cgroup_before_exec(is_root, joins):
    facts = facts_as_user(is_root=is_root, uid=0, gid=0)
    assert ProcessBackend().cgroup_joined_at_exec(facts) is joins


def test_the_handle_names_the_supervisors_namespace_and_refuses_files_once_closed():
    plan = user_backend_plan()
    proc = subprocess.Popen(["/bin/true"], stderr=subprocess.PIPE)
    host, peer = socket.socketpair()
    sandbox = ProcessSandbox(proc, SupervisorChannel(host), proc.pid, plan)
    assert (sandbox.host_pid, sandbox.netns_path, sandbox.cgroup) == (proc.pid, f"/proc/{proc.pid}/ns/net", None)
    peer.close()  # the "supervisor" is gone: exit is refused, close still finishes
    sandbox.close()
    sandbox.close()  # idempotent
    with pytest.raises(FileTransferError):
        sandbox.get_file("/work", "x", max_bytes=1, label="/work/x")
