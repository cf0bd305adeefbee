"""The host's side of the control channel to the in-sandbox supervisor (pid 1 of a sandbox).

The protocol is in docs/supervisor-protocol.md; the supervisor is ``runtime/supervisor/contain-supervisor.c``.
Frames both ways are a 4-byte little-endian length (at most ``MAX_FRAME_BYTES``) and then that
many bytes of NUL-terminated UTF-8 items; the first item is the message type, the rest are
``key=value``. A RUN carries exactly three fds (stdin, stdout, stderr) as SCM_RIGHTS on the
sendmsg that carries the frame header.

What this module enforces: every reply is bounded, strictly parsed into a typed value and checked
against the request it answers; anything else (malformed, oversize, unexpected, EOF, a socket
error) raises ``SandboxLost`` with the cause, because a channel out of step cannot be trusted.
Requests are validated before they are sent (no NUL in an item, known rlimit names, a bounded
frame): a caller bug raises ``ValueError`` and nothing is sent.

What it does not do: it starts nothing and kills nothing by itself. Launching bwrap, tearing the
sandbox down when the channel is lost, timeouts of a whole run and output capture belong to the
launcher and ``Sandbox``. The codec half (``encode_frame``, ``decode_items``, ``parse_reply``)
is pure and tested without a supervisor.
"""

from __future__ import annotations

import os
import re
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contain.errors import SandboxLost, SandboxStartError

__all__ = [
    "LANDLOCK_STATES",
    "MAX_FRAME_BYTES",
    "RLIMIT_NAMES",
    "SECUREBITS_STATES",
    "SPAWN_STAGES",
    "Exited",
    "Ready",
    "Rlimit",
    "SpawnFailed",
    "Started",
    "SupervisorChannel",
    "SupervisorErrorReply",
    "SupervisorReply",
    "decode_items",
    "encode_frame",
    "encode_run",
    "parse_reply",
]


# Same bound as MAX_FRAME_BYTES in contain-supervisor.c; the supervisor refuses larger frames.
MAX_FRAME_BYTES = 1 << 20
_HEADER = struct.Struct("<I")
_RECV_CHUNK = 65536

# The rlimits the supervisor knows (RLIMIT_NAMES in contain-supervisor.c), as in setrlimit(2) minus RLIMIT_.
RLIMIT_NAMES: tuple[str, ...] = (
    "AS",
    "CORE",
    "CPU",
    "DATA",
    "FSIZE",
    "MEMLOCK",
    "MSGQUEUE",
    "NOFILE",
    "NPROC",
    "SIGPENDING",
    "STACK",
)

# Where a spawn can fail ("setup" covers signals, setsid, oom_score_adj, no_new_privs and fd
# shuffling; "caps" is dropping every capability); docs/supervisor-protocol.md gives the order.
SPAWN_STAGES: tuple[str, ...] = ("fork", "setup", "landlock", "rlimit", "caps", "chdir", "exec")

LANDLOCK_STATES: tuple[str, ...] = ("applied", "off", "unavailable")

# READY's securebits=: "available" (the kernel has them; each workload gets NOROOT and friends
# locked where the supervisor holds CAP_SETPCAP), "unsupported" (gVisor: only ever reported when
# the host accepted the no-securebits difference, contain.runtime.kernel_differences).
SECUREBITS_STATES: tuple[str, ...] = ("available", "unsupported")


@dataclass(frozen=True)
class Rlimit:
    """One setrlimit(2) applied to a workload; ``None`` means unlimited (RLIM_INFINITY)."""

    name: str
    soft: int | None
    hard: int | None

    def __post_init__(self) -> None:
        if self.name not in RLIMIT_NAMES:
            raise ValueError(f"unknown rlimit {self.name!r}; known: {', '.join(RLIMIT_NAMES)}")
        for value in (self.soft, self.hard):
            if value is not None and not 0 <= value < 2**64 - 1:
                raise ValueError(f"rlimit {self.name} value {value} is out of range")
        if self.hard is not None and (self.soft is None or self.soft > self.hard):
            raise ValueError(f"rlimit {self.name}: soft {self.soft} is above hard {self.hard}")

    def item(self) -> str:
        """The ``rlimit=NAME:SOFT:HARD`` item for a RUN frame."""

        def spell(value: int | None) -> str:
            return "inf" if value is None else str(value)

        return f"rlimit={self.name}:{spell(self.soft)}:{spell(self.hard)}"


