"""The host half of one guest command's stdio: credit-bounded buffers and the pump thread.

Frames carry the command's stdin, stdout and stderr (docs/guest-agent-protocol.md, "Flow
control"). ``CommandStdio`` holds, per output stream, what the guest sent and the host pipe has
not taken yet, and counts what the guest sent but the host has not credited back; the channel's
reader thread adds data (``GuestSandbox._on_output``), and ``pump`` (its own thread) moves it:

- output buffers to the command's host pipes (non-blocking), crediting back exactly what each
  pipe took, so the host never holds more than one ``WINDOW_BYTES`` window per stream;
- when a host pipe's reader went away (EPIPE: the output cap closed it), ``CLOSE_OUTPUT`` to the
  guest, and what is in flight is dropped and credited back;
- the host's stdin, read only within the guest's stdin credit, sent as DATA (an empty DATA at EOF).

Enforces nothing about the guest's honesty by itself: the reader checks credit overruns before
data reaches these buffers. Does not parse anything the command wrote.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from collections.abc import Callable

from contain.errors import SandboxLost
from contain.runtime.microvm.guest_channel import (
    CHUNK_BYTES,
    WINDOW_BYTES,
    MsgType,
    Stream,
    encode_frame,
    encode_request,
)
from contain.runtime.supervisor_channel import Exited

__all__ = ["CommandStdio", "OutputStream"]


class OutputStream:
    """One output stream of the running command, as the host holds it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd  # the host pipe's write end (a dup of the caller's), -1 once closed
        self.pending = bytearray()  # at most WINDOW_BYTES: the reader refuses more
        self.unacked = 0  # bytes the guest sent that the host has not credited back
        self.eof = False
        self.discard = False  # the host reader went away: drop data, credit it back
        self.owed = 0  # credit for dropped data that the pump still has to send


class CommandStdio:
    """The state of one command: its host-side fds, flow-control counters and exit report.

    Every field is read and written under ``lock`` (the sandbox's condition); ``send`` writes one
    frame to the channel and raises ``SandboxLost`` when it is gone.
    """

    def __init__(
        self,
        fds: tuple[int, int, int],
        *,
        lock: threading.Condition,
        send: Callable[[bytes], None],
        is_lost: Callable[[], bool],
        wake_fd: int,
    ) -> None:
        self.stdin_fd = fds[0]
        self.out = {Stream.STDOUT: OutputStream(fds[1]), Stream.STDERR: OutputStream(fds[2])}
        self.stdin_credit = WINDOW_BYTES
        self.exited: Exited | None = None
        self.pump_thread: threading.Thread | None = None
        self._lock = lock
        self._send = send
        self._is_lost = is_lost
        self._wake_fd = wake_fd
        for fd in fds:
            if fd >= 0:  # stdin -1: its EOF went with the SPAWN (guest_handle.spawn)
                os.set_blocking(fd, False)

    def start_pump(self) -> None:
        self.pump_thread = threading.Thread(target=self.pump, name="contain-guest-pump", daemon=True)
        self.pump_thread.start()

    def close_fds(self) -> None:
        for out in self.out.values():
            if out.fd >= 0:
                os.close(out.fd)
                out.fd = -1
        if self.stdin_fd >= 0:
            os.close(self.stdin_fd)
            self.stdin_fd = -1

    def outputs_done(self) -> bool:
        """Both streams ended in the guest (their empty DATA arrived) and their host pipes are closed.

        A stream the host stopped reading (``discard``) is not done until the guest's end of it
        arrives: until then its frames are still this command's, and must not reach the next one.
        """
        return all(out.fd < 0 and out.eof for out in self.out.values())

    def pump(self) -> None:
        """Move stdio until the command has exited and both outputs ended (or the channel is lost)."""
        try:
            while not self._pump_step():
                pass
        except SandboxLost:
            pass
        finally:
            with self._lock:
                self.close_fds()

    def _return_credit(self, stream: Stream, count: int) -> None:
        with self._lock:
            self.out[stream].unacked -= count
        with contextlib.suppress(SandboxLost):
            self._send(encode_request(MsgType.CREDIT, [f"bytes={count}"], stream=stream))

    def _pump_step(self) -> bool:
        """One round: settle ends and owed credit, wait, move what can move. True when over."""
        with self._lock:
            if self._is_lost():
                return True
            for out in self.out.values():
                if out.fd >= 0 and out.eof and not out.pending:
                    os.close(out.fd)
                    out.fd = -1
            if self.exited is not None and self.stdin_fd >= 0:
                os.close(self.stdin_fd)  # the command is gone: nothing reads stdin any more
                self.stdin_fd = -1
            owed = [(stream, out.owed) for stream, out in self.out.items() if out.owed]
            for out in self.out.values():
                out.owed = 0
        for stream, count in owed:
            self._return_credit(stream, count)
        with self._lock:
            if self.exited is not None and self.outputs_done():
                return True
            wanted: dict[int, tuple[int, Stream | None]] = {self._wake_fd: (selectors.EVENT_READ, None)}
            for stream, out in self.out.items():
                if out.fd >= 0 and out.pending:
                    wanted[out.fd] = (selectors.EVENT_WRITE, stream)
            if self.stdin_fd >= 0 and self.stdin_credit > 0:
                wanted[self.stdin_fd] = (selectors.EVENT_READ, Stream.STDIN)
        selector = selectors.PollSelector()  # no kernel state: fds closed between steps cannot linger
        for fd, (events, tag) in wanted.items():
            selector.register(fd, events, tag)
        for key, _ in selector.select(timeout=1.0):
            if key.data is None:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_fd, 4096)
            elif key.data is Stream.STDIN:
                self._pump_stdin()
            else:
                self._pump_output(key.data)
        return False

    def _pump_output(self, stream: Stream) -> None:
        out = self.out[stream]
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
                self._return_credit(stream, dropped)
            return
        with self._lock:
            del out.pending[:written]
        self._return_credit(stream, written)

    def _pump_stdin(self) -> None:
        with self._lock:
            room = min(self.stdin_credit, CHUNK_BYTES)
        try:
            data = os.read(self.stdin_fd, room)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        with self._lock:
            if data:
                self.stdin_credit -= len(data)
            else:
                os.close(self.stdin_fd)
                self.stdin_fd = -1
        self._send(encode_frame(MsgType.DATA, data, stream=Stream.STDIN))
