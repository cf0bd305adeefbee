"""SY cases against a real contain process sandbox (all CONTAINED), and against a deliberately
weak bwrap without a seccomp filter, where the same judges must report ESCAPED."""

from __future__ import annotations

import secrets

import pytest

from contain.probe import cases_kernel
from contain.probe.case import ProbeCase, Verdict
from contain.probe.targets import ContainTarget, HostControlTarget, WrapTarget

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

WEAK = ["bwrap", "--unshare-all", "--share-net", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--"]


class Ctx:
    def __init__(self, target: object) -> None:
        self.target = target
        self.control = HostControlTarget()
        self.run_id = secrets.token_hex(6)

    def canary(self, prefix: str = "canary") -> str:
        return f"{prefix}-{self.run_id}-{secrets.token_hex(8)}"


@pytest.mark.parametrize("case", cases_kernel.CASES, ids=lambda c: c.id)
def test_case_is_contained_by_the_process_sandbox(case: ProbeCase) -> None:
    result = case.check(Ctx(ContainTarget("process")))
    assert result.verdict is Verdict.CONTAINED, (result.summary, result.evidence)


@pytest.mark.parametrize("case_id", ["SY-01", "SY-02", "SY-03", "SY-06", "SY-07", "SY-09", "SY-11"])
def test_weak_bwrap_without_seccomp_escapes(case_id: str) -> None:
    case = next(c for c in cases_kernel.CASES if c.id == case_id)
    result = case.check(Ctx(WrapTarget(WEAK)))
    assert result.verdict is Verdict.ESCAPED, (result.summary, result.evidence)
