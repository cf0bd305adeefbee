"""The recording fake backend: it keeps every plan and call and answers from its script, and it
satisfies the same Protocol as the process backend."""

from __future__ import annotations

import errno

import pytest

from contain.errors import FileTransferError, SandboxLost, SandboxStartError
from contain.runtime.backend import (
    CommandControl,
    CommandRequest,
    RecordingBackend,
    RunningSandbox,
    SandboxBackend,
)
from contain.runtime.process_backend import ProcessBackend, ProcessSandbox
from contain.runtime.supervisor_channel import Exited, SpawnFailed, Started
from fake_host import user_backend_plan

EXITED = Exited(status=3 << 8, utime_us=1, stime_us=2, maxrss_kb=3)
REQUEST = CommandRequest(("/bin/true",), {}, "/work", ())


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


def test_both_backends_and_both_handles_have_every_member_of_the_protocols(wakeup):
    backend_members = _members(SandboxBackend) | {"name"}
    handle_members = _members(RunningSandbox) | _members(CommandControl)
    assert {"start", "cgroup_joined_at_exec", "name"} <= backend_members
    assert {"spawn", "put_file", "get_file", "export", "close", "host_pid", "netns_path", "cgroup"} <= handle_members
    recording = RecordingBackend(wakeup_fd=wakeup)
    for backend in (ProcessBackend(), recording):
        assert backend_members - set(dir(backend)) == set(), type(backend).__name__
    assert handle_members - set(dir(ProcessSandbox)) == set()
    assert handle_members - set(dir(recording.start(user_backend_plan()))) == set()


def test_the_recording_backend_answers_spawns_from_its_script_in_order(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED, SpawnFailed("exec", errno.ENOENT)])
    running = backend.start(user_backend_plan())
    assert isinstance(running.spawn(REQUEST, (0, 1, 2)), Started)
    assert running.wait_exited(0) == EXITED
    assert running.wait_exited(0) is None  # one report per command
    assert running.spawn(REQUEST, (0, 1, 2)) == SpawnFailed("exec", errno.ENOENT)
    with pytest.raises(SandboxLost):
        running.spawn(REQUEST, (0, 1, 2))  # the script ran out: the fake fails loudly, never succeeds
    assert backend.calls == [("start",), ("spawn", REQUEST), ("spawn", REQUEST), ("spawn", REQUEST)]
    assert backend.plans == [user_backend_plan()]


def test_the_recording_backend_raises_its_scripted_start_error_after_recording_the_plan(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup, start_error=SandboxStartError("no", "yes"))
    with pytest.raises(SandboxStartError):
        backend.start(user_backend_plan())
    assert backend.plans == [user_backend_plan()]


def test_the_recording_handle_keeps_files_and_refuses_a_missing_or_oversized_one(wakeup):
    running = RecordingBackend(wakeup_fd=wakeup).start(user_backend_plan())
    running.put_file("/work", "a.txt", b"hello", mode=0o644, label="/work/a.txt")
    assert running.get_file("/work", "a.txt", max_bytes=5, label="/work/a.txt") == b"hello"
    with pytest.raises(FileTransferError):
        running.get_file("/work", "a.txt", max_bytes=4, label="/work/a.txt")
    with pytest.raises(FileTransferError):
        running.get_file("/work", "b.txt", max_bytes=4, label="/work/b.txt")
