"""The progress line: redrawn in place on a terminal, a line per tenth elsewhere."""

from __future__ import annotations

import io

from contain.fleet.messages import JobReport
from contain.fleet.progress import Progress, render_progress


def test_the_line_shows_the_bar_counts_and_rate() -> None:
    line = render_progress(finished=5, total=20, done=4, failed=1, retried=2, elapsed_s=2.0)
    assert line == "[########......................] 5/20 done 4 failed 1 retried 2 2.5 jobs/s"


def test_off_a_terminal_it_writes_one_plain_line_per_tenth_of_the_batch() -> None:
    out = io.StringIO()
    progress = Progress(20, out, is_tty=False, clock=lambda: 1.0)
    for i in range(20):
        progress.update(JobReport(f"j{i}", i, "done", attempts=1))
    progress.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in out.getvalue()
    assert lines[-1].startswith("[##############################] 20/20 done 20 failed 0")


def test_on_a_terminal_it_redraws_in_place_at_most_every_redraw_interval_and_always_at_the_end() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = Progress(3, out, is_tty=True, redraw_s=1.0, clock=lambda: now[0])
    progress.update(JobReport("a", 1, "done", attempts=2))
    progress.update(JobReport("b", 2, "failed"))  # within the interval: not drawn
    now[0] = 0.5
    progress.update(JobReport("c", 3, "done", attempts=1))  # the last one: drawn
    progress.close()
    draws = out.getvalue().split("\r")[1:]
    assert len(draws) == 2 and draws[-1].startswith("[##############################] 3/3 done 2 failed 1 retried 1")
    assert out.getvalue().endswith("\x1b[K\n")
