"""NE judges: a sink hit during the attack is ESCAPED, silence is CONTAINED, a blind control is
INCONCLUSIVE. Targets here are scripted fakes; the sinks are real loopback listeners."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from contain.probe import cases_network
from contain.probe.canaries import REPORT_MARK, Bounds, CanaryUnavailable, Sink, tcp_canary, udp_canary
from contain.probe.case import AttackRun, Verdict
from contain.probe.cases_network import (
    CASES,
    Canary,
    Shot,
    ShotRow,
    ShotsCase,
    Spelling,
    dns_label,
    route_judge,
)


def params_of(code: str) -> dict[str, Any]:
    line = next(ln for ln in code.splitlines() if ln.startswith("P = json.loads("))
    return dict(json.loads(json.loads(line[len("P = json.loads(") : -1])))


def _report(values: dict[str, Any] | None) -> AttackRun:
    out = b"" if values is None else ("\n" + REPORT_MARK + json.dumps(values) + "\n").encode()
    return AttackRun(exit_code=0, signal=None, stdout=out, stderr=b"", timed_out=False, duration_s=0.01)


class Fake:
    """Runs a Python stand-in for the attack: ``behave(params)`` may really send to loopback."""

    name = "fake"

    def __init__(self, behave: Callable[[dict[str, Any]], dict[str, Any] | None], *, hooks: bool = True) -> None:
        self.behave, self.has_contain_hooks = behave, hooks
        self.kind = "process" if hooks else "wrap"

    def run_python(self, code: str, *, timeout_s: float = 20.0, boundary: Mapping[str, Any] | None = None,
                   env: Mapping[str, str] | None = None) -> AttackRun:
        return _report(self.behave(params_of(code)))

    def run_argv(self, argv: Sequence[str], **kw: Any) -> AttackRun:
        raise AssertionError


class Ctx:
    def __init__(self, target: Fake, control: Fake) -> None:
        self.target, self.control, self.run_id = target, control, "unit"

    def canary(self, prefix: str = "canary") -> str:
        return f"{prefix}-unit-{secrets.token_hex(4)}"


def shoot(params: dict[str, Any]) -> dict[str, Any]:
    """A leaky target: every TCP/UDP shot lands."""
    out = {}
    for s in params["shots"]:
        if s["kind"] == "tcp":
            with socket.create_connection((s["host"], s["port"]), timeout=2) as c:
                c.sendall(params["canary"].encode())
        elif s["kind"] == "udp":
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as c:
                c.sendto(params["canary"].encode(), (s["host"], s["port"]))
        out[s["name"]] = {"ok": True, "value": "sent"}
    return out


def blocked(params: dict[str, Any]) -> dict[str, Any]:
    return {s["name"]: {"ok": False, "errno": "ENETUNREACH"} for s in params["shots"]}


def silent_host(params: dict[str, Any]) -> dict[str, Any]:
    return blocked(params)  # a control that reaches nothing


def _run(target: Fake, control: Fake):
    with tcp_canary() as tcp, udp_canary() as udp:
        shots = [Shot("tcp", "tcp", tcp.host, tcp.port), Shot("udp", "udp", udp.host, udp.port)]
        return cases_network._run_shots(Ctx(target, control), "NE-XX", shots, [tcp, udp], contained="quiet")


def test_a_canary_at_a_sink_is_escaped() -> None:
    result = _run(Fake(shoot), Fake(shoot))
    assert result.verdict is Verdict.ESCAPED
    assert "with the canary" in result.summary


def test_silent_sinks_with_a_working_control_are_contained() -> None:
    result = _run(Fake(blocked), Fake(shoot))
    assert result.verdict is Verdict.CONTAINED, result.summary
    assert result.control == "host control reached 2/2 sinks"


def test_a_control_that_reaches_nothing_is_inconclusive() -> None:
    result = _run(Fake(blocked), Fake(silent_host))
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "control did not reach" in result.summary


def test_an_attack_that_never_reports_is_inconclusive() -> None:
    result = _run(Fake(lambda p: None), Fake(shoot))
    assert result.verdict is Verdict.INCONCLUSIVE


def test_dns_label_fits_one_label_and_is_lower_case() -> None:
    label = dns_label("ne-0123456789ab-0123456789abcdef")
    assert len(label) <= 63 and label == label.lower() and "=" not in label


def test_route_judge_breach_and_blind_control() -> None:
    route = {"routes": {"ok": True, "value": {"default_route_via": ["eth0"], "non_loopback_interfaces": ["eth0"]}}}
    none = {"routes": {"ok": True, "value": {"default_route_via": [], "non_loopback_interfaces": []}}}
    assert route_judge(route, route)[0]
    assert route_judge(none, route) == ([], [])
    assert route_judge(none, none)[1]


def _vsock(ok: bool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda p: {"af_vsock_socket": {"ok": True, "value": "created"} if ok else {"ok": False, "errno": "EAFNOSUPPORT"}}


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


def test_a_shot_row_dials_its_sinks_host_and_port_respelled_as_asked() -> None:
    sinks = {"lo.tcp": _sink("tcp", "127.0.0.1", 4242), "netns.packets": _sink("packet", "10.0.0.2", 0)}
    assert ShotRow("plain", "tcp", at="lo.tcp").aimed(sinks) == Shot("plain", "tcp", "127.0.0.1", 4242)
    assert ShotRow("mapped", "tcp", at="lo.tcp", spelling=Spelling.V4MAPPED).aimed(sinks) == Shot(
        "mapped", "tcp", "::ffff:127.0.0.1", 4242
    )
    assert ShotRow("named", "curl", at="lo.tcp", host="host.docker.internal", control_reaches=False).aimed(
        sinks
    ) == Shot("named", "curl", "host.docker.internal", 4242, control_reaches=False)
    assert ShotRow("icmp", "raw_icmp", at="netns.packets").aimed(sinks) == Shot("icmp", "raw_icmp", "10.0.0.2", None)
    assert ShotRow("dns", "dns", at="lo.tcp", qtype=16).aimed(sinks).qtype == 16
    assert ShotRow("routes", "route").aimed(sinks) == Shot("routes", "route")


def _sink(kind: str, host: str, port: int) -> Sink:
    return Sink(kind, host, port, Bounds())


_LOOPBACK_ROW = ShotsCase(
    "NE-XX",
    "title",
    "expected",
    canaries=(Canary.LOOPBACK_TCP, Canary.LOOPBACK_UDP),
    shots=(ShotRow("tcp", "tcp", at="lo.tcp"), ShotRow("udp", "udp", at="lo.udp")),
    sinks=("lo.tcp", "lo.udp"),
    contained="quiet",
)


def test_a_row_opens_its_sinks_and_judges_a_leaky_target_escaped() -> None:
    result = _LOOPBACK_ROW.check(Ctx(Fake(shoot), Fake(shoot)))
    assert result.verdict is Verdict.ESCAPED
    assert [s["sink"].split()[0] for s in result.evidence["sinks"]] == ["tcp", "udp"]


def test_a_row_judges_silent_sinks_with_a_working_control_contained() -> None:
    result = _LOOPBACK_ROW.check(Ctx(Fake(blocked), Fake(shoot)))
    assert (result.verdict, result.summary, result.control) == (
        Verdict.CONTAINED,
        "quiet",
        "host control reached 2/2 sinks",
    )


def test_a_row_whose_canary_cannot_be_opened_is_inconclusive(monkeypatch) -> None:
    def refuse() -> Any:
        raise CanaryUnavailable("no loopback today")

    monkeypatch.setitem(cases_network._LOOPBACK_OPENERS, Canary.LOOPBACK_UDP, refuse)
    result = _LOOPBACK_ROW.check(Ctx(Fake(shoot), Fake(shoot)))
    assert (result.verdict, result.summary) == (
        Verdict.INCONCLUSIVE,
        "judge could not be set up: no loopback today",
    )