@dataclass(frozen=True)
class Ready:
    """The supervisor is pid 1, set up, and waiting for requests."""

    pid: int
    landlock: str  # one of LANDLOCK_STATES
    landlock_abi: int  # the ABI the ruleset uses; 0 unless landlock == "applied"
    landlock_skipped: tuple[str, ...] = ()  # auto mode only: paths that could not be granted
    securebits: str = "available"  # one of SECUREBITS_STATES


@dataclass(frozen=True)
class Started:
    """The workload was exec'd; ``pid`` is its pid inside the sandbox's pid namespace."""

    pid: int


@dataclass(frozen=True)
class SpawnFailed:
    """The workload never ran: ``stage`` (one of SPAWN_STAGES) failed with ``errno``."""

    stage: str
    errno: int

    @property
    def strerror(self) -> str:
        """The errno as text, e.g. 'No such file or directory'."""
        return os.strerror(self.errno)


@dataclass(frozen=True)
class Exited:
    """The run is over: main process reaped, every other process of the sandbox killed and reaped.

    ``status`` is the raw wait status of the main process. CPU times are summed over every process
    reaped during the run; ``maxrss_kb`` is the largest of them. ``oom_kills`` and
    ``pids_limit_hits`` are what a cgroup *inside* the sandbox counted during the run (the microVM
    guest agent reports them; the supervisor does not, and the host reads the sandbox's own cgroup
    instead): 0 when nobody counted.
    """

    status: int
    utime_us: int
    stime_us: int
    maxrss_kb: int
    oom_kills: int = 0
    pids_limit_hits: int = 0

    @property
    def exit_code(self) -> int | None:
        """The exit code, or None when the main process was killed by a signal."""
        return os.WEXITSTATUS(self.status) if os.WIFEXITED(self.status) else None

    @property
    def signal(self) -> int | None:
        """The signal that killed the main process, or None when it exited."""
        return os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else None


@dataclass(frozen=True)
class SupervisorErrorReply:
    """The supervisor refused a request (bad request, a run already active) or could not start."""

    message: str


SupervisorReply = Ready | Started | SpawnFailed | Exited | SupervisorErrorReply


# ---- pure codec ------------------------------------------------------------------------------


def encode_frame(items: Sequence[str]) -> bytes:
    """Encode one frame: length header plus NUL-terminated UTF-8 items.

    Args:
        items: the message type first, then ``key=value`` items.

    Returns:
        The bytes to send.

    Raises:
        ValueError: no items, an item containing NUL or not encodable as UTF-8, or a frame
            larger than MAX_FRAME_BYTES.
    """
    if not items:
        raise ValueError("a frame needs at least the message type")
    parts: list[bytes] = []
    for item in items:
        if "\0" in item:
            raise ValueError(f"item {item[:60]!r} contains NUL; items are NUL-terminated")
        parts.append(item.encode("utf-8") + b"\0")
    payload = b"".join(parts)
    if len(payload) > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {len(payload)} bytes exceeds the {MAX_FRAME_BYTES} byte limit")
    return _HEADER.pack(len(payload)) + payload


def decode_items(payload: bytes) -> list[str]:
    """Split a frame payload (without its header) into items.

    Raises:
        SandboxLost: the payload is empty, does not end in NUL, or is not UTF-8.
    """
    if not payload or payload[-1] != 0:
        raise SandboxLost(
            "supervisor sent a frame that is not a sequence of NUL-terminated items",
            "this is a bug in contain-supervisor or the host; report it with CONTAIN_DEBUG=1 output",
        )
    try:
        return [raw.decode("utf-8") for raw in payload[:-1].split(b"\0")]
    except UnicodeDecodeError as exc:
        raise SandboxLost(f"supervisor sent an item that is not UTF-8: {exc}", _BUG_FIX) from exc


