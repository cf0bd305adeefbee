"""``GuestSandbox`` against a scripted, hostile guest: a Python fake agent on a socketpair.

The real agent is exercised in tests/integration/test_guest_agent.py; here the guest does what a
compromised guest kernel could: send beyond its credit, reply unasked, lie about sizes, break
the export walk. Each must lose the channel (or refuse the transfer) and never reach the host's
files or memory. No root, no VM.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contain.errors import FileTransferError, SandboxLost
from contain.runtime.backend import CommandRequest
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.files import anchor_export_destination
from contain.runtime.microvm.guest_channel import (
    HEADER,
    WINDOW_BYTES,
    GuestChannel,
    MsgType,
    Stream,
    decode_items,
    encode_frame,
    encode_items,
    encode_request,
)
from contain.runtime.microvm.guest_handle import GuestLimits, GuestSandbox, is_dev_null
from contain.runtime.supervisor_channel import Started

READY = ["version=2", "pid=1", "boot_id=0f0e0d0c-0b0a-4908-8706-050403020100", "kernel=6.1.0", "cgroup=none"]
EXITED = ["status=0", "utime_us=0", "stime_us=0", "maxrss_kb=0", "oom_kills=0", "pids_limit_hits=0"]


class FakeVmm:
    pid = 4242
    netns_path = "/fake/netns"
    cgroup: SandboxCgroup | None = None

    def __init__(self, agent: FakeAgent) -> None:
        self.agent = agent
        self.killed = False

    def kill(self) -> None:
        self.killed = True
        self.close()

    def close(self) -> None:
        # shutdown first: a script thread blocked in recv wakes with EOF instead of reading from
        # whatever file a later test opens under the same descriptor number
        with contextlib.suppress(OSError):
            self.agent.sock.shutdown(socket.SHUT_RDWR)
        self.agent.sock.close()


class FakeAgent:
    """The guest end: reads host frames and answers as a script says."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def read(self) -> tuple[MsgType, Stream, bytes]:
        header = self._exact(HEADER.size)
        length, kind, stream, _ = HEADER.unpack(header)
        return MsgType(kind), Stream(stream), self._exact(length)

    def expect(self, kind: MsgType) -> tuple[Stream, bytes]:
        got, stream, body = self.read()
        while got is MsgType.CREDIT and kind is not MsgType.CREDIT:  # credit may interleave
            got, stream, body = self.read()
        assert got is kind, (got, kind)
        return stream, body

    def send(self, kind: MsgType, items: list[str] | bytes = (), *, stream: Stream = Stream.STDIN) -> None:  # type: ignore[assignment]
        body = items if isinstance(items, bytes) else encode_items(items)
        self.sock.sendall(encode_frame(kind, body, stream=stream))

    def _exact(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data


@pytest.fixture
def pair() -> Iterator[tuple[GuestSandbox, FakeAgent, FakeVmm]]:
    host, guest = socket.socketpair()
    agent = FakeAgent(guest)
    vmm = FakeVmm(agent)

    def handshake() -> None:
        agent.expect(MsgType.HELLO)
        agent.send(MsgType.READY, READY)

    thread = threading.Thread(target=handshake)
    thread.start()
    limits = GuestLimits(seccomp_bpf=bytes(8))  # any whole program: the fake agent does not install it
    sandbox = GuestSandbox.connect(GuestChannel.from_socket(host), vmm, limits=limits, timeout_s=5)
    thread.join()
    yield sandbox, agent, vmm

    def answer_shutdown() -> None:
        while agent.read()[0] is not MsgType.SHUTDOWN:
            pass
        agent.send(MsgType.OK)

    in_guest(answer_shutdown)
    sandbox.close()
    vmm.close()
    while GUEST_THREADS:
        GUEST_THREADS.pop().join(timeout=10)


GUEST_THREADS: list[threading.Thread] = []


def in_guest(script: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        with contextlib.suppress(EOFError, OSError):  # the host closed the channel: what scripts provoke
            script()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    GUEST_THREADS.append(thread)
    return thread


def spawn(sandbox: GuestSandbox, agent: FakeAgent, after_start: Callable[[], None]) -> tuple[int, int, Started]:
    """Spawn with real pipes; the fake agent answers STARTED and then runs ``after_start``."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    devnull = os.open(os.devnull, os.O_RDONLY)

    def script() -> None:
        agent.expect(MsgType.SPAWN)
        agent.send(MsgType.STARTED, ["pid=2"])
        after_start()

    thread = in_guest(script)
    reply = sandbox.spawn(CommandRequest(("true",), {}, "/", ()), (devnull, out_w, err_w))
    for fd in (devnull, out_w, err_w):
        os.close(fd)
    assert isinstance(reply, Started)
    del thread  # joined at teardown: a flood may stay blocked until the channel closes
    os.close(err_r)
    return out_r, err_r, reply


def test_the_handshake_reports_the_guest(pair: tuple[GuestSandbox, FakeAgent, FakeVmm]) -> None:
    sandbox, _, vmm = pair
    assert sandbox.ready is not None and sandbox.ready.kernel == "6.1.0"
    assert (sandbox.host_pid, sandbox.netns_path, sandbox.cgroup) == (vmm.pid, vmm.netns_path, None)


def test_forged_frames_in_stdout_reach_the_host_pipe_verbatim_and_control_nothing(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm],
) -> None:
    sandbox, agent, _ = pair
    forged = encode_frame(MsgType.EXITED, encode_items(EXITED)) + HEADER.pack(0xFFFFFFFF, 3, 1, 0)

    def run() -> None:
        agent.send(MsgType.DATA, forged, stream=Stream.STDOUT)
        agent.send(MsgType.DATA, b"", stream=Stream.STDOUT)
        agent.send(MsgType.DATA, b"", stream=Stream.STDERR)

    out_r, _, _ = spawn(sandbox, agent, run)
    assert sandbox.wait_exited(0.2) is None  # the forged EXITED inside the data is not an exit
    assert os.read(out_r, 4096) == forged
    os.close(out_r)
    in_guest(lambda: agent.send(MsgType.EXITED, [*EXITED[:1], *EXITED[1:]]))
    exited = sandbox.wait_exited(5)
    assert exited is not None and exited.status == 0


def test_output_beyond_the_credit_window_loses_the_channel(pair: tuple[GuestSandbox, FakeAgent, FakeVmm]) -> None:
    sandbox, agent, _ = pair

    def flood() -> None:
        # nobody reads the host pipe: once its 64 KiB buffer is full, the window is all the guest may send
        for _ in range(2 * WINDOW_BYTES // 65536 + 2):
            agent.send(MsgType.DATA, b"x" * 65536, stream=Stream.STDOUT)

    out_r, _, _ = spawn(sandbox, agent, flood)
    with pytest.raises(SandboxLost, match="beyond its credit window"):
        sandbox.wait_exited(10)
    run_state = sandbox._run
    assert run_state is not None and len(run_state.out[Stream.STDOUT].pending) <= WINDOW_BYTES
    os.close(out_r)


def test_a_reply_nobody_asked_for_loses_the_channel(pair: tuple[GuestSandbox, FakeAgent, FakeVmm]) -> None:
    sandbox, agent, _ = pair
    agent.send(MsgType.OK)
    with pytest.raises(SandboxLost):
        sandbox.hello(timeout_s=5)


def test_an_exit_report_without_a_command_loses_the_channel(pair: tuple[GuestSandbox, FakeAgent, FakeVmm]) -> None:
    sandbox, agent, _ = pair
    agent.send(MsgType.EXITED, EXITED)
    with pytest.raises(SandboxLost):
        sandbox.hello(timeout_s=5)


def test_get_file_refuses_a_guest_that_announces_more_than_was_asked(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm],
) -> None:
    sandbox, agent, _ = pair

    def script() -> None:
        agent.expect(MsgType.GET_FILE)
        agent.send(MsgType.FILE, ["size=101"])

    in_guest(script)
    with pytest.raises(SandboxLost, match="over the 100 asked for"):
        sandbox.get_file("/work", "f", max_bytes=100, label="f")


def test_get_file_refuses_more_bytes_than_announced(pair: tuple[GuestSandbox, FakeAgent, FakeVmm]) -> None:
    sandbox, agent, _ = pair

    def script() -> None:
        agent.expect(MsgType.GET_FILE)
        agent.send(MsgType.FILE, ["size=3"])
        agent.send(MsgType.DATA, b"abcd", stream=Stream.TRANSFER)

    in_guest(script)
    with pytest.raises(SandboxLost, match="more file data than it announced"):
        sandbox.get_file("/work", "f", max_bytes=100, label="f")


def test_get_file_reports_a_file_that_shrank_while_read(pair: tuple[GuestSandbox, FakeAgent, FakeVmm]) -> None:
    sandbox, agent, _ = pair

    def script() -> None:
        _, body = agent.expect(MsgType.GET_FILE)
        assert decode_items(body) == ["root=/work", "path=d/f", "max_bytes=100"]
        agent.send(MsgType.FILE, ["size=3"])
        agent.send(MsgType.DATA, b"ab", stream=Stream.TRANSFER)
        agent.send(MsgType.DATA, b"", stream=Stream.TRANSFER)

    in_guest(script)
    with pytest.raises(FileTransferError, match="changed while it was read"):
        sandbox.get_file("/work", "d/f", max_bytes=100, label="f")


def export_with(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm], tmp_path: Path, entries: list[tuple[list[str], bytes | None]]
) -> Path:
    sandbox, agent, _ = pair

    def script() -> None:
        agent.expect(MsgType.EXPORT)
        for items, data in entries:
            agent.send(MsgType.ENTRY, items)
            if data is not None:
                agent.send(MsgType.DATA, data, stream=Stream.TRANSFER)
                agent.send(MsgType.DATA, b"", stream=Stream.TRANSFER)
        agent.send(MsgType.EXPORT_END)

    in_guest(script)
    dest = tmp_path / "dest"
    anchor = anchor_export_destination(str(dest))
    try:
        sandbox.export("/work/out", anchor, max_bytes=1000)
    finally:
        anchor.close()
    return dest


@pytest.mark.parametrize(
    "entries",
    [
        [(["kind=file", "path=../escape", "size=1"], b"x")],
        [(["kind=file", "path=a//b", "size=1"], b"x")],
        [(["kind=file", "path=/etc/passwd", "size=1"], b"x")],
        [(["kind=file", "path=nodir/f", "size=1"], b"x")],  # its directory was never announced
        [(["kind=file", "path=big", "size=1001"], None)],  # past the byte limit
        [(["kind=skip", "path=x", "reason=\x1b[2Jforged text"], None)],  # reasons are codes, not text
        [(["kind=link", "path=x"], None)],
    ],
    ids=["dotdot", "empty-component", "absolute", "out-of-order", "over-limit", "free-text-reason", "unknown-kind"],
)
def test_an_export_that_breaks_the_rules_loses_the_channel_and_writes_nothing_outside(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm], tmp_path: Path, entries: list[tuple[list[str], bytes | None]]
) -> None:
    with pytest.raises(SandboxLost):
        export_with(pair, tmp_path, entries)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"]
    assert list((tmp_path / "dest").iterdir()) == []


def test_an_export_never_writes_through_a_symlink_in_the_destination(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm], tmp_path: Path
) -> None:
    (tmp_path / "dest").mkdir()
    (tmp_path / "victim").write_text("keep")
    (tmp_path / "dest" / "f").symlink_to(tmp_path / "victim")
    (tmp_path / "dest" / "d").symlink_to(tmp_path)
    export_with(
        pair,
        tmp_path,
        [
            (["kind=file", "path=f", "size=4"], b"evil"),
            (["kind=dir", "path=d"], None),
            (["kind=file", "path=d/victim", "size=4"], b"evil"),
            (["kind=file", "path=ok", "size=2"], b"ok"),
        ],
    )
    assert (tmp_path / "victim").read_text() == "keep"
    assert (tmp_path / "dest" / "ok").read_text() == "ok"


def test_a_guest_that_stops_reading_its_port_loses_the_channel_instead_of_blocking_the_host() -> None:
    """A hung guest kernel stops draining the port; QEMU then stops reading the socket. A send
    (the run loop's KILL at the deadline) must give up after its timeout, not block forever."""
    host, guest = socket.socketpair()
    host.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    channel = GuestChannel(host.detach(), send_timeout_s=0.5)
    done: list[BaseException | None] = []

    def flood() -> None:
        try:
            while True:
                channel.send(encode_frame(MsgType.DATA, b"x" * 65536, stream=Stream.STDIN))
        except SandboxLost as exc:
            done.append(exc)

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    sender.join(timeout=10)
    assert not sender.is_alive() and isinstance(done[0], SandboxLost)
    assert "has not read its control port" in done[0].cause
    with pytest.raises(SandboxLost):  # later senders do not wait on the stuck one either
        channel.send(encode_request(MsgType.KILL))
    channel.close()
    guest.close()


def test_output_after_the_end_of_its_stream_loses_the_channel(pair: tuple[GuestSandbox, FakeAgent, FakeVmm]) -> None:
    sandbox, agent, _ = pair

    def after_end() -> None:
        agent.send(MsgType.DATA, b"", stream=Stream.STDOUT)
        agent.send(MsgType.DATA, b"late", stream=Stream.STDOUT)

    out_r, _, _ = spawn(sandbox, agent, after_end)
    with pytest.raises(SandboxLost, match="after its end"):
        sandbox.wait_exited(10)
    os.close(out_r)


def test_stdin_credit_beyond_what_the_host_sent_loses_the_channel(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm],
) -> None:
    sandbox, agent, _ = pair
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe()  # the host never writes stdin: the guest has nothing to credit back

    def script() -> None:
        agent.expect(MsgType.SPAWN)
        agent.send(MsgType.STARTED, ["pid=2"])
        agent.send(MsgType.CREDIT, ["bytes=1"])

    in_guest(script)
    assert isinstance(sandbox.spawn(CommandRequest(("cat",), {}, "/", ()), (in_r, out_w, err_w)), Started)
    with pytest.raises(SandboxLost, match="credited more stdin"):
        sandbox.wait_exited(10)
    for fd in (out_r, out_w, err_r, err_w, in_r, in_w):
        os.close(fd)


def test_a_guest_that_does_not_answer_loses_the_channel_at_the_reply_timeout(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm],
) -> None:
    sandbox, _, _ = pair
    with pytest.raises(SandboxLost, match=r"did not answer within 0\.2s"):
        sandbox.hello(timeout_s=0.2)
    with pytest.raises(SandboxLost):  # and stays lost: nothing more is sent on a stream out of step
        sandbox.kill()


def test_a_guest_frozen_before_it_answers_spawn_ends_the_wait_at_the_runs_deadline_not_the_reply_timeout(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm],
) -> None:
    import time

    from contain.errors import DeadlinePassed

    sandbox, agent, _ = pair
    in_guest(lambda: agent.expect(MsgType.SPAWN))  # reads the request and never answers
    devnull = os.open(os.devnull, os.O_RDWR)
    began = time.monotonic()
    try:
        with pytest.raises(DeadlinePassed, match="deadline passed"):
            sandbox.spawn(
                CommandRequest(("true",), {}, "/", (), deadline=began + 0.3), (devnull, devnull, devnull)
            )
    finally:
        os.close(devnull)
    assert time.monotonic() - began < 5  # the 30 s reply timeout did not apply
    with pytest.raises(SandboxLost):  # the channel is out of step now: lost
        sandbox.kill()


