"""IP judges: a planted host socket that hears a connection, or a planted variable seen inside,
is ESCAPED; a control that reaches nothing is INCONCLUSIVE. Targets are scripted fakes that
really connect to the planted listeners (or do not)."""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from contain.probe.canaries import REPORT_MARK
from contain.probe.case import AttackRun, Verdict
from contain.probe.cases_ipc import CASES, SPECS


def params_of(code: str) -> dict[str, Any]:
    line = next(ln for ln in code.splitlines() if ln.startswith("P = json.loads("))
    return dict(json.loads(json.loads(line[len("P = json.loads(") : -1])))


def reach_all(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for address in params["planted"]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect("\0" + address[1:] if address.startswith("@") else address)
            c.sendall(params["canary"].encode())
        out["planted " + address] = {"ok": True, "value": "connected"}
    leaked = {k: v for k, v in os.environ.items() if v in params["planted_values"]}
    out["env"] = {"ok": True, "value": leaked}
    out["socketpair"] = {"ok": True, "value": "x"}
    return out


def reach_none(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"planted " + a: {"ok": False, "errno": "ENOENT"} for a in params["planted"]}
    out["env"] = {"ok": True, "value": {}}
    out["socketpair"] = {"ok": True, "value": "x"}
    return out


class Fake:
    name = "fake"
    kind = "process"
    has_contain_hooks = True

    def __init__(self, behave: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
        self.behave = behave

    def run_python(
        self,
        code: str,
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        report = self.behave(params_of(code))
        out = b"" if report is None else ("\n" + REPORT_MARK + json.dumps(report) + "\n").encode()
        return AttackRun(0, None, out, b"", False, 0.01)

    def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:
        raise AssertionError


class Ctx:
    def __init__(self, target: Fake, control: Fake) -> None:
        self.target, self.control, self.run_id = target, control, "unit"

    def canary(self, prefix: str = "canary") -> str:
        return f"{prefix}-unit-{secrets.token_hex(4)}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_unreachable_planted_sockets_are_contained(case) -> None:
    result = case.check(Ctx(Fake(reach_none), Fake(reach_all)))
    assert result.verdict is Verdict.CONTAINED, result.summary


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_planted_socket_that_hears_the_target_is_escaped(case) -> None:
    result = case.check(Ctx(Fake(reach_all), Fake(reach_all)))
    assert result.verdict is Verdict.ESCAPED
    assert "planted" in result.summary


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_control_that_reaches_nothing_is_inconclusive(case) -> None:
    result = case.check(Ctx(Fake(reach_none), Fake(reach_none)))
    assert result.verdict is Verdict.INCONCLUSIVE


def test_a_leaked_variable_alone_is_escaped() -> None:
    def leak_only(params: dict[str, Any]) -> dict[str, Any]:
        out = reach_none(params)
        out["env"] = {"ok": True, "value": {"DOCKER_HOST": params["planted_values"][0]}}
        return out

    case = next(c for c in CASES if c.id == "IP-01")
    result = case.check(Ctx(Fake(leak_only), Fake(reach_all)))
    assert result.verdict is Verdict.ESCAPED
    assert "leaked" in result.summary


def test_ip07_needs_socketpair_to_work_inside() -> None:
    def no_pair(params: dict[str, Any]) -> dict[str, Any]:
        out = reach_none(params)
        out["socketpair"] = {"ok": False, "errno": "EAFNOSUPPORT"}
        return out

    case = next(c for c in CASES if c.id == "IP-07")
    result = case.check(Ctx(Fake(no_pair), Fake(reach_all)))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "socketpair" in result.summary


def test_host_environment_is_restored_after_the_case() -> None:
    before = dict(os.environ)
    next(c for c in CASES if c.id == "IP-03").check(Ctx(Fake(reach_none), Fake(reach_all)))
    assert dict(os.environ) == before


def test_every_case_plants_something() -> None:
    for case_id, spec in SPECS.items():
        assert spec.paths or spec.abstract or spec.x11, case_id
    assert [c.id for c in CASES] == ["IP-01", "IP-02", "IP-03", "IP-04", "IP-05", "IP-07", "IP-08"]
