import ipaddress

import pytest

from contain.boundary import boundary_from_mapping
from contain.egress.policy import DENY_RULES, Destination, EgressPolicy, Via, deny


def policy(*rules: dict[str, object], hosts: dict[str, str] | None = None) -> EgressPolicy:
    boundary = boundary_from_mapping({"network": {"allow": list(rules), "hosts": hosts or {}}})
    return EgressPolicy.from_boundary(boundary)


def check(p: EgressPolicy, host: str, port: int = 443):  # type: ignore[no-untyped-def]
    return p.check_target(Destination(host, port, Via.CONNECT))


WILDCARD = policy({"host": "*.allowed.test"})


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("a.allowed.test", True),
        ("a.b.allowed.test", True),
        ("A.ALLOWED.TEST", True),
        ("a.allowed.test.", True),
        ("allowed.test", False),
        ("evilallowed.test", False),
        ("allowed.test.evil.test", False),
        ("a.allowed.test.evil.test", False),
        ("a.allowed.test..", False),
        (".allowed.test", False),
        ("a..allowed.test", False),
    ],
)
def test_wildcard_matches_proper_subdomains_only(host: str, allowed: bool) -> None:
    assert check(WILDCARD, host).is_allowed is allowed


@pytest.mark.parametrize(
    "host",
    [
        "allowed.test\x00.evil.test",
        "allowed.test\r\nX: y",
        "allowed.test evil",
        "evil@allowed.test",
        "allowed%2etest",
        "allowed.test\\evil",
        "allowed.test/evil",
        "allowed.test\t",
        "",
    ],
)
def test_hostnames_with_ambiguous_characters_are_refused_as_hostnames(host: str) -> None:
    p = policy({"host": "allowed.test"})
    decision = check(p, host)
    assert not decision.is_allowed
    assert decision.rule_id == "egress.hostname"


def test_exact_name_is_canonicalised_before_matching() -> None:
    p = policy({"host": "allowed.test"})
    assert check(p, "ALLOWED.test.").is_allowed
    assert check(p, "allowed.test").rule_id == "network.allow[0]"


def test_idna_names_match_their_punycode_entry() -> None:
    p = policy({"host": "xn--bcher-kva.test"})
    assert check(p, "bücher.test").is_allowed
    assert not check(p, "bucher.test").is_allowed


def test_other_port_of_an_allowed_host_says_which_ports_work() -> None:
    p = policy({"host": "allowed.test", "ports": [443, 8443]})
    decision = check(p, "allowed.test", 22)
    assert not decision.is_allowed
    assert decision.rule_id == "egress.port_not_allowed"
    assert decision.reason == (
        "allowed.test:22 is not in network.allow (allowed.test is allowed on port(s) 443, 8443 only)"
    )


def test_unlisted_host_reason_is_the_agent_facing_sentence() -> None:
    decision = check(policy({"host": "allowed.test"}), "api.example.com")
    assert (decision.is_allowed, decision.rule_id, decision.reason) == (
        False,
        "egress.not_allowed",
        "api.example.com:443 is not in network.allow",
    )


@pytest.mark.parametrize(
    "host",
    [
        "127.1",
        "0177.0.0.1",
        "0x7f000001",
        "2130706433",
        "0x7f.0.0.01",
        "::1",
        "[::1]",
        "[::ffff:7f00:1]",
    ],
)
def test_ip_literals_in_every_spelling_are_refused_without_an_address_entry(host: str) -> None:
    decision = check(policy({"host": "allowed.test"}, hosts={"allowed.test": "127.0.0.1"}), host)
    assert (decision.is_allowed, decision.rule_id) == (False, "egress.ip_literal")


@pytest.mark.parametrize("host", ["127.1", "0x7f000001", "2130706433", "[::ffff:7f00:1]"])
def test_an_address_entry_allows_every_spelling_of_that_address(host: str) -> None:
    decision = check(policy({"host": "127.0.0.1", "ports": [443]}), host)
    assert decision.is_allowed
    assert decision.addresses == (ipaddress.IPv4Address("127.0.0.1"),)


def test_an_address_range_entry_allows_addresses_inside_on_its_ports_only() -> None:
    p = policy({"host": "10.0.0.0/8", "ports": [80]})
    assert check(p, "10.1.2.3", 80).is_allowed
    assert not check(p, "10.1.2.3", 443).is_allowed
    assert not check(p, "11.1.2.3", 80).is_allowed


def test_unreadable_literal_is_refused() -> None:
    assert check(policy({"host": "allowed.test"}), "999.1.1.1").rule_id == "egress.ip_literal"


def test_empty_allow_list_denies_everything() -> None:
    assert check(policy(), "allowed.test").rule_id == "egress.not_allowed"


def test_ports_for_name_unions_every_matching_entry() -> None:
    p = policy({"host": "a.allowed.test", "ports": [80]}, {"host": "*.allowed.test", "ports": [443]})
    assert p.ports_for_name("a.allowed.test") == frozenset({80, 443})
    assert p.ports_for_name("b.allowed.test") == frozenset({443})
    assert p.ports_for_name("allowed.test") == frozenset()
    assert p.exact_names() == ("a.allowed.test",)


def test_deny_refuses_rule_ids_that_are_not_table_rows() -> None:
    with pytest.raises(ValueError):
        deny("egress.made_up", "x", host="h", port=1)
    for rule in DENY_RULES:
        assert deny(rule.rule_id, "x", host="h", port=1).rule_id == rule.rule_id
        assert rule.why


@pytest.mark.parametrize(
    "host",
    ["0X7F000001", "\uff11\uff12\uff17.\uff10.\uff10.\uff11", "\u00b9\u00b2\u2077.0.0.1"],
)
def test_spellings_that_canonicalise_to_an_address_are_refused_as_ip_literals_not_matched_as_names(host: str) -> None:
    p = policy({"host": "127.0.0.1/32"}, {"host": "allowed.test"})
    decision = check(p, host)
    if decision.is_allowed:  # only an ASCII spelling a C resolver reads may reach the address entry
        assert host.isascii() and decision.addresses == (ipaddress.ip_address("127.0.0.1"),)
    else:
        assert decision.rule_id == "egress.ip_literal"


def test_a_manifest_cannot_name_an_address_in_full_width_digits_as_a_host_pattern() -> None:
    from contain.errors import BoundaryInvalid

    with pytest.raises(BoundaryInvalid, match="IP address"):
        policy({"host": "\uff11\uff12\uff17.\uff10.\uff10.\uff11"})
