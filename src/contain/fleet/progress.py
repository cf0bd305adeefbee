"""The live progress line of ``contain fleet run`` (stderr; redrawn in place on a terminal).

``render_progress`` is pure (counts in, one line out). ``Progress`` writes it: on a terminal it
redraws one line with ``\\r`` at most ``redraw_s`` apart; elsewhere (a log file, CI) it writes a
plain line at each tenth of the batch, so logs stay readable. It shows only counts and contain's
own words, never a job id or cause, so nothing untrusted reaches the terminal here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from contain.fleet.messages import JobReport

__all__ = ["Progress", "render_progress"]

_BAR_WIDTH = 30


def render_progress(*, finished: int, total: int, done: int, failed: int, retried: int, elapsed_s: float) -> str:
    """``[#########.....] 37/120 done 35 failed 2 retried 1 12.3 jobs/s`` (no newline)."""
    fraction = finished / total if total else 1.0
    filled = round(fraction * _BAR_WIDTH)
    rate = finished / elapsed_s if elapsed_s > 0 else 0.0
    return (
        f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {finished}/{total} "
        f"done {done} failed {failed} retried {retried} {rate:.1f} jobs/s"
    )


class Progress:
    """Counts reports and draws the line (see the module docstring)."""

    def __init__(
        self,
        total: int,
        stream: TextIO,
        *,
        is_tty: bool | None = None,
        redraw_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self._stream = stream
        self._tty = stream.isatty() if is_tty is None else is_tty
        self._redraw_s = redraw_s
        self._clock = clock
        self._began = clock()
        self._last_draw = float("-inf")
        self._next_tenth = 1
        self.finished = self.done = self.failed = self.retried = 0

    def update(self, report: JobReport) -> None:
        self.finished += 1
        self.done += report.status == "done"
        self.failed += report.status == "failed"
        self.retried += report.retried
        now = self._clock()
        if self._tty:
            if now - self._last_draw >= self._redraw_s or self.finished == self.total:
                self._stream.write("\r" + self._line(now) + "\x1b[K")
                self._stream.flush()
                self._last_draw = now
        elif self.total and self.finished * 10 >= self._next_tenth * self.total:
            while self.finished * 10 >= self._next_tenth * self.total:
                self._next_tenth += 1
            self._stream.write(self._line(now) + "\n")
            self._stream.flush()

    def close(self) -> None:
        """End the redrawn line (terminal only)."""
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()

    def _line(self, now: float) -> str:
        return render_progress(
            finished=self.finished, total=self.total, done=self.done, failed=self.failed, retried=self.retried,
            elapsed_s=now - self._began,
        )
