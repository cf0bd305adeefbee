"""The host's framing of the guest agent's control protocol: pure encode/decode and a bounded reader.

The protocol is docs/guest-agent-protocol.md; the agent is ``microvm/agent/contain-guest-agent.c``.
A frame is an 8-byte header (``<IBBH``: body length, type, stream, reserved 0) and a body of at
most ``MAX_BODY_BYTES``: raw bytes for DATA and RESEED, NUL-terminated ``key=value`` items for
every other type.

What this module enforces: every frame from the guest is treated as hostile. The decoder refuses
an oversize length, a non-zero reserved field, an unknown type, a stream that does not belong to
the type, and items that are not NUL-terminated; reply parsers refuse unknown, missing, repeated
and malformed keys and numbers not spelled as the agent prints them. Any of these raises
``SandboxLost``: a channel out of step is never resynchronised. The decoder never buffers more
than one frame plus one read. Requests are validated before they are encoded (a caller bug
raises ``ValueError``; nothing is sent).

What it does not do: flow control, threads and the run's stdio live in ``guest_handle``; starting
and stopping the VM belong to the VMM side.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from contain.errors import SandboxLost
from contain.runtime.supervisor_channel import Exited, Rlimit, SpawnFailed, Started

__all__ = [
    "CHUNK_BYTES",
    "HEADER",
    "MAX_BODY_BYTES",
    "MAX_FILTER_INSTRUCTIONS",
    "PROTOCOL_VERSION",
    "WINDOW_BYTES",
    "Frame",
    "FrameDecoder",
    "GuestChannel",
    "GuestExited",
    "GuestReady",
    "MsgType",
    "Stream",
    "decode_items",
    "encode_frame",
    "encode_items",
    "encode_spawn",
    "parse_fields",
]

PROTOCOL_VERSION = 2  # 2: SPAWN carries the seccomp filter (seccomp=, mandatory)
HEADER = struct.Struct("<IBBH")
MAX_BODY_BYTES = 256 * 1024  # MAX_BODY_BYTES in contain-guest-agent.c
MAX_FILTER_INSTRUCTIONS = 4096  # BPF_MAXINSNS; MAX_FILTER_INSNS in the agent
_INSTRUCTION_BYTES = 8  # struct sock_filter
WINDOW_BYTES = 256 * 1024  # per-stream credit window, WINDOW_BYTES in the agent
CHUNK_BYTES = 64 * 1024  # the largest DATA body the host sends (the agent sends no more either)
_READ_BYTES = 64 * 1024
SEND_TIMEOUT_S = 10.0  # a guest that takes no byte of a frame for this long is hung (TCG answers in ms)


class MsgType(enum.IntEnum):
    """Frame types; the codes are the protocol's (docs/guest-agent-protocol.md)."""

    HELLO = 1
    SPAWN = 2
    DATA = 3
    CREDIT = 4
    KILL = 5
    CLOSE_OUTPUT = 6
    PUT_FILE = 7
    GET_FILE = 8
    EXPORT = 9
    RESEED = 10
    IDENTITY = 11
    SHUTDOWN = 12
    READY = 64
    STARTED = 65
    SPAWN_FAILED = 66
    EXITED = 67
    OK = 68
    ERROR = 69
    FILE = 70
    ENTRY = 71
    EXPORT_END = 72


class Stream(enum.IntEnum):
    """Data streams: the command's stdio and the file transfer stream."""

    STDIN = 0
    STDOUT = 1
    STDERR = 2
    TRANSFER = 3


# Which streams a frame type may name, per direction. Everything else carries stream 0.
_GUEST_STREAMS: dict[MsgType, frozenset[Stream]] = {
    MsgType.DATA: frozenset({Stream.STDOUT, Stream.STDERR, Stream.TRANSFER}),
    MsgType.CREDIT: frozenset({Stream.STDIN}),
}
_GUEST_TYPES = frozenset(t for t in MsgType if t >= MsgType.READY) | {MsgType.DATA, MsgType.CREDIT}
_RAW_BODY = frozenset({MsgType.DATA, MsgType.RESEED})

_BUG_FIX = "the guest broke the control protocol; the VM was stopped. Report it with CONTAIN_DEBUG=1 output"


def _lost(cause: str) -> SandboxLost:
    return SandboxLost(cause, _BUG_FIX)


class Frame(NamedTuple):
    """One decoded frame: type, stream and body (raw bytes, or items still to split)."""

    type: MsgType
    stream: Stream
    body: bytes


# ---- pure codec ----------------------------------------------------------------------------


