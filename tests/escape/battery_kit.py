"""What every whole-battery test asserts, for one backend spec (shared by test_battery_*.py)."""

from __future__ import annotations

import time

import pytest

from contain.probe.case import Verdict
from contain.probe.context import RunContext
from contain.probe.registry import ALL_IDS, load_cases
from contain.probe.report import Report, render_summary
from contain.probe.runner import run_battery
from contain.probe.targets import ContainTarget

BATTERY_BUDGET_S = 300.0


def require_runtime(runtime: str) -> None:
    """Skip (with the runtime's own cause) when the OCI runtime is missing or unusable here."""
    from contain.errors import UnsupportedHost
    from contain.runtime.container.oci_runtime import probe_runtime

    try:
        probe_runtime(runtime)
    except UnsupportedHost as exc:
        pytest.skip(f"{runtime} is absent or unusable here: {exc.cause} (fix: {exc.fix})")


def run_whole_battery(spec: str) -> tuple[Report, float]:
    ctx = RunContext(ContainTarget(spec))
    began = time.monotonic()
    try:
        report = run_battery(load_cases(), ctx)
    finally:
        ctx.close()
    return report, time.monotonic() - began


def check_every_case_ran(report: Report) -> None:
    assert [r.case_id for r in report.results] == list(ALL_IDS)


def check_nothing_inconclusive_or_an_error(report: Report) -> None:
    bad = {r.case_id: r.summary for r in report.results if r.verdict in (Verdict.INCONCLUSIVE, Verdict.ERROR)}
    assert bad == {}, render_summary(report)


def check_nothing_escapes(report: Report, *, known: dict[str, str] | None = None) -> None:
    """No case escaped, except exactly the ``known`` findings (case id -> the backend gap)."""
    escaped = {r.case_id: r.summary for r in report.results if r.verdict is Verdict.ESCAPED}
    assert sorted(escaped) == sorted(known or {}), (
        render_summary(report) + "\n" + "\n".join(f"{case_id}: {summary}" for case_id, summary in escaped.items())
    )
    if not known:
        assert report.exit_code == 0


def not_applicable(report: Report) -> dict[str, str]:
    return {r.case_id: r.summary for r in report.results if r.verdict is Verdict.NOT_APPLICABLE}