_BUG_FIX = "this is a bug in contain-supervisor or the host; report it with CONTAIN_DEBUG=1 output"

# For each reply type: the keys it must carry exactly once. READY may repeat landlock_skipped.
_REPLY_KEYS: dict[str, frozenset[str]] = {
    "READY": frozenset({"pid", "landlock", "securebits"}),
    "STARTED": frozenset({"pid"}),
    "SPAWN_FAILED": frozenset({"stage", "errno"}),
    "EXITED": frozenset({"status", "utime_us", "stime_us", "maxrss_kb"}),
    "ERROR": frozenset({"message"}),
}
_REPEATABLE = frozenset({"landlock_skipped"})


def _lost(cause: str) -> SandboxLost:
    return SandboxLost(cause, _BUG_FIX)


# How the supervisor prints a number (%llu / %d): ASCII digits, no sign, no leading zero, at most the
# 20 digits of 2**64 - 1. Anything else is refused before int() sees it: int() takes "٣", "1_0"
# and " 7", and raises ValueError past 4300 digits (a 5,000-digit pid once escaped that way).
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,19}")


def _int(kind: str, key: str, text: str, *, low: int = 0, high: int = 2**64 - 1) -> int:
    if not _DECIMAL.fullmatch(text):
        raise _lost(f"supervisor {kind} has a malformed number {key}={text[:40]!r}")
    value = int(text)
    if not low <= value <= high:
        raise _lost(f"supervisor {kind} has {key}={value}, outside {low}..{high}")
    return value


def parse_reply(items: Sequence[str]) -> SupervisorReply:
    """Turn the items of one supervisor frame into a typed reply.

    Raises:
        SandboxLost: unknown type, missing, duplicate, unknown or malformed keys.
    """
    if not items:
        raise _lost("supervisor sent an empty frame")
    kind, rest = items[0], items[1:]
    required = _REPLY_KEYS.get(kind)
    if required is None:
        raise _lost(f"supervisor sent an unknown reply type {kind[:40]!r}")
    fields: dict[str, str] = {}
    repeated: list[str] = []
    for item in rest:
        key, sep, value = item.partition("=")
        if not sep:
            raise _lost(f"supervisor {kind} item {item[:60]!r} is not key=value")
        if kind == "READY" and key in _REPEATABLE:
            repeated.append(value)
        elif key not in required:
            raise _lost(f"supervisor {kind} has an unknown key {key[:40]!r}")
        elif key in fields:
            raise _lost(f"supervisor {kind} repeats key {key!r}")
        else:
            fields[key] = value
    missing = sorted(required - fields.keys())
    if missing:
        raise _lost(f"supervisor {kind} lacks {', '.join(missing)}")
    return _build_reply(kind, fields, tuple(repeated))


def _build_reply(kind: str, fields: dict[str, str], skipped: tuple[str, ...]) -> SupervisorReply:
    if kind == "READY":
        state, _, abi_text = fields["landlock"].partition(":")
        if state not in LANDLOCK_STATES or (state == "applied") != bool(abi_text):
            raise _lost(f"supervisor READY has landlock={fields['landlock'][:40]!r}")
        abi = _int(kind, "landlock", abi_text, low=1, high=1000) if abi_text else 0
        if fields["securebits"] not in SECUREBITS_STATES:
            raise _lost(f"supervisor READY has securebits={fields['securebits'][:40]!r}")
        pid = _int(kind, "pid", fields["pid"], low=1, high=2**31 - 1)
        return Ready(
            pid=pid, landlock=state, landlock_abi=abi, landlock_skipped=skipped, securebits=fields["securebits"]
        )
    if kind == "STARTED":
        return Started(pid=_int(kind, "pid", fields["pid"], low=1, high=2**31 - 1))
    if kind == "SPAWN_FAILED":
        if fields["stage"] not in SPAWN_STAGES:
            raise _lost(f"supervisor SPAWN_FAILED has an unknown stage {fields['stage'][:40]!r}")
        return SpawnFailed(stage=fields["stage"], errno=_int(kind, "errno", fields["errno"], high=4095))
    if kind == "EXITED":
        return Exited(
            status=_int(kind, "status", fields["status"], high=0xFFFF),
            utime_us=_int(kind, "utime_us", fields["utime_us"]),
            stime_us=_int(kind, "stime_us", fields["stime_us"]),
            maxrss_kb=_int(kind, "maxrss_kb", fields["maxrss_kb"]),
        )
    return SupervisorErrorReply(message=fields["message"])


