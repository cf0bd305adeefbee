"""What every whole-battery test asserts, for one backend spec (shared by test_battery_*.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest

from contain.probe.case import Verdict
from contain.probe.context import RunContext
from contain.probe.registry import ALL_IDS, load_cases
from contain.probe.report import PASSING, Report, render_summary
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


def check_only_the_known_findings(report: Report, known: Mapping[str, tuple[Verdict, str]]) -> None:
    """Every case is CONTAINED or NOT_APPLICABLE but exactly the ``known`` findings (case id ->
    the verdict it gets today and the backend gap behind it): a new failure fails, and so does a
    fixed finding until its row is removed."""
    failing = {r.case_id: r.verdict for r in report.results if r.verdict not in PASSING}
    assert failing == {case_id: verdict for case_id, (verdict, _why) in known.items()}, (
        render_summary(report)
        + "\n"
        + "\n".join(f"{r.case_id} {r.verdict.value}: {r.summary}" for r in report.results if r.verdict not in PASSING)
    )


def not_applicable(report: Report) -> dict[str, str]:
    return {r.case_id: r.summary for r in report.results if r.verdict is Verdict.NOT_APPLICABLE}
