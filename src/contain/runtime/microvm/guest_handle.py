"""``GuestSandbox``: a ``RunningSandbox`` over the guest agent's control channel.

The VMM side (``MicroVMBackend``) boots the VM, connects the control port's host end and hands
the connected descriptor plus a small ``Vmm`` object (pid, kill, close, cgroup, network
namespace) to ``GuestSandbox``; everything else a sandbox does goes through frames
(docs/guest-agent-protocol.md, ``guest_channel``).

Two threads per sandbox, so that neither side of the byte stream ever waits on the other:

- the **reader** only reads and decodes frames. It never writes to a pipe or to the channel, so
  the agent's blocking writes always complete. Output data goes to per-stream buffers, replies to
  a small bounded queue, EXITED to its slot;
- the **pump** (one per command) writes buffered output to the command's host pipes, returning
  credit for what the pipe took, and reads the host's stdin within the agent's credit.

What this module enforces, against a guest that is hostile (its kernel may be the workload's):
output held on the host is at most one ``WINDOW_BYTES`` window per stream (data beyond the
credit loses the channel); nothing the workload prints is parsed (it travels inside DATA bodies);
replies arrive only when a request waits for them; file transfers are checked again on the host
(sizes as announced and within the caller's bound, export paths normalised and in walk order,
entry, byte and depth limits), and the host writes exports through ``O_NOFOLLOW`` descriptors
under the anchored destination, as ``files.export_tree`` does.

What it does not do: boot, stop or limit the VM (the ``Vmm``); decide scratch paths (``Sandbox``
checked them with ``files.scratch_relative``); cap output (the caller's ``CappedReader``; the
agent caps too when ``GuestLimits.output_max_bytes`` is given).
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import selectors
import stat
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple, Protocol

from contain._log import LazyLogger
from contain.errors import FileTransferError, SandboxLost
from contain.runtime.backend import CommandRequest
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.files import EXPORT_MAX_DEPTH, ExportDestination, ExportReport, export_entry_limit
from contain.runtime.microvm.guest_channel import (
    CHUNK_BYTES,
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
from contain.runtime.supervisor_channel import SpawnFailed, Started

__all__ = ["GuestLimits", "GuestSandbox", "Vmm"]

log = LazyLogger(__name__)

_REPLY_TIMEOUT_S = 30.0  # one reply frame; TCG guests answer in well under a second
_REPLY_QUEUE_FRAMES = 64  # replies wait here for the requester: at most 64 frames of 256 KiB
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SKIP_REASONS = {
    "type": "not a regular file or directory",
    "bytes": "export limit of {max_bytes} bytes reached",
    "open": "could not be opened",
}


class Vmm(Protocol):
    """What the VMM side gives the handle: the VM's host process and what outside judges need."""

    @property
    def pid(self) -> int:
        """The VMM's host pid."""
        ...

    @property
    def netns_path(self) -> str:
        """The network namespace egress attaches to (the VMM's)."""
        ...

    @property
    def cgroup(self) -> SandboxCgroup | None:
        """The host cgroup the VMM runs in."""
        ...

    def kill(self) -> None:
        """SIGKILL the VMM now (the guest and every process in it end)."""
        ...

    def close(self) -> None:
        """Wait for the VMM to end (killing it after a short grace) and remove what it left."""
        ...


class GuestLimits(NamedTuple):
    """Budgets the agent applies inside the guest (None: not asked)."""

    memory_max_bytes: int | None = None
    pids_max: int | None = None
    output_max_bytes: int | None = None


_NO_LIMITS = GuestLimits()