def encode_run(argv: Sequence[str], env: Mapping[str, str], cwd: str, rlimits: Sequence[Rlimit]) -> bytes:
    """The RUN frame for one workload (fds travel separately, as SCM_RIGHTS).

    Raises:
        ValueError: empty argv, a relative cwd, an env key that is empty or contains '=',
            a repeated rlimit, NUL anywhere, or a frame over the limit.
    """
    if not argv:
        raise ValueError("argv must name a program")
    if not cwd.startswith("/"):
        raise ValueError(f"cwd {cwd!r} must be an absolute path inside the sandbox")
    names = [limit.name for limit in rlimits]
    if len(set(names)) != len(names):
        raise ValueError(f"rlimits repeat a name: {names}")
    items = ["RUN", f"cwd={cwd}"]
    items += [limit.item() for limit in rlimits]
    items += [f"arg={arg}" for arg in argv]
    for key, value in env.items():
        if not key or "=" in key:
            raise ValueError(f"environment key {key!r} must be non-empty and contain no '='")
        items.append(f"env={key}={value}")
    return encode_frame(items)


# ---- the channel -----------------------------------------------------------------------------


class SupervisorChannel:
    """Requests to, and replies from, one supervisor over a connected SOCK_STREAM Unix socket.

    One run at a time: ``start`` then ``wait_exited`` (until it returns an ``Exited``). ``kill``
    may be called from another thread while ``wait_exited`` blocks.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._send_lock = threading.Lock()
        self._run_active = False

    # -- requests

    def read_ready(self, timeout_s: float) -> Ready:
        """Wait for the supervisor's READY.

        Raises:
            SandboxStartError: the supervisor refused to start (its ERROR message is the cause), or
                did not answer within ``timeout_s``.
            SandboxLost: EOF or a malformed or unexpected frame.
        """
        reply = self.read_reply(timeout_s)
        if reply is None:
            raise SandboxStartError(
                f"the sandbox supervisor did not report READY within {timeout_s:g}s",
                "check that bwrap can start on this host (`contain doctor`)",
            )
        if isinstance(reply, SupervisorErrorReply):
            raise SandboxStartError(
                f"the sandbox supervisor refused to start: {reply.message}",
                "see the message; for Landlock, set hardening.landlock to auto or off",
            )
        if not isinstance(reply, Ready):
            raise _lost(f"supervisor sent {type(reply).__name__} before READY")
        return reply

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        rlimits: Sequence[Rlimit],
        fds: tuple[int, int, int],
        *,
        reply_timeout_s: float = 30.0,
    ) -> Started | SpawnFailed:
        """Ask the supervisor to run one workload with ``fds`` as its stdin, stdout and stderr.

        The caller keeps ownership of ``fds`` (the kernel duplicates them into the supervisor) and
        should close its copies of the workload's ends after this returns.

        Raises:
            ValueError: an invalid request (see ``encode_run``), or a run is already active.
            SandboxLost: the supervisor refused (ERROR), answered out of step, or is gone.
        """
        if self._run_active:
            raise ValueError("a run is already active on this supervisor; wait_exited() first")
        frame = encode_run(argv, env, cwd, rlimits)
        self.send_request(frame, fds=fds)
        reply = self.read_reply(reply_timeout_s)
        if reply is None:
            raise _lost(f"supervisor did not answer RUN within {reply_timeout_s:g}s")
        if isinstance(reply, SupervisorErrorReply):
            raise _lost(f"supervisor refused RUN: {reply.message}")
        if not isinstance(reply, Started | SpawnFailed):
            raise _lost(f"supervisor answered RUN with {type(reply).__name__}")
        self._run_active = isinstance(reply, Started)
        return reply

    def wait_exited(self, timeout_s: float | None) -> Exited | None:
        """Wait for the active run's EXITED; None when ``timeout_s`` passes first.

        Raises:
            ValueError: no run is active.
            SandboxLost: EOF or a reply other than EXITED.
        """
        if not self._run_active:
            raise ValueError("no run is active on this supervisor")
        reply = self.read_reply(timeout_s)
        if reply is None:
            return None
        if not isinstance(reply, Exited):
            raise _lost(f"supervisor sent {type(reply).__name__} while a run was active")
        self._run_active = False
        return reply

    def fileno(self) -> int:
        """The socket's descriptor, so a caller can wait on it with select alongside pipes."""
        return self._sock.fileno()

    def kill(self) -> None:
        """SIGKILL every process of the sandbox but the supervisor; the active run then reports EXITED.

        Raises:
            SandboxLost: the supervisor is gone.
        """
        self.send_request(encode_frame(["KILL"]))

    def exit(self) -> None:
        """Ask the supervisor to kill everything and exit (the sandbox then ends).

        Raises:
            SandboxLost: the supervisor is already gone.
        """
        self.send_request(encode_frame(["EXIT"]))

    def close(self) -> None:
        """Close the socket; the supervisor sees EOF, kills everything and exits."""
        self._sock.close()

    # -- low level (also used by tests that speak raw protocol)

    def send_request(self, frame: bytes, *, fds: Sequence[int] = ()) -> None:
        """Send one encoded frame; ``fds`` ride as SCM_RIGHTS with its first bytes.

        Raises:
            SandboxLost: the socket is closed or broken.
        """
        try:
            with self._send_lock:
                sent = socket.send_fds(self._sock, [frame], list(fds)) if fds else 0
                if sent < len(frame):
                    self._sock.sendall(frame[sent:])
        except OSError as exc:
            raise SandboxLost(
                f"cannot send to the sandbox supervisor: {exc}", "the sandbox is gone; start a new one"
            ) from exc

    def read_reply(self, timeout_s: float | None) -> SupervisorReply | None:
        """Read and parse one frame; None when ``timeout_s`` passes first (state is kept).

        Raises:
            SandboxLost: EOF, a socket error, an oversize or malformed frame.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            payload = self._take_frame()
            if payload is not None:
                return parse_reply(decode_items(payload))
            if not self._fill(deadline):
                return None

    def _take_frame(self) -> bytes | None:
        if len(self._buf) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack_from(self._buf)
        if length > MAX_FRAME_BYTES:
            raise _lost(f"supervisor frame of {length} bytes exceeds the {MAX_FRAME_BYTES} byte limit")
        end = _HEADER.size + length
        if len(self._buf) < end:
            return None
        payload = bytes(self._buf[_HEADER.size : end])
        del self._buf[:end]
        return payload

    def _fill(self, deadline: float | None) -> bool:
        """Receive more bytes; False on timeout."""
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            poller = select.poll()  # not select(): it breaks on fds >= 1024
            poller.register(self._sock, select.POLLIN)
            if not poller.poll(None if remaining is None else remaining * 1000):
                return False
            chunk = self._sock.recv(_RECV_CHUNK)
        except (OSError, ValueError) as exc:  # ValueError: the socket was closed under us
            raise SandboxLost(
                f"cannot read from the sandbox supervisor: {exc}", "the sandbox is gone; start a new one"
            ) from exc
        if not chunk:
            raise SandboxLost(
                "the sandbox supervisor closed its control channel (it exited or was killed)",
                "the sandbox is gone; start a new one (bwrap's stderr says why)",
            )
        self._buf += chunk
        return True
