"""NE cases: the route judge, the NE-08 and NE-10 judges, and the SHOTS_CASES table (the shots
mechanism itself is tested in test_shots.py). Targets here are scripted fakes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from network_fakes import Ctx, Fake

from contain.probe import cases_network
from contain.probe.case import Verdict
from contain.probe.cases_network import CASES, route_judge
from contain.probe.shots import Canary, ShotsCase


def test_route_judge_breach_and_blind_control() -> None:
    route = {"routes": {"ok": True, "value": {"default_route_via": ["eth0"], "non_loopback_interfaces": ["eth0"]}}}
    none = {"routes": {"ok": True, "value": {"default_route_via": [], "non_loopback_interfaces": []}}}
    assert route_judge(route, route)[0]
    assert route_judge(none, route) == ([], [])
    assert route_judge(none, none)[1]


def _vsock(ok: bool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda p: {
        "af_vsock_socket": {"ok": True, "value": "created"} if ok else {"ok": False, "errno": "EAFNOSUPPORT"}
    }


@pytest.mark.parametrize(
    ("inside", "host", "expected"),
    [(False, True, Verdict.CONTAINED), (True, True, Verdict.ESCAPED), (False, False, Verdict.INCONCLUSIVE)],
)
def test_ne10_vsock_judge(inside: bool, host: bool, expected: Verdict) -> None:
    case = next(c for c in CASES if c.id == "NE-10")
    assert case.check(Ctx(Fake(_vsock(inside)), Fake(_vsock(host)))).verdict is expected


def _sibling(attacker_reaches: bool, self_test: bool) -> Fake:
    import threading

    state: dict[str, str] = {}
    attacked = threading.Event()

    def behave(params: dict[str, Any]) -> dict[str, Any]:
        if "listen_s" in params:  # the sibling: listens until the attacker has run
            attacked.wait(5)
            got = [params["self"]] if self_test else []
            if attacker_reaches:
                got.append(state.get("attack", ""))
            return {"sibling": {"ok": True, "value": got}}
        state["attack"] = params["canary"]
        attacked.set()
        return {"tcp_loopback_0": {"ok": False, "errno": "ECONNREFUSED"}}

    return Fake(behave)


@pytest.mark.parametrize(
    ("reaches", "self_test", "expected"),
    [(False, True, Verdict.CONTAINED), (True, True, Verdict.ESCAPED), (False, False, Verdict.INCONCLUSIVE)],
)
def test_ne08_sibling_judge(reaches: bool, self_test: bool, expected: Verdict, monkeypatch) -> None:
    monkeypatch.setattr(cases_network.time, "sleep", lambda s: None)
    target = _sibling(reaches, self_test)
    case = next(c for c in CASES if c.id == "NE-08")
    assert case.check(Ctx(target, target)).verdict is expected


def test_case_ids_are_the_present_catalogue_ids() -> None:
    assert [c.id for c in CASES] == ["NE-01", "NE-02", "NE-03", "NE-04", "NE-05", "NE-06", "NE-07", "NE-08", "NE-10"]


# --- the shots table ------------------------------------------------------------------------------


@pytest.mark.parametrize("row", cases_network.SHOTS_CASES, ids=lambda row: row.id)
def test_every_shot_and_judged_sink_of_a_row_names_a_sink_the_row_opens(row: ShotsCase) -> None:
    provided = set(row.sink_keys())
    assert {shot.at for shot in row.shots if shot.at is not None} <= provided
    assert set(row.sinks) <= provided and row.sinks
    assert any(shot.control_reaches for shot in row.shots), "the host control must land at least one shot"


def test_the_veth_canary_is_opened_after_the_namespace_it_lives_on() -> None:
    for row in cases_network.SHOTS_CASES:
        if Canary.VETH_HOST_TCP in row.canaries:
            assert row.canaries.index(Canary.NETNS) < row.canaries.index(Canary.VETH_HOST_TCP), row.id


def test_every_shots_row_is_a_case_with_its_own_check() -> None:
    by_id = {case.id: case for case in CASES}
    for row in cases_network.SHOTS_CASES:
        case = by_id[row.id]
        assert (case.title, case.expected, case.check) == (row.title, row.expected, row.check)


def _ne06_with_a_refusing_target(monkeypatch, feature: str):
    import contextlib
    from types import SimpleNamespace

    from contain.errors import BackendRefusal
    from contain.probe.case import CaseResult

    @contextlib.contextmanager
    def sink(*a: Any, **k: Any):
        yield SimpleNamespace(port=9, packets=None, settle=lambda: None, received=lambda c: False)

    direct = CaseResult("NE-06", Verdict.CONTAINED, "no route off loopback", {"routes": "none"})
    monkeypatch.setattr(cases_network, "http_canary", sink)
    monkeypatch.setattr(cases_network, "netns_canary", sink)
    monkeypatch.setattr(cases_network, "run_shots", lambda *a, **k: direct)

    def refuse(params: dict[str, Any]) -> dict[str, Any]:
        raise BackendRefusal("the microvm backend cannot carry network.allow: no egress", "fix", feature=feature)

    case = next(c for c in CASES if c.id == "NE-06")
    return case.check(Ctx(Fake(refuse), Fake(refuse)))


def test_ne06_on_a_backend_without_egress_keeps_the_route_verdict_and_says_the_proxy_half_does_not_apply(
    monkeypatch,
) -> None:
    result = _ne06_with_a_refusing_target(monkeypatch, "network_allow")
    assert result.verdict is Verdict.CONTAINED
    assert result.summary == (
        "no route off loopback; the proxy half does not apply: the microvm backend cannot carry network.allow: "
        "no egress"
    )


def test_ne06_lets_any_other_refusal_through_as_an_error(monkeypatch) -> None:
    from contain.errors import BackendRefusal

    with pytest.raises(BackendRefusal):
        _ne06_with_a_refusing_target(monkeypatch, "write_binds")