def encode_frame(kind: MsgType, body: bytes = b"", *, stream: Stream = Stream.STDIN) -> bytes:
    """One frame: header plus body.

    Raises:
        ValueError: the body is larger than MAX_BODY_BYTES.
    """
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"frame body of {len(body)} bytes exceeds the {MAX_BODY_BYTES} byte limit")
    return HEADER.pack(len(body), int(kind), int(stream), 0) + body


def encode_items(items: Sequence[str]) -> bytes:
    """NUL-terminated items; text is UTF-8, file names keep their bytes (surrogateescape).

    Raises:
        ValueError: an item contains NUL or has no ``=``.
    """
    parts = []
    for item in items:
        if "\0" in item or "=" not in item:
            raise ValueError(f"item {item[:60]!r} must be key=value without NUL")
        parts.append(item.encode("utf-8", "surrogateescape") + b"\0")
    return b"".join(parts)


def decode_items(body: bytes) -> list[str]:
    """Split an items body. Non-UTF-8 bytes (file names) come back as surrogate escapes.

    Raises:
        SandboxLost: the body does not end in NUL.
    """
    if not body:
        return []
    if body[-1] != 0:
        raise _lost("guest sent an items body that is not NUL-terminated")
    return [raw.decode("utf-8", "surrogateescape") for raw in body[:-1].split(b"\0")]


