"""Host ends of a run's pipes: output capped while streaming, stdin fed without blocking.

A command that writes 10 GB must not grow the host's memory: ``CappedReader`` keeps at most
``cap`` bytes and then closes its end, so the writer gets EPIPE/SIGPIPE instead of being drained
forever. ``StdinFeeder`` writes the caller's bytes as the pipe accepts them.
"""

from __future__ import annotations

import os

from contain.runtime.result import Captured

__all__ = ["CappedReader", "StdinFeeder"]


class CappedReader:
    """Reads one output pipe, keeping at most ``cap`` bytes; past the cap the pipe is closed."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd = fd
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.total = 0
        self.truncated = False
        self.open = True
        os.set_blocking(fd, False)

    def pump(self) -> bool:
        """Read what is available; False once the stream is finished (EOF or cap)."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return True
        if not data:
            self.close()
            return False
        self.total += len(data)
        room = self.cap - self.size
        if len(data) > room:
            self.chunks.append(data[:room])
            self.size = self.cap
            self.truncated = True
            self.close()  # the writer gets EPIPE/SIGPIPE instead of filling host memory
            return False
        self.chunks.append(data)
        self.size += len(data)
        return True

    def close(self) -> None:
        if self.open:
            self.open = False
            os.close(self.fd)

    def result(self) -> Captured:
        return Captured(b"".join(self.chunks), self.truncated, self.total)


class StdinFeeder:
    """Writes stdin bytes to the command without blocking the event loop."""

    def __init__(self, fd: int, data: bytes) -> None:
        self.fd = fd
        self.view = memoryview(data)
        self.open = True
        os.set_blocking(fd, False)
        if not data:
            self.close()

    def pump(self) -> bool:
        if not self.open:
            return False
        try:
            written = os.write(self.fd, self.view[:65536])
        except BlockingIOError:
            return True
        except BrokenPipeError:
            self.close()
            return False
        self.view = self.view[written:]
        if not self.view:
            self.close()
            return False
        return True

    def close(self) -> None:
        if self.open:
            self.open = False
            os.close(self.fd)
