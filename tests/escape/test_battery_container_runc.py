"""The whole escape-and-recovery battery against contain's container backend under runc (what CI runs).

Every catalogue and project case runs against a fresh `container:runc` sandbox per attack, judged
from outside. Asserted: every case ran; every case is CONTAINED or NOT_APPLICABLE except exactly the
``KNOWN_FINDINGS`` below (backend gaps this battery found, each with its verdict and cause);
NOT_APPLICABLE only where it is true by construction (the VM cases and XT-07), with the reason. Skipped only when runc
is absent or unusable on this host (the skip says which and why).
"""

from __future__ import annotations

import pytest
from battery_kit import (
    BATTERY_BUDGET_S,
    check_every_case_ran,
    check_only_the_known_findings,
    not_applicable,
    require_runtime,
    run_whole_battery,
)

from contain.probe.case import Verdict

pytestmark = [pytest.mark.needs_root]

SPEC = "container:runc"

# case id -> (the verdict it gets today, the backend gap this battery found). Asserted exactly: a
# new failure fails the test, and so does a fixed finding until its row is removed. RE-09 and
# RE-54 escaped in this battery's first runs (runc made the container's user namespace as host
# root, so per-user counts were host root's) and were fixed in the backend (h/container 7c1a744).
KNOWN_FINDINGS: dict[str, tuple[Verdict, str]] = {}


@pytest.fixture(scope="module")
def battery():
    require_runtime("runc")
    return run_whole_battery(SPEC)


def test_the_report_names_the_backend(battery):
    report, _ = battery
    assert (report.backend, report.target) == (SPEC, f"contain:{SPEC}")


def test_every_catalogue_case_ran(battery):
    check_every_case_ran(battery[0])


def test_every_case_is_contained_or_not_applicable_but_the_known_findings(battery):
    check_only_the_known_findings(battery[0], KNOWN_FINDINGS)


def test_only_the_vm_cases_and_snapshots_are_not_applicable_and_they_say_why(battery):
    excused = not_applicable(battery[0])
    assert sorted(excused) == ["VM-01", "VM-02", "VM-03", "VM-04", "VM-05", "VM-06", "XT-07"]
    assert all(summary.startswith("not applicable by construction") for summary in excused.values()), excused


def test_the_battery_finishes_within_its_budget(battery):
    _, seconds = battery
    assert seconds < BATTERY_BUDGET_S
