"""The QMP client: bounded lines, deadlines, skipped events, error replies, descriptor passing."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from contain.errors import SandboxStartError
from contain.runtime.microvm.monitor import MAX_EVENTS, MAX_LINE_BYTES, Monitor


class FakeQemu:
    """The QEMU end of the monitor socket: answers each command from a script of raw lines."""

    def __init__(self, script):
        self.host, self.qemu = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.script = list(script)  # per command received: the lines to send back
        self.received = []
        self.fds = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def start(self, greeting=b'{"QMP": {"version": {}, "capabilities": []}}\n'):
        self.qemu.sendall(greeting)
        self.thread.start()
        return Monitor(self.host)

    def _serve(self):
        buffer = b""
        while self.script:
            msg, fds, _, _ = socket.recv_fds(self.qemu, 65536, 4)
            if not msg:
                return
            self.fds += fds
            buffer += msg
            while b"\n" in buffer and self.script:
                line, buffer = buffer.split(b"\n", 1)
                self.received.append(json.loads(line))
                for out in self.script.pop(0):
                    self.qemu.sendall(out)

    def close(self):
        self.qemu.close()
        self.thread.join(timeout=5)
        self.host.close()
        for fd in self.fds:
            os.close(fd)


def test_greeting_negotiates_capabilities_and_a_command_returns_its_value():
    qemu = FakeQemu([[b'{"return": {}}\n'], [b'{"return": {"status": "running"}}\n']])
    monitor = qemu.start()
    monitor.greet(timeout_s=5)
    assert monitor.execute("query-status", timeout_s=5) == {"status": "running"}
    assert qemu.received == [{"execute": "qmp_capabilities"}, {"execute": "query-status"}]
    qemu.close()


def test_events_before_the_reply_are_skipped_and_one_can_be_waited_for():
    stop = b'{"event": "STOP", "data": {}}\n'
    migration = b'{"event": "MIGRATION", "data": {"status": "completed"}}\n'
    qemu = FakeQemu([[stop, b'{"return": {}}\n', b'{"event": "MIGRATION", "data": {"status": "active"}}\n', migration]])
    monitor = qemu.start(greeting=b"")
    assert monitor.execute("stop", timeout_s=5) == {}
    assert monitor.wait_event("MIGRATION", timeout_s=5, accept={"status": "completed"}) == {"status": "completed"}
    qemu.close()


def test_an_error_reply_raises_with_qemus_words():
    qemu = FakeQemu([[b'{"error": {"class": "GenericError", "desc": "no such fd"}}\n']])
    monitor = qemu.start(greeting=b"")
    with pytest.raises(SandboxStartError, match=r"QEMU refused migrate.*no such fd"):
        monitor.execute("migrate", {"uri": "fd:x"}, timeout_s=5)
    qemu.close()


def test_a_line_past_the_bound_raises_instead_of_growing():
    qemu = FakeQemu([[b'{"return": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n']])
    monitor = qemu.start(greeting=b"")
    with pytest.raises(SandboxStartError, match="longer than"):
        monitor.execute("query-status", timeout_s=5)
    qemu.close()


def test_an_endless_stream_of_events_ends_the_wait():
    qemu = FakeQemu([[b'{"event": "RTC_CHANGE", "data": {}}\n' * (MAX_EVENTS + 1)]])
    monitor = qemu.start(greeting=b"")
    with pytest.raises(SandboxStartError, match="more than"):
        monitor.execute("stop", timeout_s=5)
    qemu.close()


def test_no_reply_by_the_deadline_raises():
    qemu = FakeQemu([[]])
    monitor = qemu.start(greeting=b"")
    with pytest.raises(SandboxStartError, match="did not answer in time"):
        monitor.execute("stop", timeout_s=0.05)
    qemu.close()


@pytest.mark.parametrize("line", [b"not json\n", b"[1, 2]\n", b'{"neither": 1}\n'])
def test_anything_but_a_reply_object_raises(line):
    qemu = FakeQemu([[line]])
    monitor = qemu.start(greeting=b"")
    with pytest.raises(SandboxStartError):
        monitor.execute("stop", timeout_s=5)
    qemu.close()


def test_a_greeting_that_is_not_qmp_raises():
    qemu = FakeQemu([])
    monitor = qemu.start(greeting=b'{"hello": 1}\n')
    with pytest.raises(SandboxStartError, match="did not greet"):
        monitor.greet(timeout_s=5)
    qemu.close()


def test_getfd_passes_the_descriptor_with_the_command(tmp_path):
    qemu = FakeQemu([[b'{"return": {}}\n']])
    monitor = qemu.start(greeting=b"")
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        monitor.execute("getfd", {"fdname": "snapshot"}, timeout_s=5, fds=[fd])
    finally:
        os.close(fd)
    qemu.thread.join(timeout=5)
    assert qemu.received == [{"execute": "getfd", "arguments": {"fdname": "snapshot"}}]
    assert len(qemu.fds) == 1 and os.fstat(qemu.fds[0]).st_ino == os.stat(tmp_path / "f").st_ino
    qemu.close()


def test_qemu_closing_the_monitor_raises():
    qemu = FakeQemu([])
    monitor = qemu.start(greeting=b"")
    qemu.qemu.close()
    with pytest.raises(SandboxStartError, match="Broken pipe"):
        monitor.execute("stop", timeout_s=5)
    with pytest.raises(SandboxStartError, match="closed"):
        monitor.wait_event("MIGRATION", timeout_s=5)
    qemu.host.close()
