"""The whole escape-and-recovery battery against contain's process backend (what CI runs).

Every catalogue case runs against a fresh process sandbox per attack, judged from outside.
The target: 0 ESCAPED, 0 INCONCLUSIVE, 0 ERROR. Findings the battery has made and that are not
fixed yet are listed in ``KNOWN_FINDINGS`` with the reason; the test demands that the ESCAPED
set is *exactly* that list, so a new escape fails the test and so does a fixed one (remove its
row when the runtime fix lands). INCONCLUSIVE and ERROR are never excused.
"""

from __future__ import annotations

import time

import pytest

from contain.probe.case import Verdict
from contain.probe.context import RunContext
from contain.probe.registry import CATALOGUE_IDS, load_cases
from contain.probe.report import render_summary
from contain.probe.runner import run_battery
from contain.probe.targets import ContainTarget

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

BATTERY_BUDGET_S = 300.0

# case id -> why it escapes today (each is a runtime gap the probe found, not a probe defect)
KNOWN_FINDINGS: dict[str, str] = {
    "FS-09": (
        "protected names are enforced only at the root of a write bind: `git init sub/` creates "
        "sub/.git (config, hooks) inside the workspace"
    ),
    "RE-09": (
        "every sandbox runs as host uid 65534, so per-user counts (inotify instances) are shared: "
        "one task exhausting them makes inotify_init fail in a sibling task"
    ),
}


@pytest.fixture(scope="module")
def battery():
    ctx = RunContext(ContainTarget("process"))
    began = time.monotonic()
    try:
        report = run_battery(load_cases(), ctx)
    finally:
        ctx.close()
    return report, time.monotonic() - began


def test_every_catalogue_case_ran(battery):
    report, _ = battery
    assert [r.case_id for r in report.results] == list(CATALOGUE_IDS)


def test_no_case_is_inconclusive_or_an_error(battery):
    report, _ = battery
    bad = {r.case_id: r.summary for r in report.results if r.verdict in (Verdict.INCONCLUSIVE, Verdict.ERROR)}
    assert bad == {}, render_summary(report)


def test_escapes_are_exactly_the_known_findings(battery):
    report, _ = battery
    escaped = {r.case_id: r.summary for r in report.results if r.verdict is Verdict.ESCAPED}
    assert set(escaped) == set(KNOWN_FINDINGS), escaped


def test_not_applicable_cases_say_why(battery):
    report, _ = battery
    for result in report.results:
        if result.verdict is Verdict.NOT_APPLICABLE:
            assert "not applicable" in result.summary or "needs" in result.summary, result


def test_the_battery_finishes_within_its_budget(battery):
    _, seconds = battery
    assert seconds < BATTERY_BUDGET_S
