"""What every whole-battery test asserts, for one backend spec (shared by test_battery_*.py).

``ContainerBattery`` holds the tests every container-backend battery runs; a test module subclasses
it as ``Test...`` and gives its spec, its known findings and its time budget as class attributes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import ClassVar

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


# Not applicable to any container backend by construction: the VM cases need a microVM, and XT-07
# judges snapshots, which only the microVM backend takes.
CONTAINER_NOT_APPLICABLE = ("VM-01", "VM-02", "VM-03", "VM-04", "VM-05", "VM-06", "XT-07")


class ContainerBattery:
    """The whole battery against one ``container:<runtime>`` spec, once per subclass.

    Subclasses (named ``Test...`` so pytest collects them) set ``SPEC``, ``KNOWN_FINDINGS`` (case
    id -> the verdict it gets today and the backend gap behind it, asserted exactly) and, when the
    runtime is slower, ``BUDGET_S``.
    """

    SPEC: ClassVar[str]
    KNOWN_FINDINGS: ClassVar[Mapping[str, tuple[Verdict, str]]]
    BUDGET_S: ClassVar[float] = BATTERY_BUDGET_S

    @pytest.fixture(scope="class")
    @classmethod
    def battery(cls) -> tuple[Report, float]:
        require_runtime(cls.SPEC.removeprefix("container:"))
        return run_whole_battery(cls.SPEC)

    def test_the_report_names_the_backend(self, battery: tuple[Report, float]) -> None:
        report, _ = battery
        assert (report.backend, report.target) == (self.SPEC, f"contain:{self.SPEC}")

    def test_every_catalogue_case_ran(self, battery: tuple[Report, float]) -> None:
        check_every_case_ran(battery[0])

    def test_every_case_is_contained_or_not_applicable_but_the_known_findings(
        self, battery: tuple[Report, float]
    ) -> None:
        check_only_the_known_findings(battery[0], self.KNOWN_FINDINGS)

    def test_only_the_vm_cases_and_snapshots_are_not_applicable_and_they_say_why(
        self, battery: tuple[Report, float]
    ) -> None:
        excused = not_applicable(battery[0])
        assert sorted(excused) == sorted(CONTAINER_NOT_APPLICABLE)
        assert all(summary.startswith("not applicable by construction") for summary in excused.values()), excused

    def test_the_battery_finishes_within_its_budget(self, battery: tuple[Report, float]) -> None:
        _, seconds = battery
        assert seconds < self.BUDGET_S
