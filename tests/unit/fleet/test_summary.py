"""Counts, nearest-rank percentiles and the final table."""

from __future__ import annotations

from contain.fleet.messages import JobReport
from contain.fleet.summary import percentile, render_failures, render_summary, summarize

from .fleet_fakes import run_result


def test_percentiles_are_nearest_rank_values_that_were_measured() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [percentile(values, p) for p in (50, 90, 99, 100)] == [50.0, 90.0, 99.0, 100.0]
    assert percentile([3.0, 1.0, 2.0], 99) == 3.0 and percentile([7.0], 50) == 7.0 and percentile([], 50) == 0.0


def _report(job: str, status: str = "done", **fields: object) -> JobReport:
    return JobReport(job, 1, status, attempts=fields.pop("attempts", 1), backend="process",  # type: ignore[arg-type]
                     result=fields.pop("result", run_result()), **fields)  # type: ignore[arg-type]


def test_summary_counts_statuses_retries_and_nonzero_exits_and_times_only_done_jobs() -> None:
    reports = [
        _report("a", latency_s=0.1), _report("b", latency_s=0.3, attempts=2),
        _report("c", result=run_result(exit_code=3), latency_s=0.2),
        _report("d", "failed", latency_s=9.0), _report("e", "cancelled", latency_s=9.0),
    ]
    summary = summarize(reports, elapsed_s=2.0)
    assert (summary.total, summary.done, summary.failed, summary.cancelled) == (5, 3, 1, 1)
    assert (summary.retried, summary.exit_nonzero, summary.jobs_per_s) == (1, 1, 1.5)
    [times] = summary.backends
    assert (times.backend, times.count, times.p50_s, times.p90_s, times.p99_s) == ("process", 3, 0.2, 0.3, 0.3)
    assert render_summary(summary) == (
        "jobs 5: done 3 (exit != 0: 1), failed 1, cancelled 1, retried 1; 2.0s, 1.5 jobs/s\n"
        "backend              jobs       p50       p90       p99\n"
        "process                 3     200ms     300ms     300ms\n"
    )


def test_failure_lines_make_control_characters_in_ids_and_causes_visible() -> None:
    reports = [
        _report("ok"),
        _report("evil\x1b[2J", "failed", cause="bad\r\nthing"),
        JobReport(None, 7, "failed", cause="line 7: not JSON"),
        _report("r", attempts=2, retried_after=("attempt 1 lost with node n2: gone",)),
    ]
    text = render_failures(reports)
    assert "\x1b" not in text and "\r" not in text
    assert "line 7: line 7: not JSON" in text and "retried r: attempt 1 lost with node n2: gone" in text
    assert text.count("\n") == 3


def test_failure_lines_stop_at_the_limit_and_say_there_are_more() -> None:
    reports = [_report(f"f{i}", "failed", cause="x") for i in range(5)]
    assert render_failures(reports, limit=2).splitlines()[-1] == "  ... (more in --json)"


def test_a_done_job_that_exited_non_zero_is_listed_with_the_last_line_of_its_stderr() -> None:
    from contain.runtime.result import Captured

    result = run_result(exit_code=1)
    stderr = b"Traceback ...\nOSError: [Errno 101] Network is unreachable\x1b[31m\n"
    result = type(result)(**{**result.__dict__, "stderr": Captured(stderr, False, len(stderr))})
    text = render_failures([_report("net", result=result), _report("fine")])
    assert text == "  exit 1 net: OSError: [Errno 101] Network is unreachable" + "\\x1b[31m" + "\n"