class FrameDecoder:
    """Turns bytes from the guest into frames, refusing anything the protocol does not allow.

    Holds at most one incomplete frame plus the last chunk fed.
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; return every frame now complete.

        Raises:
            SandboxLost: a framing error (the channel cannot be trusted after it).
        """
        self._buf += data
        frames: list[Frame] = []
        while len(self._buf) >= HEADER.size:
            length, code, stream_code, reserved = HEADER.unpack_from(self._buf)
            if length > MAX_BODY_BYTES:
                raise _lost(f"guest frame of {length} bytes exceeds the {MAX_BODY_BYTES} byte limit")
            if reserved != 0:
                raise _lost("guest frame has non-zero reserved header bytes")
            if code not in _GUEST_TYPES_CODES:
                raise _lost(f"guest sent unknown frame type {code}")
            kind = MsgType(code)
            if stream_code not in {int(s) for s in _GUEST_STREAMS.get(kind, frozenset({Stream.STDIN}))}:
                raise _lost(f"guest {kind.name} frame names stream {stream_code}")
            end = HEADER.size + length
            if len(self._buf) < end:
                break
            frames.append(Frame(kind, Stream(stream_code), bytes(self._buf[HEADER.size : end])))
            del self._buf[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held that do not form a complete frame yet."""
        return len(self._buf)


_GUEST_TYPES_CODES = frozenset(int(t) for t in _GUEST_TYPES)

# How the agent prints a number (%d, %llu): ASCII digits, no sign, no leading zero, at most 20 digits.
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


def number(kind: str, key: str, text: str, *, high: int = 2**64 - 1) -> int:
    """A number as the agent prints it, within 0..``high``.

    Raises:
        SandboxLost: any other spelling, or out of range.
    """
    if not _DECIMAL.fullmatch(text):
        raise _lost(f"guest {kind} has a malformed number {key}={text[:40]!r}")
    value = int(text)
    if value > high:
        raise _lost(f"guest {kind} has {key}={value}, above {high}")
    return value


def parse_fields(
    kind: MsgType, body: bytes, required: frozenset[str], optional: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Items of one reply as a dict: each required key exactly once, optional keys at most once.

    Raises:
        SandboxLost: an item without ``=``, an unknown, repeated or missing key.
    """
    fields: dict[str, str] = {}
    for item in decode_items(body):
        key, sep, value = item.partition("=")
        if not sep:
            raise _lost(f"guest {kind.name} item {item[:60]!r} is not key=value")
        if key not in required and key not in optional:
            raise _lost(f"guest {kind.name} has an unknown key {key[:40]!r}")
        if key in fields:
            raise _lost(f"guest {kind.name} repeats key {key!r}")
        fields[key] = value
    missing = sorted(required - fields.keys())
    if missing:
        raise _lost(f"guest {kind.name} lacks {', '.join(missing)}")
    return fields


@dataclass(frozen=True)
class GuestReady:
    """The agent's READY: who answered (boot id, kernel) and whether it has cgroup v2 controllers."""

    pid: int
    boot_id: str
    kernel: str
    cgroup: str  # "none", or "v2:" plus the enabled controllers ("v2:memory,pids")

    @property
    def controllers(self) -> frozenset[str]:
        """Controllers the agent can limit a run with."""
        if not self.cgroup.startswith("v2:"):
            return frozenset()
        return frozenset(c for c in self.cgroup[3:].split(",") if c)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_KERNEL = re.compile(r"[A-Za-z0-9._+~-]{1,64}")
_CGROUP = re.compile(r"none|v2:((memory|pids)(,(memory|pids))?)?")


def parse_ready(body: bytes) -> GuestReady:
    """READY, strictly.

    Raises:
        SandboxLost: wrong version or malformed fields.
    """
    fields = parse_fields(MsgType.READY, body, frozenset({"version", "pid", "boot_id", "kernel", "cgroup"}))
    if fields["version"] != str(PROTOCOL_VERSION):
        raise _lost(f"guest agent speaks protocol version {fields['version'][:20]!r}, not {PROTOCOL_VERSION}")
    if not _UUID.fullmatch(fields["boot_id"]):
        raise _lost(f"guest READY has a malformed boot_id {fields['boot_id'][:60]!r}")
    if not _KERNEL.fullmatch(fields["kernel"]) or not _CGROUP.fullmatch(fields["cgroup"]):
        raise _lost("guest READY has a malformed kernel or cgroup field")
    return GuestReady(
        pid=number("READY", "pid", fields["pid"], high=2**31 - 1),
        boot_id=fields["boot_id"],
        kernel=fields["kernel"],
        cgroup=fields["cgroup"],
    )


# The agent's exit report is a supervisor ``Exited`` with the guest cgroup's counts filled in.
GuestExited = Exited


SPAWN_STAGES: tuple[str, ...] = (
    "fork", "setup", "cgroup", "rlimit", "ids", "chdir", "seccomp", "exec", "namespaces", "proc"
)


def parse_started(body: bytes) -> Started:
    fields = parse_fields(MsgType.STARTED, body, frozenset({"pid"}))
    return Started(pid=number("STARTED", "pid", fields["pid"], high=2**31 - 1))


def parse_spawn_failed(body: bytes) -> SpawnFailed:
    fields = parse_fields(MsgType.SPAWN_FAILED, body, frozenset({"stage", "errno"}))
    if fields["stage"] not in SPAWN_STAGES:
        raise _lost(f"guest SPAWN_FAILED has an unknown stage {fields['stage'][:40]!r}")
    return SpawnFailed(stage=fields["stage"], errno=number("SPAWN_FAILED", "errno", fields["errno"], high=4095))


_EXITED_KEYS = ("status", "utime_us", "stime_us", "maxrss_kb", "oom_kills", "pids_limit_hits")


def parse_exited(body: bytes) -> GuestExited:
    fields = parse_fields(MsgType.EXITED, body, frozenset(_EXITED_KEYS))
    values = {key: number("EXITED", key, fields[key]) for key in _EXITED_KEYS}
    if values["status"] > 0xFFFF:
        raise _lost(f"guest EXITED has status={values['status']}, not a wait status")
    return GuestExited(**values)


def parse_error(body: bytes) -> tuple[str, int]:
    """ERROR's message and errno (0 when absent)."""
    fields = parse_fields(MsgType.ERROR, body, frozenset({"message"}), frozenset({"errno"}))
    err = number("ERROR", "errno", fields["errno"], high=4095) if "errno" in fields else 0
    return fields["message"], err


def parse_credit(body: bytes) -> int:
    fields = parse_fields(MsgType.CREDIT, body, frozenset({"bytes"}))
    value = number("CREDIT", "bytes", fields["bytes"], high=WINDOW_BYTES)
    if value == 0:
        raise _lost("guest CREDIT of 0 bytes")
    return value


def encode_spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    rlimits: Sequence[Rlimit],
    *,
    seccomp_bpf: bytes,
    memory_max_bytes: int | None = None,
    pids_max: int | None = None,
    output_max_bytes: int | None = None,
) -> bytes:
    """The SPAWN frame. ``seccomp_bpf`` is the BPF program the agent installs right before exec
    (``seccomp=`` in lowercase hex; mandatory: the agent refuses a SPAWN without one).

    Raises:
        ValueError: empty argv, a relative cwd, a bad env key, a repeated rlimit, a limit below 1,
            a filter that is empty, not whole instructions or over ``MAX_FILTER_INSTRUCTIONS``,
            NUL anywhere, or a frame over the limit.
    """
    if not argv:
        raise ValueError("argv must name a program")
    if not cwd.startswith("/"):
        raise ValueError(f"cwd {cwd!r} must be an absolute path inside the guest")
    names = [limit.name for limit in rlimits]
    if len(set(names)) != len(names):
        raise ValueError(f"rlimits repeat a name: {names}")
    items = [f"cwd={cwd}", *(limit.item() for limit in rlimits), *(f"arg={arg}" for arg in argv)]
    for key, value in env.items():
        if not key or "=" in key:
            raise ValueError(f"environment key {key!r} must be non-empty and contain no '='")
        items.append(f"env={key}={value}")
    for name, limit in (("memory_max", memory_max_bytes), ("pids_max", pids_max), ("output_max", output_max_bytes)):
        if limit is not None:
            if not 1 <= limit < 2**64 - 1:
                raise ValueError(f"{name} {limit} is out of range")
            items.append(f"{name}={limit}")
    instructions, partial = divmod(len(seccomp_bpf), _INSTRUCTION_BYTES)
    if partial or not 1 <= instructions <= MAX_FILTER_INSTRUCTIONS:
        raise ValueError(
            f"a seccomp filter is 1..{MAX_FILTER_INSTRUCTIONS} whole instructions, not {len(seccomp_bpf)} bytes"
        )
    items.append(f"seccomp={seccomp_bpf.hex()}")
    return encode_frame(MsgType.SPAWN, encode_items(items))


