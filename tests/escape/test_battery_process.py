"""The whole escape-and-recovery battery against contain's process backend (what CI runs).

Every catalogue case runs against a fresh process sandbox per attack, judged from outside.
The target, asserted: 0 ESCAPED, 0 INCONCLUSIVE, 0 ERROR.
"""

from __future__ import annotations

import pytest
from battery_kit import BATTERY_BUDGET_S, check_every_case_ran, run_whole_battery

from contain.probe.case import Verdict
from contain.probe.report import render_summary

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]


@pytest.fixture(scope="module")
def battery():
    return run_whole_battery("process")


def test_every_catalogue_case_ran(battery):
    check_every_case_ran(battery[0])


def test_no_case_is_inconclusive_or_an_error(battery):
    report, _ = battery
    bad = {r.case_id: r.summary for r in report.results if r.verdict in (Verdict.INCONCLUSIVE, Verdict.ERROR)}
    assert bad == {}, render_summary(report)


def test_nothing_escapes(battery):
    report, _ = battery
    escaped = {r.case_id: r.summary for r in report.results if r.verdict is Verdict.ESCAPED}
    assert escaped == {}, render_summary(report)
    assert report.exit_code == 0


def test_not_applicable_cases_say_why(battery):
    report, _ = battery
    for result in report.results:
        if result.verdict is Verdict.NOT_APPLICABLE:
            assert "not applicable" in result.summary or "needs" in result.summary, result


def test_the_battery_finishes_within_its_budget(battery):
    _, seconds = battery
    assert seconds < BATTERY_BUDGET_S