class _Output:
    """One output stream of the running command, as the host holds it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd  # the host pipe's write end (ours: a dup), -1 once closed
        self.pending = bytearray()
        self.unacked = 0  # bytes the guest sent that the host has not credited back
        self.eof = False
        self.discard = False  # the host reader went away: drop data, credit it back
        self.owed = 0  # credit for dropped data that the pump still has to send


class _Run:
    """The state of one command: its host-side fds and flow-control counters."""

    def __init__(self, fds: tuple[int, int, int]) -> None:
        self.stdin_fd = fds[0]
        self.out = {Stream.STDOUT: _Output(fds[1]), Stream.STDERR: _Output(fds[2])}
        self.stdin_credit = WINDOW_BYTES
        self.exited: GuestExited | None = None
        self.exit_taken = False
        self.pump: threading.Thread | None = None

    def close_fds(self) -> None:
        for out in self.out.values():
            if out.fd >= 0:
                os.close(out.fd)
                out.fd = -1
        if self.stdin_fd >= 0:
            os.close(self.stdin_fd)
            self.stdin_fd = -1

    def outputs_done(self) -> bool:
        return all(out.fd < 0 for out in self.out.values())


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
        self._run: _Run | None = None
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
            reply = self._call(encode_request(MsgType.HELLO, ["version=1"]), timeout_s=timeout_s)
            self._awaiting = False
        if reply.type is MsgType.ERROR:
            raise self._lose(f"the guest agent refused HELLO: {parse_error(reply.body)[0][:200]}")
        if reply.type is not MsgType.READY:
            raise self._lose(f"the guest agent answered HELLO with {reply.type.name}")
        self.ready = parse_ready(reply.body)
        return self.ready

    def reseed(self, seed: bytes) -> None:
        """Mix ``seed`` (32..512 host random bytes) into the guest's RNG and credit it.

        Raises:
            SandboxLost: the agent refused or broke the protocol.
        """
        if not 32 <= len(seed) <= 512:
            raise ValueError("a reseed carries 32..512 bytes")
        self._simple(encode_frame(MsgType.RESEED, seed), "RESEED")

    def set_identity(self, *, hostname: str, machine_id: str) -> None:
        """Give the guest a fresh hostname and machine id (after a restore).

        Raises:
            SandboxLost: the agent refused or broke the protocol.
        """
        self._simple(encode_request(MsgType.IDENTITY, [f"hostname={hostname}", f"machine_id={machine_id}"]), "IDENTITY")

    def _simple(self, frame: bytes, what: str) -> None:
        with self._request_lock:
            reply = self._call(frame)
            self._awaiting = False
        if reply.type is MsgType.ERROR:
            raise self._lose(f"the guest agent refused {what}: {parse_error(reply.body)[0][:200]}")
        if reply.type is not MsgType.OK or reply.body:
            raise self._lose(f"the guest agent answered {what} with {reply.type.name}")

    def spawn(self, request: CommandRequest, fds: tuple[int, int, int]) -> Started | SpawnFailed:
        """Start one command; its stdio is pumped between ``fds`` (duplicated here) and DATA frames.

        Raises:
            SandboxLost: the agent is gone, refused the request, or answered out of step.
        """
        frame = encode_spawn(
            request.argv,
            request.env,
            request.cwd,
            request.rlimits,
            memory_max_bytes=self._limits.memory_max_bytes,
            pids_max=self._limits.pids_max,
            output_max_bytes=self._limits.output_max_bytes,
        )
        with self._request_lock:
            self._finish_previous_run()
            run = _Run((os.dup(fds[0]), os.dup(fds[1]), os.dup(fds[2])))
            for fd in (run.stdin_fd, run.out[Stream.STDOUT].fd, run.out[Stream.STDERR].fd):
                os.set_blocking(fd, False)
            with self._lock:
                self._run = run
            try:
                reply = self._call(frame)
            except BaseException:
                self._drop_run(run)
                raise
            finally:
                self._awaiting = False
            if reply.type is MsgType.STARTED:
                started = parse_started(reply.body)
                run.pump = threading.Thread(target=self._pump, args=(run,), name="contain-guest-pump", daemon=True)
                run.pump.start()
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
                run.exit_taken = True
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
                    raise FileTransferError(f"cannot read {label} in the guest: {message[:200]}", _get_fix(err))
                if reply.type is not MsgType.FILE:
                    raise self._lose(f"the guest agent answered GET_FILE with {reply.type.name}")
                size = number("FILE", "size", parse_fields(MsgType.FILE, reply.body, frozenset({"size"}))["size"])
                if size > max_bytes:
                    raise self._lose(f"the guest announced {size} bytes for {label}, over the {max_bytes} asked for")
                chunks: list[bytes] = []
                received = 0
                for chunk in _ChunkIter(self, size):
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
        walk = _ExportWalk(destination.open_for_export(), max_bytes=max_bytes, max_depth=EXPORT_MAX_DEPTH)
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
                            walk.entry(reply.body, lambda size: _ChunkIter(self, size))
                        except _BrokenRule as exc:
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
        if run is not None and run.pump is not None:
            run.pump.join(timeout=5.0)
        self._channel.close()
        for fd in (self._wake_r, self._wake_w, self._pump_wake_r, self._pump_wake_w):
            os.close(fd)

    # -- internals: requests ----------------------------------------------------------------------

    def _send(self, frame: bytes) -> None:
        if self._lost is not None:
            raise SandboxLost(self._lost, "the VM is gone; start a new sandbox")
        self._channel.send(frame)

    def _call(self, frame: bytes, *, timeout_s: float = _REPLY_TIMEOUT_S) -> Frame:
        """Send a request and return the first reply frame (the caller clears ``_awaiting``)."""
        self._awaiting = True
        self._send(frame)
        return self._next_reply(timeout_s=timeout_s)

    def _next_reply(self, *, timeout_s: float = _REPLY_TIMEOUT_S) -> Frame:
        try:
            frame = self._replies.get(timeout=timeout_s)
        except queue.Empty:
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
        if run.pump is not None:
            run.pump.join(timeout=_REPLY_TIMEOUT_S)
            if run.pump.is_alive():
                raise self._lose("the previous command's output did not end")
        with self._lock:
            self._run = None

    def _drop_run(self, run: _Run) -> None:
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
                self._tx_unacked += len(frame.body)
                if self._tx_unacked > WINDOW_BYTES:
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

    # -- internals: the pump thread ---------------------------------------------------------------

    def _return_credit(self, run: _Run, stream: Stream, count: int) -> None:
        with self._lock:
            run.out[stream].unacked -= count
        with contextlib.suppress(SandboxLost):
            self._send(encode_request(MsgType.CREDIT, [f"bytes={count}"], stream=stream))

    def _pump(self, run: _Run) -> None:
        try:
            while not self._pump_step(run):
                pass
        except SandboxLost:
            pass
        finally:
            with self._lock:
                run.close_fds()

    def _pump_step(self, run: _Run) -> bool:
        """One round of the pump: wait, then move what can move. True when the run is over."""
        with self._lock:
            if self._lost is not None:
                return True
            for out in run.out.values():
                if out.fd >= 0 and out.eof and not out.pending:
                    os.close(out.fd)
                    out.fd = -1
            if run.exited is not None and run.stdin_fd >= 0:
                os.close(run.stdin_fd)  # the command is gone: nothing reads stdin any more
                run.stdin_fd = -1
            owed = [(stream, out.owed) for stream, out in run.out.items() if out.owed]
            for _, out in run.out.items():
                out.owed = 0
        for stream, count in owed:
            self._return_credit(run, stream, count)
        with self._lock:
            if run.exited is not None and run.outputs_done():
                return True
            wanted: dict[int, tuple[int, Stream | None]] = {self._pump_wake_r: (selectors.EVENT_READ, None)}
            for stream, out in run.out.items():
                if out.fd >= 0 and out.pending:
                    wanted[out.fd] = (selectors.EVENT_WRITE, stream)
            if run.stdin_fd >= 0 and run.stdin_credit > 0:
                wanted[run.stdin_fd] = (selectors.EVENT_READ, Stream.STDIN)
        selector = selectors.PollSelector()  # no kernel state: fds closed between steps cannot linger
        for fd, (events, tag) in wanted.items():
            selector.register(fd, events, tag)
        for key, _ in selector.select(timeout=1.0):
            if key.data is None:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._pump_wake_r, 4096)
            elif key.data is Stream.STDIN:
                self._pump_stdin(run)
            else:
                self._pump_output(run, key.data)
        return False

    def _pump_output(self, run: _Run, stream: Stream) -> None:
        out = run.out[stream]
        with self._lock:
            chunk = bytes(out.pending[:CHUNK_BYTES])
        try:
            written = os.write(out.fd, chunk)
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the host reader went away (output cap): stop the stream in the guest
            with self._lock:
                dropped = len(out.pending)
                out.pending.clear()
                out.discard = True
                os.close(out.fd)
                out.fd = -1
            if not out.eof:
                self._send(encode_request(MsgType.CLOSE_OUTPUT, stream=stream))
            if dropped:
                self._return_credit(run, stream, dropped)
            return
        with self._lock:
            del out.pending[:written]
        self._return_credit(run, stream, written)

    def _pump_stdin(self, run: _Run) -> None:
        with self._lock:
            room = min(run.stdin_credit, CHUNK_BYTES)
        try:
            data = os.read(run.stdin_fd, room)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        with self._lock:
            if data:
                run.stdin_credit -= len(data)
            else:
                os.close(run.stdin_fd)
                run.stdin_fd = -1
        self._send(encode_frame(MsgType.DATA, data, stream=Stream.STDIN))


class _ChunkIter:
    """The DATA frames of one file on the transfer stream, crediting each back once consumed."""

    def __init__(self, sandbox: GuestSandbox, size: int) -> None:
        self._sandbox = sandbox
        self._left = size

    def __iter__(self) -> _ChunkIter:
        return self

    def __next__(self) -> bytes:
        sandbox = self._sandbox
        frame = sandbox._next_reply()
        if frame.type is not MsgType.DATA:
            raise sandbox._lose(f"the guest sent {frame.type.name} inside a file's data")
        if not frame.body:
            raise StopIteration
        if len(frame.body) > self._left:
            raise sandbox._lose("the guest sent more file data than it announced")
        self._left -= len(frame.body)
        sandbox._tx_unacked -= len(frame.body)
        sandbox._send(encode_request(MsgType.CREDIT, [f"bytes={len(frame.body)}"], stream=Stream.TRANSFER))
        return frame.body


def _make_dir(parent_fd: int, name: str, path: str, report: ExportReport) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        report.skip(f"{path}/ (not a plain directory on one side)")
        return -1
    report.dirs += 1
    return child


def _get_fix(err: int) -> str:
    if err == errno.EFBIG:
        return "pass a larger max_bytes"
    if err in (errno.ELOOP, errno.ENOTDIR):
        return "use a plain path with no symlinks"
    return "get only regular files under a scratch path"


class _BrokenRule(Exception):
    """The guest's export stream broke a rule the host checks (the channel is then lost)."""