def encode_request(kind: MsgType, items: Sequence[str] = (), *, stream: Stream = Stream.STDIN) -> bytes:
    """A request whose body is items (everything but DATA and RESEED)."""
    if kind in _RAW_BODY:
        raise ValueError(f"{kind.name} has a raw body")
    return encode_frame(kind, encode_items(items), stream=stream)


# ---- the channel -----------------------------------------------------------------------------


class GuestChannel:
    """Frames over one connected descriptor (a socket QEMU's chardev accepted, or a socketpair).

    ``send`` may be called from any thread; ``read_frames`` from one reader thread only.
    """

    def __init__(self, fd: int, *, send_timeout_s: float = SEND_TIMEOUT_S) -> None:
        self._fd = fd
        self._decoder = FrameDecoder()
        self._send_lock = threading.Lock()
        self._closed = False
        self._broken = False  # a frame was cut short: nothing more may be sent
        self._send_timeout_s = send_timeout_s
        os.set_blocking(fd, False)  # sends wait with a deadline (poll), never in write()

    @classmethod
    def from_socket(cls, sock: socket.socket) -> GuestChannel:
        """Take over a connected socket (the channel owns its descriptor from now on)."""
        return cls(sock.detach())

    def fileno(self) -> int:
        return self._fd

    def send(self, frame: bytes) -> None:
        """Write one encoded frame, whole, within the send timeout.

        A guest that stopped reading its port (a hung kernel) makes QEMU stop reading the socket;
        waiting for it without a bound would hang whoever sends, the run loop's KILL included.

        Raises:
            SandboxLost: the channel is closed or broken, or the guest did not take the frame (or
                another sender's) within the timeout; the stream is out of step after that.
        """
        deadline = time.monotonic() + self._send_timeout_s
        stalled = SandboxLost(
            f"the guest has not read its control port for {self._send_timeout_s:g}s (hung or overloaded)",
            "the VM is stopped; start a new sandbox (the serial log may say why)",
        )
        if not self._send_lock.acquire(timeout=self._send_timeout_s):
            raise stalled
        try:
            if self._closed or self._broken:
                raise OSError("channel closed" if self._closed else "an earlier frame was cut short")
            view = memoryview(frame)
            poller = select.poll()
            poller.register(self._fd, select.POLLOUT)
            while view:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not poller.poll(remaining * 1000):
                    self._broken = True
                    raise stalled
                with contextlib.suppress(BlockingIOError):
                    view = view[os.write(self._fd, view) :]
        except OSError as exc:
            raise SandboxLost(f"cannot send to the guest agent: {exc}", "the VM is gone; start a new sandbox") from exc
        finally:
            self._send_lock.release()

    def read_frames(self, timeout_s: float | None) -> list[Frame] | None:
        """Read once and return the frames completed (possibly none); None when ``timeout_s`` passed.

        Raises:
            SandboxLost: EOF, a read error, or a framing error.
        """
        try:
            poller = select.poll()
            poller.register(self._fd, select.POLLIN)
            if not poller.poll(None if timeout_s is None else timeout_s * 1000):
                return None
            data = os.read(self._fd, _READ_BYTES)
        except BlockingIOError:
            return []  # woken without data (the descriptor is non-blocking for the senders)
        except (OSError, ValueError) as exc:
            raise SandboxLost(
                f"cannot read from the guest agent: {exc}", "the VM is gone; start a new sandbox"
            ) from exc
        if not data:
            raise SandboxLost(
                "the guest agent closed its control channel (the VM stopped or the agent exited)",
                "the VM is gone; start a new sandbox (the serial log says why)",
            )
        return self._decoder.feed(data)

    def shutdown(self) -> None:
        """Wake a reader blocked in ``read_frames`` (it then sees EOF); the descriptor stays open."""
        try:
            sock = socket.socket(fileno=os.dup(self._fd))
        except OSError:
            return  # not a socket: closing the VMM ends the stream instead
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()

    def close(self) -> None:
        with self._send_lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)
