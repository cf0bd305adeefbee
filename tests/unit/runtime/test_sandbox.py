"""The sandbox's pure helpers: wait statuses, bwrap's --info-fd reply, the hidden-sockets line,
and waiting on a pidfd. The Sandbox lifecycle itself needs bubblewrap: see
tests/integration/test_sandbox_containment.py and test_sandbox_spawn_and_attachments.py."""

from __future__ import annotations

import io
import os
import signal
import subprocess

import pytest

from contain.errors import SandboxStartError
from contain.runtime.sandbox import _decode_status, _hidden_sockets_line, _read_child_pid, _wait_for_exit


def test_a_wait_status_decodes_to_exit_code_or_signal():
    assert _decode_status(3 << 8) == (3, None)
    assert _decode_status(0) == (0, None)
    assert _decode_status(signal.SIGKILL) == (None, signal.SIGKILL)
    assert _decode_status(0x137F) == (None, None)  # stopped by SIGSTOP: neither exited nor killed


def test_the_hidden_sockets_line_names_eight_and_counts_the_rest():
    paths = tuple(f"/w/s{n}.sock" for n in range(10))
    line = _hidden_sockets_line(paths)
    assert line.startswith("10 found in binds and hidden (name them in allow_sockets to keep them): /w/s0.sock, ")
    assert line.endswith("/w/s7.sock and 2 more")
    assert _hidden_sockets_line(("/w/a.sock",)).endswith(": /w/a.sock")


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
