"""Shots: a sink hit during the attack is ESCAPED, silence is CONTAINED, a blind control is
INCONCLUSIVE; a ShotsCase row opens its canaries and aims its shots by sink key. Targets are
scripted fakes; the sinks are real loopback listeners."""

from __future__ import annotations

from typing import Any

from network_fakes import Ctx, Fake, blocked, shoot, silent_host

from contain.probe import shots
from contain.probe.canaries import Bounds, CanaryUnavailable, Sink, tcp_canary, udp_canary
from contain.probe.case import Verdict
from contain.probe.shots import Canary, Shot, ShotRow, ShotsCase, Spelling, dns_label, run_shots


def _run(target: Fake, control: Fake):
    with tcp_canary() as tcp, udp_canary() as udp:
        shots = [Shot("tcp", "tcp", tcp.host, tcp.port), Shot("udp", "udp", udp.host, udp.port)]
        return run_shots(Ctx(target, control), "NE-XX", shots, [tcp, udp], contained="quiet")


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

    monkeypatch.setitem(shots._LOOPBACK_OPENERS, Canary.LOOPBACK_UDP, refuse)
    result = _LOOPBACK_ROW.check(Ctx(Fake(shoot), Fake(shoot)))
    assert (result.verdict, result.summary) == (
        Verdict.INCONCLUSIVE,
        "judge could not be set up: no loopback today",
    )