class _ExportWalk:
    """The host half of an export: checks each entry the guest announces and writes it under the
    destination through ``O_NOFOLLOW`` descriptors, like ``files._copy_tree``."""

    def __init__(self, dst_fd: int, *, max_bytes: int, max_depth: int) -> None:
        self.stack: list[tuple[str, int]] = [("", dst_fd)]  # (relative path, host dir fd or -1: not copied)
        self.report = ExportReport()
        self.too_deep: list[str] = []
        self.announced = 0  # bytes of every file the guest announced, copied or not
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    def entry(self, body: bytes, chunks: Callable[[int], Iterator[bytes]]) -> None:
        """Check and apply one ENTRY (``chunks(size)`` yields a file's data).

        Raises:
            _BrokenRule: a path out of order or not normalised, a size past the limit, an unknown kind.
        """
        fields = parse_fields(MsgType.ENTRY, body, frozenset({"kind", "path"}), frozenset({"size", "reason"}))
        kind, path = fields["kind"], fields["path"]
        parts = path.split("/")
        if any(part in ("", ".", "..") for part in parts) or len(parts) > self.max_depth:
            raise _BrokenRule(f"the guest sent export path {path[:100]!r}: not normalised or too deep")
        parent = "/".join(parts[:-1])
        while len(self.stack) > 1 and self.stack[-1][0] != parent:
            _, fd = self.stack.pop()
            if fd >= 0:
                os.close(fd)
        if self.stack[-1][0] != parent:
            raise _BrokenRule(f"the guest sent export entry {path[:100]!r} outside the walk order")
        parent_fd = self.stack[-1][1]
        if kind == "dir" and fields.keys() == {"kind", "path"}:
            child = _make_dir(parent_fd, parts[-1], path, self.report) if parent_fd >= 0 else -1
            self.stack.append((path, child))
            if child >= 0 and len(parts) >= self.max_depth:
                self.too_deep.append(path)
        elif kind == "file" and fields.keys() == {"kind", "path", "size"}:
            size = number("ENTRY", "size", fields["size"])
            self.announced += size
            if self.announced > self.max_bytes:
                raise _BrokenRule(f"the guest exported {path[:100]!r} past the {self.max_bytes}-byte limit")
            self._receive_file(parent_fd, parts[-1], path, chunks(size))
        elif kind == "skip" and fields.keys() == {"kind", "path", "reason"} and fields["reason"] in _SKIP_REASONS:
            if parent_fd >= 0:
                self.report.skip(f"{path} ({_SKIP_REASONS[fields['reason']].format(max_bytes=self.max_bytes)})")
        else:
            raise _BrokenRule(f"the guest sent a malformed export entry (kind {kind[:20]!r})")

    def _receive_file(self, parent_fd: int, name: str, path: str, data: Iterator[bytes]) -> None:
        fd = -1
        if parent_fd >= 0:
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
                fd = os.open(name, flags, 0o644, dir_fd=parent_fd)
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    fd = -1
            except OSError:
                fd = -1
            if fd < 0:
                self.report.skip(f"{path} (destination is not a plain file)")
        copied = 0
        try:
            for chunk in data:  # consumed whole even when not written: it is on the wire
                copied += len(chunk)
                view = memoryview(chunk)
                while fd >= 0 and view:
                    view = view[os.write(fd, view) :]
        finally:
            if fd >= 0:
                os.close(fd)
        if fd >= 0:
            self.report.files += 1
            self.report.bytes += copied

    def close(self) -> None:
        for _, fd in self.stack:
            if fd >= 0:
                os.close(fd)
        self.stack = []

    def finish(self) -> ExportReport:
        for relative in self.too_deep:
            self.report.skip(f"{relative}/ (deeper than {self.max_depth} levels: its content was not copied)")
        return self.report


if TYPE_CHECKING:
    from contain.runtime.backend import RunningSandbox

    _CONFORMS: type[RunningSandbox] = GuestSandbox
