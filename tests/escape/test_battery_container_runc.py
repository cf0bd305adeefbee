"""The whole escape-and-recovery battery against contain's container backend under runc (what CI runs).

Every catalogue and project case runs against a fresh `container:runc` sandbox per attack, judged
from outside. Asserted: every case ran; 0 ESCAPED, 0 INCONCLUSIVE, 0 ERROR; NOT_APPLICABLE only
where it is true by construction (the VM cases and XT-07), with the reason. Skipped only when runc
is absent or unusable on this host (the skip says which and why).
"""

from __future__ import annotations

import pytest
from battery_kit import (
    BATTERY_BUDGET_S,
    check_every_case_ran,
    check_nothing_escapes,
    check_nothing_inconclusive_or_an_error,
    not_applicable,
    require_runtime,
    run_whole_battery,
)

pytestmark = [pytest.mark.needs_root]

SPEC = "container:runc"

# case id -> the backend gap this battery found and that is not fixed yet (asserted exactly: a new
# escape fails, and so does a fixed one until its row is removed). Each is in the ocprobes report.
_USERNS_OWNED_BY_ROOT = (
    "runc creates the container's user namespace as host root, so the kernel charges every "
    "container's per-user counts (fs.inotify.max_user_instances, 128 here) to host root in the "
    "initial namespace: one container exhausts them for every sibling container and for root on "
    "the host. The process backend's user namespace is owned by the sandbox's leased uid. Fix in "
    "the container backend: create the user namespace (and then the network namespace) owned by "
    "the leased uid and let runc join them by path."
)
KNOWN_FINDINGS = {"RE-09": _USERNS_OWNED_BY_ROOT, "RE-54": _USERNS_OWNED_BY_ROOT}


@pytest.fixture(scope="module")
def battery():
    require_runtime("runc")
    return run_whole_battery(SPEC)


def test_the_report_names_the_backend(battery):
    report, _ = battery
    assert (report.backend, report.target) == (SPEC, f"contain:{SPEC}")


def test_every_catalogue_case_ran(battery):
    check_every_case_ran(battery[0])


def test_no_case_is_inconclusive_or_an_error(battery):
    check_nothing_inconclusive_or_an_error(battery[0])


def test_nothing_escapes_but_the_known_findings(battery):
    check_nothing_escapes(battery[0], known=KNOWN_FINDINGS)


def test_only_the_vm_cases_and_snapshots_are_not_applicable_and_they_say_why(battery):
    excused = not_applicable(battery[0])
    assert sorted(excused) == ["VM-01", "VM-02", "VM-03", "VM-04", "VM-05", "VM-06", "XT-07"]
    assert all(summary.startswith("not applicable by construction") for summary in excused.values()), excused


def test_the_battery_finishes_within_its_budget(battery):
    _, seconds = battery
    assert seconds < BATTERY_BUDGET_S
