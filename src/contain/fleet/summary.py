"""A batch's counts and time percentiles, and the table ``contain fleet run`` ends with (pure).

Percentiles use the nearest-rank method (the smallest value with at least p% of the values at or
below it): with few jobs p99 is the maximum, which is what an operator wants to see, and no
value is ever invented between two measured ones.

Terminal output: the table shows only counts, contain's own backend names and numbers; a job id
or cause (chosen by whoever wrote the jobs file, or by a workload) never appears in it. Failure
lines (``render_failures``) do show them, through ``contain.visible_text.for_terminal``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from contain.fleet.messages import JobReport
from contain.visible_text import for_terminal

__all__ = ["BackendTimes", "BatchSummary", "percentile", "render_failures", "render_summary", "summarize"]


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of ``values`` (0 < p <= 100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class BackendTimes:
    """Latency percentiles (seconds, first send to report) of one backend's finished jobs."""

    backend: str
    count: int
    p50_s: float
    p90_s: float
    p99_s: float


@dataclass(frozen=True)
class BatchSummary:
    total: int
    done: int
    failed: int
    cancelled: int
    retried: int
    exit_nonzero: int  # done, but the command's status was not 0
    elapsed_s: float
    backends: tuple[BackendTimes, ...] = field(default=())

    @property
    def jobs_per_s(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "total": self.total,
            "done": self.done,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "retried": self.retried,
            "exit_nonzero": self.exit_nonzero,
            "elapsed_s": round(self.elapsed_s, 3),
            "jobs_per_s": round(self.jobs_per_s, 3),
            "backends": [
                {"backend": b.backend, "count": b.count, "p50_s": b.p50_s, "p90_s": b.p90_s, "p99_s": b.p99_s}
                for b in self.backends
            ],
        }


def summarize(reports: Iterable[JobReport], *, elapsed_s: float) -> BatchSummary:
    """Counts by status, retried jobs, and per-backend latency percentiles of the done jobs."""
    reports = list(reports)
    by_backend: dict[str, list[float]] = {}
    for report in reports:
        if report.status == "done" and report.backend:
            by_backend.setdefault(report.backend, []).append(report.latency_s)
    return BatchSummary(
        total=len(reports),
        done=sum(r.status == "done" for r in reports),
        failed=sum(r.status == "failed" for r in reports),
        cancelled=sum(r.status == "cancelled" for r in reports),
        retried=sum(r.retried for r in reports),
        exit_nonzero=sum(r.status == "done" and r.result is not None and r.result.status != 0 for r in reports),
        elapsed_s=elapsed_s,
        backends=tuple(
            BackendTimes(name, len(times), percentile(times, 50), percentile(times, 90), percentile(times, 99))
            for name, times in sorted(by_backend.items())
        ),
    )


def render_summary(summary: BatchSummary) -> str:
    """The final table: one line of counts, then one row per backend."""
    lines = [
        f"jobs {summary.total}: done {summary.done} (exit != 0: {summary.exit_nonzero}), failed {summary.failed}, "
        f"cancelled {summary.cancelled}, retried {summary.retried}; "
        f"{summary.elapsed_s:.1f}s, {summary.jobs_per_s:.1f} jobs/s",
    ]
    if summary.backends:
        lines.append(f"{'backend':<18}{'jobs':>7}{'p50':>10}{'p90':>10}{'p99':>10}")
        for row in summary.backends:
            lines.append(
                f"{row.backend:<18}{row.count:>7}{_ms(row.p50_s):>10}{_ms(row.p90_s):>10}{_ms(row.p99_s):>10}"
            )
    return "\n".join(lines) + "\n"


def render_failures(reports: Iterable[JobReport], *, limit: int = 20) -> str:
    """One line per job that failed, was retried or exited non-zero (id, cause or the last line of
    its stderr, clipped), untrusted text made visible; at most ``limit`` jobs."""
    lines: list[str] = []
    shown = 0
    for report in reports:
        nonzero = report.status == "done" and report.result is not None and report.result.status != 0
        if report.status == "done" and not report.retried and not nonzero:
            continue
        if shown == limit:
            lines.append("  ... (more in --json)")
            break
        shown += 1
        name = report.job_id if report.job_id is not None else f"line {report.line}"
        if report.status != "done":
            lines.append(f"  {report.status} {for_terminal(name)}: {for_terminal(report.cause)}")
        elif nonzero and report.result is not None:
            tail = report.result.stderr.data.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            lines.append(f"  exit {report.result.status} {for_terminal(name)}: {for_terminal(tail[0][:200])}")
        for why in report.retried_after:
            lines.append(f"  retried {for_terminal(name)}: {for_terminal(why)}")
    return "\n".join(lines) + ("\n" if lines else "")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms"