def test_identity_carries_the_hosts_wall_clock_when_given(pair: tuple[GuestSandbox, FakeAgent, FakeVmm]) -> None:
    sandbox, agent, _ = pair
    bodies: list[bytes] = []

    def answer() -> None:
        for _ in range(2):
            bodies.append(agent.expect(MsgType.IDENTITY)[1])
            agent.send(MsgType.OK)

    in_guest(answer)
    sandbox.set_identity(hostname="contain", machine_id="a" * 32, realtime_ns=1_764_633_600_123_456_789)
    sandbox.set_identity(hostname="contain", machine_id="b" * 32)
    assert decode_items(bodies[0]) == [
        "hostname=contain",
        "machine_id=" + "a" * 32,
        "realtime_ns=1764633600123456789",
    ]
    assert decode_items(bodies[1]) == ["hostname=contain", "machine_id=" + "b" * 32]


def test_a_dev_null_stdin_sends_its_eof_in_the_same_write_as_the_spawn_and_is_not_pumped(
    pair: tuple[GuestSandbox, FakeAgent, FakeVmm],
) -> None:
    sandbox, agent, _ = pair
    writes: list[bytes] = []
    channel_send = sandbox._channel.send

    def recording_send(frame: bytes) -> None:
        writes.append(frame)
        channel_send(frame)

    sandbox._channel.send = recording_send  # type: ignore[method-assign]

    def finish() -> None:
        agent.send(MsgType.DATA, b"", stream=Stream.STDOUT)
        agent.send(MsgType.DATA, b"", stream=Stream.STDERR)
        agent.send(MsgType.EXITED, EXITED)

    out_r, _, _ = spawn(sandbox, agent, finish)
    assert sandbox.wait_exited(5) is not None
    run_state = sandbox._run
    assert run_state is not None and run_state.pump_thread is not None
    run_state.pump_thread.join(timeout=5)
    os.close(out_r)
    first = host_frames(writes[0])
    assert [kind for kind, _, _ in first] == [MsgType.SPAWN, MsgType.DATA]
    assert first[1] == (MsgType.DATA, Stream.STDIN, b"")
    later = [f for w in writes[1:] for f in host_frames(w)]
    assert [f for f in later if f[:2] == (MsgType.DATA, Stream.STDIN)] == []


def host_frames(data: bytes) -> list[tuple[MsgType, Stream, bytes]]:
    """The frames of one host write, whole (the host writes whole frames)."""
    frames = []
    while data:
        length, kind, stream, _ = HEADER.unpack_from(data)
        frames.append((MsgType(kind), Stream(stream), data[HEADER.size : HEADER.size + length]))
        data = data[HEADER.size + length :]
    return frames


def test_is_dev_null_tells_dev_null_from_a_pipe_and_a_file(tmp_path: Path) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    r, w = os.pipe()
    file_fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert [is_dev_null(fd) for fd in (null, r, file_fd)] == [True, False, False]
    finally:
        for fd in (null, r, w, file_fd):
            os.close(fd)
