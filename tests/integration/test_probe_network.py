"""NE, IP and PX cases against a real contain process sandbox (all CONTAINED), and against a
deliberately weak bwrap (host network, host filesystem, host environment) where the same judges
must report ESCAPED.

Needs root: the namespace canary creates a netns and a veth pair (10.x addresses only on the
pair it creates), and contain runs the sandbox as nobody.
"""

from __future__ import annotations

import secrets
import shutil

import pytest

from contain.probe import cases_ipc, cases_network, cases_proxy
from contain.probe.case import ProbeCase, Verdict
from contain.probe.targets import ContainTarget, HostControlTarget, WrapTarget

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

WEAK = ["bwrap", "--unshare-all", "--share-net", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--"]
ALL = [*cases_network.CASES, *cases_ipc.CASES, *cases_proxy.CASES]


class Ctx:
    def __init__(self, target: object) -> None:
        self.target = target
        self.control = HostControlTarget()
        self.run_id = secrets.token_hex(6)

    def canary(self, prefix: str = "canary") -> str:
        return f"{prefix}-{self.run_id}-{secrets.token_hex(8)}"


@pytest.fixture(autouse=True)
def _needs_ip() -> None:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is missing: the namespace canary cannot be built")


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.id)
def test_case_is_contained_by_the_process_sandbox(case: ProbeCase) -> None:
    result = case.check(Ctx(ContainTarget("process")))
    assert result.verdict is Verdict.CONTAINED, (result.summary, result.evidence)


@pytest.mark.parametrize("case_id", ["NE-01", "NE-03", "NE-05", "NE-07", "NE-08", "IP-01", "IP-05"])
def test_weak_bwrap_with_host_network_escapes(case_id: str) -> None:
    case = next(c for c in ALL if c.id == case_id)
    result = case.check(Ctx(WrapTarget(WEAK)))
    assert result.verdict is Verdict.ESCAPED, (result.summary, result.evidence)


def test_proxy_cases_are_not_applicable_to_a_wrapped_sandbox() -> None:
    for case in cases_proxy.CASES:
        assert case.check(Ctx(WrapTarget(WEAK))).verdict is Verdict.NOT_APPLICABLE
