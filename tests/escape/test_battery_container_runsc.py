"""The whole escape-and-recovery battery against contain's container backend under runsc (what CI runs).

Every catalogue and project case runs against a fresh `container:runsc` sandbox per attack, judged
from outside. Asserted: every case ran; every case is CONTAINED or NOT_APPLICABLE except exactly the
``KNOWN_FINDINGS`` below (backend gaps this battery found, each with its verdict and cause);
NOT_APPLICABLE only where it is true by construction (the VM cases and XT-07), with the reason. Skipped only when runsc
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

SPEC = "container:runsc"

# case id -> (the verdict it gets today, the backend gap this battery found). Asserted exactly: a
# new failure fails the test, and so does a fixed finding until its row is removed.
_SENTRY_IN_THE_CGROUP = (
    "the container's host cgroup holds gVisor's own Sentry and gofer threads, so pids_max and "
    "memory_bytes bound gVisor rather than the workload: with pids_max 32 the workload cannot start "
    "one thread yet forks 20 processes, and a fork bomb ends in the OOM killer instead of at the pids "
    "limit. Fix in the container backend: give gVisor its own budget and enforce the workload's "
    "limits inside the sandbox (gVisor's cgroups), or size the host cgroup for both."
)
KNOWN_FINDINGS: dict[str, tuple[Verdict, str]] = {
    "NE-08": (Verdict.INCONCLUSIVE, _SENTRY_IN_THE_CGROUP + " (the sibling sandbox cannot start its listener thread)"),
    "RE-01": (Verdict.INCONCLUSIVE, _SENTRY_IN_THE_CGROUP + " (the bounded fork bomb was OOM-killed)"),
    "LF-09": (Verdict.INCONCLUSIVE, "1,022 short-lived orphans under the ptrace platform exceed the 20 s CPU budget"),
    "IP-51": (Verdict.ERROR, "runsc cannot bind a file over a host Unix socket inside a bind (hidden sockets)"),
}


@pytest.fixture(scope="module")
def battery():
    require_runtime("runsc")
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
