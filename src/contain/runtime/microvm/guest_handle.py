"""``GuestSandbox``: a ``RunningSandbox`` over the guest agent's control channel.

The VMM side (``MicroVMBackend``) boots the VM, connects the control port's host end and hands
the connected descriptor plus a small ``Vmm`` object (pid, kill, close, cgroup, network
namespace) to ``GuestSandbox``; everything else a sandbox does goes through frames
(docs/guest-agent-protocol.md, ``guest_channel``).

Two threads per sandbox, so that neither side of the byte stream ever waits on the other:

- the **reader** only reads and decodes frames. It never writes to a pipe or to the channel, so
  the agent's blocking writes always complete. Output data goes to per-stream buffers, replies to
  a small bounded queue, EXITED to its slot;
- the **pump** (one per command, ``guest_stdio.CommandStdio``) writes buffered output to the
  command's host pipes, returning credit for what the pipe took, and reads the host's stdin
  within the agent's credit. Sends have a deadline (``guest_channel.SEND_TIMEOUT_S``): a guest
  that stops reading loses the channel instead of blocking a sender.

What this module enforces, against a guest that is hostile (its kernel may be the workload's):
output held on the host is at most one ``WINDOW_BYTES`` window per stream (data beyond the
credit loses the channel); nothing the workload prints is parsed (it travels inside DATA bodies);
replies arrive only when a request waits for them; file transfers are checked again on the host
(sizes as announced and within the caller's bound, export paths normalised and in walk order,
entry, byte and depth limits: ``guest_export.ExportWalk``), and the host writes exports through
``O_NOFOLLOW`` descriptors under the anchored destination, as ``files.export_tree`` does.

What it does not do: boot, stop or limit the VM (the ``Vmm``); decide scratch paths (``Sandbox``
checked them with ``files.scratch_relative``); cap output (the caller's ``CappedReader``; the
agent caps too when ``GuestLimits.output_max_bytes`` is given).

Why one file past 600 lines: it is one mechanism, the host's half of the protocol (requests,
the reader thread and the reply rules); the frame codec, the stdio pump and the export walk are
already their own modules.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import stat
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple, Protocol

from contain._log import LazyLogger
from contain.errors import DeadlinePassed, FileTransferError, SandboxLost
from contain.runtime.backend import CommandRequest
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.files import EXPORT_MAX_DEPTH, ExportDestination, ExportReport, export_entry_limit
from contain.runtime.microvm.guest_channel import (
    CHUNK_BYTES,
    PROTOCOL_VERSION,
    WINDOW_BYTES,
    Frame,
    GuestChannel,
    GuestExited,
    GuestReady,
    MsgType,
    Stream,
    encode_frame,
    encode_request,
    encode_spawn,
    number,
    parse_credit,
    parse_error,
    parse_exited,
    parse_fields,
    parse_ready,
    parse_spawn_failed,
    parse_started,
)
from contain.runtime.microvm.guest_export import BrokenRule, ExportWalk
from contain.runtime.microvm.guest_stdio import CommandStdio
from contain.runtime.supervisor_channel import SpawnFailed, Started

__all__ = ["GuestLimits", "GuestSandbox", "Vmm", "is_dev_null"]

log = LazyLogger(__name__)

_REPLY_TIMEOUT_S = 30.0  # one reply frame; TCG guests answer in well under a second
_REPLY_QUEUE_FRAMES = 64  # replies wait here for the requester: at most 64 frames of 256 KiB


class Vmm(Protocol):
    """What the VMM side gives the handle: the VM's host process and what outside judges need.

    ``pid``: the VMM's host pid; ``netns_path``: the network namespace egress attaches to (the
    VMM's); ``cgroup``: the host cgroup the VMM runs in; ``kill``: SIGKILL the VMM now (the guest
    and every process in it end); ``close``: wait for the VMM to end (killing it after a short
    grace) and remove what it left.
    """

    @property
    def pid(self) -> int: ...

    @property
    def netns_path(self) -> str: ...

    @property
    def cgroup(self) -> SandboxCgroup | None: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...


class GuestLimits(NamedTuple):
    """Budgets the agent applies inside the guest (None: not asked)."""

    memory_max_bytes: int | None = None
    pids_max: int | None = None
    output_max_bytes: int | None = None  # the boundary's output cap; the agent stops one byte past it
    seccomp_bpf: bytes = b""  # contain's filter for the guest (backend.guest_seccomp_filter); none: no SPAWN


_NO_LIMITS = GuestLimits()
_DEV_NULL = os.makedev(1, 3)


def is_dev_null(fd: int) -> bool:
    """Whether ``fd`` is /dev/null (the character device 1:3): a stdin that is at EOF at once."""
    st = os.fstat(fd)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == _DEV_NULL
# What to do about a refused GET_FILE, by the agent's errno.
_GET_FIXES = {errno.EFBIG: "pass a larger max_bytes", errno.ELOOP: "use a plain path with no symlinks"}
_GET_FIX = "get only regular files under a scratch path"


class GuestSandbox:
    """A running microVM sandbox, reached only through the guest agent's channel.

    Create it with ``connect`` (HELLO/READY) once the VMM's control socket is connected.
    """

    def __init__(self, channel: GuestChannel, vmm: Vmm, *, limits: GuestLimits = _NO_LIMITS) -> None:
        self._channel = channel
        self._vmm = vmm
        self._limits = limits
        self._lock = threading.Condition()
        self._request_lock = threading.Lock()  # one request/reply exchange at a time
        self._replies: queue.Queue[Frame | None] = queue.Queue(_REPLY_QUEUE_FRAMES)
        self._awaiting = False
        self._tx_unacked = 0
        self._run: CommandStdio | None = None
        self._lost: str | None = None
        self._closed = False
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._pump_wake_r, self._pump_wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.ready: GuestReady | None = None
        self._reader = threading.Thread(target=self._read_loop, name="contain-guest-reader", daemon=True)
        self._reader.start()

    @classmethod
    def connect(
        cls, channel: GuestChannel, vmm: Vmm, *, limits: GuestLimits = _NO_LIMITS, timeout_s: float = 30.0
    ) -> GuestSandbox:
        """Start the handle and complete the version handshake.

        Raises:
            SandboxLost: the agent did not answer READY in time, or answered something else.
        """
        sandbox = cls(channel, vmm, limits=limits)
        try:
            sandbox.hello(timeout_s=timeout_s)
        except BaseException:
            sandbox.destroy()
            sandbox.close()
            raise
        return sandbox

    # -- RunningSandbox: identity -----------------------------------------------------------------

    @property
    def host_pid(self) -> int:
        """The VMM's host pid (the guest's processes have none on the host)."""
        return self._vmm.pid

    @property
    def netns_path(self) -> str:
        return self._vmm.netns_path

    @property
    def cgroup(self) -> SandboxCgroup | None:
        return self._vmm.cgroup

    # -- requests ---------------------------------------------------------------------------------

    def hello(self, *, timeout_s: float = _REPLY_TIMEOUT_S) -> GuestReady:
        """HELLO -> READY; also the first request after a snapshot restore.

        Raises:
            SandboxLost: no READY, or a malformed one.
        """
        with self._request_lock:
            reply = self._call(encode_request(MsgType.HELLO, [f"version={PROTOCOL_VERSION}"]), timeout_s=timeout_s)
            self._awaiting = False
        if reply.type is MsgType.ERROR:
            raise self._lose(f"the guest agent refused HELLO: {parse_error(reply.body)[0][:200]}")
        if reply.type is not MsgType.READY:
            raise self._lose(f"the guest agent answered HELLO with {reply.type.name}")
        self.ready = parse_ready(reply.body)
        return self.ready

    def reseed(self, seed: bytes, *, timeout_s: float = _REPLY_TIMEOUT_S) -> None:
        """Mix ``seed`` (32..512 host random bytes) into the guest's RNG and credit it.

        ``timeout_s``: longer when this is the first request to an agent that may still be starting.

        Raises:
            SandboxLost: the agent refused or broke the protocol.
        """
        if not 32 <= len(seed) <= 512:
            raise ValueError("a reseed carries 32..512 bytes")
        self._simple(encode_frame(MsgType.RESEED, seed), "RESEED", timeout_s=timeout_s)

    def set_identity(self, *, hostname: str, machine_id: str, realtime_ns: int | None = None) -> None:
        """Give the guest a fresh hostname and machine id, and the host's wall clock (after a restore).

        ``realtime_ns`` (``time.time_ns()`` read just before sending) sets the guest's
        CLOCK_REALTIME; the guest is then behind by the frame's one-way delay (milliseconds).
        Not enforced: that the guest keeps the time (its kernel's clock drifts as any VM's).

        Raises:
            SandboxLost: the agent refused or broke the protocol.
        """
        items = [f"hostname={hostname}", f"machine_id={machine_id}"]
        if realtime_ns is not None:
            items.append(f"realtime_ns={realtime_ns}")
        self._simple(encode_request(MsgType.IDENTITY, items), "IDENTITY")

    def _simple(self, frame: bytes, what: str, *, timeout_s: float = _REPLY_TIMEOUT_S) -> None:
        with self._request_lock:
            reply = self._call(frame, timeout_s=timeout_s)
            self._awaiting = False
        if reply.type is MsgType.ERROR:
            raise self._lose(f"the guest agent refused {what}: {parse_error(reply.body)[0][:200]}")
        if reply.type is not MsgType.OK or reply.body:
            raise self._lose(f"the guest agent answered {what} with {reply.type.name}")

    def spawn(self, request: CommandRequest, fds: tuple[int, int, int]) -> Started | SpawnFailed:
        """Start one command; its stdio is pumped between ``fds`` (duplicated here) and DATA frames.

        The wait for STARTED ends at ``request.deadline`` when that comes before the reply timeout.
        A stdin that is /dev/null is not pumped: its EOF (an empty stdin DATA) goes in the same
        write as the SPAWN, so the guest takes one wake-up for both (the agent handles the EOF
        after the SPAWN, in order; after a refused SPAWN it has no run to act on).

        Raises:
            DeadlinePassed: the run's deadline passed before the agent answered (the VM is stopped).
            SandboxLost: the agent is gone, refused the request, or answered out of step.
        """
        frame = encode_spawn(
            request.argv,
            request.env,
            request.cwd,
            request.rlimits,
            seccomp_bpf=self._limits.seccomp_bpf,  # empty: ValueError, nothing is sent
            memory_max_bytes=self._limits.memory_max_bytes,
            pids_max=self._limits.pids_max,
            # one byte past the host's own cap, so the host's reader still sees the cap passed
            output_max_bytes=None if self._limits.output_max_bytes is None else self._limits.output_max_bytes + 1,
        )
        stdin_at_eof = is_dev_null(fds[0])
        if stdin_at_eof:
            frame += encode_frame(MsgType.DATA, b"", stream=Stream.STDIN)
        with self._request_lock:
            self._finish_previous_run()
            run = CommandStdio(
                (-1 if stdin_at_eof else os.dup(fds[0]), os.dup(fds[1]), os.dup(fds[2])),
                lock=self._lock,
                send=self._send,
                is_lost=lambda: self._lost is not None,
                wake_fd=self._pump_wake_r,
            )
            with self._lock:
                self._run = run
            try:
                reply = self._call(frame, deadline=request.deadline)
            except BaseException:
                self._drop_run(run)
                raise
            finally:
                self._awaiting = False
            if reply.type is MsgType.STARTED:
                started = parse_started(reply.body)
                run.start_pump()
                return started
            self._drop_run(run)
            if reply.type is MsgType.SPAWN_FAILED:
                return parse_spawn_failed(reply.body)
            if reply.type is MsgType.ERROR:
                raise self._lose(f"the guest agent refused SPAWN: {parse_error(reply.body)[0][:200]}")
            raise self._lose(f"the guest agent answered SPAWN with {reply.type.name}")

    def wait_exited(self, timeout_s: float | None) -> GuestExited | None:
        """The command's EXITED, or None when ``timeout_s`` passed first.

        Raises:
            SandboxLost: the channel was lost.
        """
        with self._lock:
            run = self._run
            if run is None:
                raise ValueError("no command is running")
            self._lock.wait_for(lambda: run.exited is not None or self._lost is not None, timeout=timeout_s)
            if run.exited is not None:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 64)
                return run.exited
            if self._lost is not None:
                raise SandboxLost(self._lost, "the VM is gone; start a new sandbox (the serial log says why)")
            return None

    def fileno(self) -> int:
        """Readable while an exit report (or the loss of the channel) waits to be collected."""
        return self._wake_r

    def kill(self) -> None:
        """Kill the command and every process of the guest but the agent.

        Raises:
            SandboxLost: the channel is lost.
        """
        self._send(encode_request(MsgType.KILL))

    # -- files ------------------------------------------------------------------------------------

    def put_file(self, scratch_root: str, relative: str, data: bytes, *, mode: int, label: str) -> None:
        """Write a file under ``scratch_root`` in the guest (the agent's no-follow rules).

        Raises:
            FileTransferError: the agent refused (symlink, not a regular file, I/O).
            SandboxLost: the channel broke.
        """
        items = [f"root={scratch_root}", f"path={relative}", f"mode={mode & 0o777:o}", f"size={len(data)}"]
        with self._request_lock:
            try:
                self._awaiting = True
                self._send(encode_request(MsgType.PUT_FILE, items))
                view = memoryview(data)
                for start in range(0, len(data), CHUNK_BYTES):
                    self._send(
                        encode_frame(MsgType.DATA, bytes(view[start : start + CHUNK_BYTES]), stream=Stream.TRANSFER)
                    )
                reply = self._call(encode_frame(MsgType.DATA, b"", stream=Stream.TRANSFER))
            finally:
                self._awaiting = False
        if reply.type is MsgType.ERROR:
            message, _ = parse_error(reply.body)
            raise FileTransferError(
                f"cannot write {label} in the guest: {message[:200]}", "use a plain path with no symlinks under scratch"
            )
        if reply.type is not MsgType.OK:
            raise self._lose(f"the guest agent answered PUT_FILE with {reply.type.name}")

    def get_file(self, scratch_root: str, relative: str, *, max_bytes: int, label: str) -> bytes:
        """Read a regular file under ``scratch_root`` in the guest, at most ``max_bytes``.

        Raises:
            FileTransferError: missing, a symlink, not a regular file, too large, or changed while read.
            SandboxLost: the guest broke the protocol (more bytes than announced or allowed).
        """
        items = [f"root={scratch_root}", f"path={relative}", f"max_bytes={max_bytes}"]
        with self._request_lock:
            try:
                reply = self._call(encode_request(MsgType.GET_FILE, items))
                if reply.type is MsgType.ERROR:
                    message, err = parse_error(reply.body)
                    raise FileTransferError(
                        f"cannot read {label} in the guest: {message[:200]}", _GET_FIXES.get(err, _GET_FIX)
                    )
                if reply.type is not MsgType.FILE:
                    raise self._lose(f"the guest agent answered GET_FILE with {reply.type.name}")
                size = number("FILE", "size", parse_fields(MsgType.FILE, reply.body, frozenset({"size"}))["size"])
                if size > max_bytes:
                    raise self._lose(f"the guest announced {size} bytes for {label}, over the {max_bytes} asked for")
                chunks: list[bytes] = []
                received = 0
                for chunk in self._chunks(size):
                    chunks.append(chunk)
                    received += len(chunk)
            finally:
                self._awaiting = False
        if received != size:
            raise FileTransferError(
                f"{label} changed while it was read ({received} of {size} bytes)", "read it again once it is complete"
            )
        return b"".join(chunks)

    def export(self, sandbox_path: str, destination: ExportDestination, *, max_bytes: int) -> ExportReport:
        """Copy the guest tree at ``sandbox_path`` into ``destination`` under export rules.

        Raises:
            FileTransferError: the guest could not open ``sandbox_path``, or the destination is unusable.
            SandboxLost: the guest broke the export rules.
        """
        max_entries = export_entry_limit(max_bytes)
        walk = ExportWalk(destination.open_for_export(), max_bytes=max_bytes, max_depth=EXPORT_MAX_DEPTH)
        items = [
            f"root={sandbox_path}",
            f"max_bytes={max_bytes}",
            f"max_entries={max_entries}",
            f"max_depth={EXPORT_MAX_DEPTH}",
        ]
        try:
            with self._request_lock:
                try:
                    reply = self._call(encode_request(MsgType.EXPORT, items))
                    if reply.type is MsgType.ERROR:
                        message, _ = parse_error(reply.body)
                        raise FileTransferError(
                            f"cannot export {sandbox_path} from the guest: {message[:200]}", "check the path"
                        )
                    entries = 0
                    while reply.type is MsgType.ENTRY:
                        entries += 1
                        if entries > max_entries:
                            raise self._lose(f"the guest sent more than {max_entries} export entries")
                        try:
                            walk.entry(reply.body, lambda size: self._chunks(size))
                        except BrokenRule as exc:
                            raise self._lose(str(exc)) from None
                        reply = self._next_reply()
                    if reply.type is not MsgType.EXPORT_END:
                        raise self._lose(f"the guest sent {reply.type.name} during an export")
                    end = parse_fields(MsgType.EXPORT_END, reply.body, frozenset(), frozenset({"stopped"}))
                    if "stopped" in end:
                        walk.report.stopped = (
                            f"the export limit of {max_entries} entries was reached; the rest was not copied"
                        )
                finally:
                    self._awaiting = False
        finally:
            walk.close()
        return walk.finish()

    def _chunks(self, size: int) -> Iterator[bytes]:
        """The DATA frames of one file on the transfer stream, each credited back once consumed."""
        left = size
        while (frame := self._next_reply()).body:
            if frame.type is not MsgType.DATA:
                raise self._lose(f"the guest sent {frame.type.name} inside a file's data")
            if len(frame.body) > left:
                raise self._lose("the guest sent more file data than it announced")
            left -= len(frame.body)
            with self._lock:  # the reader thread adds to it
                self._tx_unacked -= len(frame.body)
            self._send(encode_request(MsgType.CREDIT, [f"bytes={len(frame.body)}"], stream=Stream.TRANSFER))
            yield frame.body
        if frame.type is not MsgType.DATA:
            raise self._lose(f"the guest sent {frame.type.name} inside a file's data")

    # -- destroy / close --------------------------------------------------------------------------

    def destroy(self) -> None:
        """Kill the VM from the host (used when the agent stops answering)."""
        self._vmm.kill()
        self._fail("the VM was destroyed from the host")

    def close(self) -> None:
        """Ask the agent to power the guest off, then let the VMM side reap it; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._lost is None:
            with contextlib.suppress(SandboxLost), self._request_lock:
                self._call(encode_request(MsgType.SHUTDOWN), timeout_s=2.0)
        self._channel.shutdown()
        self._fail("the sandbox was closed")
        self._vmm.close()
        self._reader.join(timeout=5.0)
        run = self._run
        pump = run.pump_thread if run is not None else None
        if pump is not None:
            pump.join(timeout=5.0)
        if self._reader.is_alive() or (pump is not None and pump.is_alive()):
            # A thread still blocked on these descriptors would act on whatever file reuses their
            # numbers; leaking four descriptors is the lesser harm.
            log.warning("guest sandbox threads did not stop; leaving their descriptors open")
            return
        self._channel.close()
        for fd in (self._wake_r, self._wake_w, self._pump_wake_r, self._pump_wake_w):
            os.close(fd)

    # -- internals: requests ----------------------------------------------------------------------

    def _send(self, frame: bytes) -> None:
        if self._lost is not None:
            raise SandboxLost(self._lost, "the VM is gone; start a new sandbox")
        try:
            self._channel.send(frame)
        except SandboxLost as exc:
            self._fail(exc.cause)  # waits end now, not at their own timeouts
            raise

    def _call(self, frame: bytes, *, timeout_s: float = _REPLY_TIMEOUT_S, deadline: float | None = None) -> Frame:
        """Send a request and return the first reply frame (the caller clears ``_awaiting``)."""
        self._awaiting = True
        self._send(frame)
        return self._next_reply(timeout_s=timeout_s, deadline=deadline)

    def _next_reply(self, *, timeout_s: float = _REPLY_TIMEOUT_S, deadline: float | None = None) -> Frame:
        """The next reply, waiting ``timeout_s`` at most and never past ``deadline`` (monotonic).

        Raises:
            DeadlinePassed: ``deadline`` came first (the channel is lost: the reply may still come).
            SandboxLost: no reply within ``timeout_s``, or the channel was lost.
        """
        left = None if deadline is None else deadline - time.monotonic()
        bounded_by_deadline = left is not None and left < timeout_s
        wait_s = max(0.0, left) if bounded_by_deadline and left is not None else timeout_s
        try:
            frame = self._replies.get(timeout=wait_s)
        except queue.Empty:
            if bounded_by_deadline:
                cause = "the run's deadline passed before the guest agent answered"
                self._fail(cause)
                raise DeadlinePassed(cause, "raise the wall-clock limit, or check the host's load") from None
            raise self._lose(f"the guest agent did not answer within {timeout_s:g}s") from None
        if frame is None:
            raise SandboxLost(self._lost or "the channel was lost", "the VM is gone; start a new sandbox")
        return frame

    def _lose(self, cause: str) -> SandboxLost:
        self._fail(cause)
        return SandboxLost(cause, "the VM was stopped; start a new sandbox (the serial log may say why)")

    def _finish_previous_run(self) -> None:
        run = self._run
        if run is None:
            return
        if run.exited is None and self._lost is None:
            raise ValueError("a command is still running; wait_exited() first")
        if run.pump_thread is not None:
            run.pump_thread.join(timeout=_REPLY_TIMEOUT_S)
            if run.pump_thread.is_alive():
                raise self._lose("the previous command's output did not end")
        with self._lock:
            self._run = None

    def _drop_run(self, run: CommandStdio) -> None:
        with self._lock:
            run.close_fds()
            if self._run is run:
                self._run = None

    # -- internals: the reader thread -------------------------------------------------------------

    def _read_loop(self) -> None:
        try:
            while True:
                frames = self._channel.read_frames(None)
                for frame in frames or ():
                    self._on_frame(frame)
        except SandboxLost as exc:
            self._fail(exc.cause)
        except Exception as exc:  # a bug here must still end waits; never leave a caller blocked
            log.debug("guest reader failed: %r", exc)
            self._fail(f"the guest channel reader failed: {exc}")

    def _on_frame(self, frame: Frame) -> None:
        if frame.type is MsgType.DATA and frame.stream in (Stream.STDOUT, Stream.STDERR):
            self._on_output(frame)
        elif frame.type is MsgType.CREDIT:
            credit = parse_credit(frame.body)
            with self._lock:
                run = self._run
                if run is None or run.stdin_fd < 0:
                    return  # late credit for a stdin already closed
                run.stdin_credit += credit
                if run.stdin_credit > WINDOW_BYTES:
                    raise self._lose("the guest credited more stdin than the host sent")
            self._wake_pump()
        elif frame.type is MsgType.EXITED:
            exited = parse_exited(frame.body)
            with self._lock:
                run = self._run
                if run is None or run.exited is not None:
                    raise self._lose("the guest sent EXITED without a running command")
                run.exited = exited
                self._lock.notify_all()
            os.write(self._wake_w, b"x")
            self._wake_pump()
        else:
            if not self._awaiting:
                raise self._lose(f"the guest sent {frame.type.name} {frame.stream.name} while no request waited")
            if frame.type is MsgType.DATA:  # the transfer stream
                with self._lock:  # the requester's thread takes from it
                    self._tx_unacked += len(frame.body)
                    over = self._tx_unacked > WINDOW_BYTES
                if over:
                    raise self._lose("the guest sent file data beyond its credit")
            while True:  # blocks when full: bounded, and the consumer does not depend on this thread
                try:
                    self._replies.put(frame, timeout=1.0)
                    return
                except queue.Full:
                    if self._lost is not None:
                        return

    def _on_output(self, frame: Frame) -> None:
        with self._lock:
            run = self._run
            if run is None:
                raise self._lose("the guest sent output without a running command")
            out = run.out[frame.stream]
            if out.eof:
                raise self._lose(f"the guest sent {frame.stream.name} after its end")
            if not frame.body:
                out.eof = True
            else:
                out.unacked += len(frame.body)
                if out.unacked > WINDOW_BYTES:
                    raise self._lose(f"the guest sent {frame.stream.name} beyond its credit window")
                if out.discard:  # credited back by the pump: the reader never writes to the channel
                    out.owed += len(frame.body)
                else:
                    out.pending += frame.body
        self._wake_pump()

    def _fail(self, cause: str) -> None:
        with self._lock:
            if self._lost is None:
                self._lost = cause
                log.debug("guest channel lost: %s", cause)
            self._lock.notify_all()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        self._wake_pump()
        with contextlib.suppress(queue.Full):
            self._replies.put_nowait(None)

    def _wake_pump(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._pump_wake_w, b"x")


if TYPE_CHECKING:
    from contain.runtime.backend import RunningSandbox

    _CONFORMS: type[RunningSandbox] = GuestSandbox
