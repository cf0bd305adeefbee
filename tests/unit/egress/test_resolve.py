import asyncio
import ipaddress

import pytest

from contain.boundary import boundary_from_mapping
from contain.egress.addresses import IPAddress
from contain.egress.policy import Destination, EgressDecision, EgressPolicy, Via
from contain.egress.resolve import Resolver


def decide(
    rules: list[dict[str, object]],
    host: str,
    port: int = 443,
    *,
    answers: dict[str, list[str]] | None = None,
    hosts: dict[str, str] | None = None,
    own: frozenset[IPAddress] = frozenset(),
) -> tuple[EgressDecision, list[str]]:
    asked: list[str] = []

    async def lookup(name: str, _port: int) -> list[IPAddress]:
        asked.append(name)
        if answers is None or name not in answers:
            raise OSError("Name or service not known")
        return [ipaddress.ip_address(a) for a in answers[name]]

    boundary = boundary_from_mapping({"network": {"allow": rules, "hosts": hosts or {}}})
    resolver = Resolver(EgressPolicy.from_boundary(boundary), host_addresses=own, lookup=lookup)
    return asyncio.run(resolver.decide(Destination(host, port, Via.CONNECT))), asked


ALLOWED = [{"host": "allowed.test"}]


def test_public_answer_is_allowed_and_pinned_in_order() -> None:
    decision, asked = decide(ALLOWED, "allowed.test", answers={"allowed.test": ["93.184.215.14", "2606:4700::1"]})
    assert decision.is_allowed
    assert decision.addresses == (
        ipaddress.ip_address("93.184.215.14"),
        ipaddress.ip_address("2606:4700::1"),
    )
    assert asked == ["allowed.test"]


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "egress.special_address.loopback"),
        ("10.0.0.5", "egress.special_address.private"),
        ("192.168.1.1", "egress.special_address.private"),
        ("fd12::1", "egress.special_address.unique_local"),
        ("169.254.169.254", "egress.special_address.metadata"),
        ("100.64.1.1", "egress.special_address.cgnat"),
        ("::ffff:10.0.0.1", "egress.special_address.private"),
    ],
)
def test_allowed_name_resolving_to_special_space_is_refused(address: str, rule: str) -> None:
    decision, _ = decide(ALLOWED, "allowed.test", answers={"allowed.test": [address]})
    assert (decision.is_allowed, decision.rule_id) == (False, rule)
    assert "allowed.test:443 refused: it resolves to" in decision.reason


def test_one_private_address_in_a_mixed_answer_refuses_the_whole_attempt() -> None:
    decision, _ = decide(ALLOWED, "allowed.test", answers={"allowed.test": ["93.184.215.14", "10.0.0.1"]})
    assert decision.rule_id == "egress.special_address.private"


def test_this_hosts_own_address_is_refused() -> None:
    own = frozenset({ipaddress.ip_address("93.184.215.14")})
    decision, _ = decide(ALLOWED, "allowed.test", answers={"allowed.test": ["93.184.215.14"]}, own=own)
    assert decision.rule_id == "egress.special_address.host_address"


def test_hosts_override_to_loopback_for_an_allowed_name_is_allowed_without_lookup() -> None:
    decision, asked = decide(ALLOWED, "allowed.test", hosts={"allowed.test": "127.0.0.1"})
    assert decision.is_allowed and decision.addresses == (ipaddress.ip_address("127.0.0.1"),)
    assert asked == []


def test_hosts_override_does_not_allow_a_name_that_allow_does_not_list() -> None:
    decision, asked = decide(ALLOWED, "other.test", hosts={"other.test": "127.0.0.1"})
    assert decision.rule_id == "egress.not_allowed" and asked == []


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "169.254.1.1", "0.0.0.0", "224.0.0.1"])
def test_hosts_override_never_relaxes_metadata_link_local_or_unspecified(address: str) -> None:
    decision, _ = decide(ALLOWED, "allowed.test", hosts={"allowed.test": address})
    assert not decision.is_allowed
    assert decision.reason.endswith("to permit it, name the address in network.allow")


def test_an_explicit_address_entry_relaxes_even_metadata() -> None:
    rules = [{"host": "allowed.test", "ports": [80]}, {"host": "169.254.169.254", "ports": [80]}]
    decision, _ = decide(rules, "allowed.test", 80, hosts={"allowed.test": "169.254.169.254"})
    assert decision.is_allowed


def test_resolution_failure_is_a_refusal() -> None:
    decision, _ = decide(ALLOWED, "allowed.test", answers={})
    assert decision.rule_id == "egress.resolve_failed"


def test_an_exception_in_the_decision_path_denies() -> None:
    async def broken(_name: str, _port: int) -> list[IPAddress]:
        raise RuntimeError("boom")

    boundary = boundary_from_mapping({"network": {"allow": ALLOWED}})
    resolver = Resolver(EgressPolicy.from_boundary(boundary), lookup=broken)
    decision = asyncio.run(resolver.decide(Destination("allowed.test", 443, Via.CONNECT)))
    assert (decision.is_allowed, decision.rule_id) == (False, "egress.internal_error")


def test_refused_names_are_never_looked_up() -> None:
    _, asked = decide(ALLOWED, "blocked.test", answers={"blocked.test": ["93.184.215.14"]})
    assert asked == []
