import ipaddress
from pathlib import Path

import pytest

from contain.egress.addresses import (
    SPECIAL_RANGES,
    UnreadableLiteral,
    classify_address,
    local_interface_addresses,
    parse_ip_literal,
)

LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "0177.0.0.1",
    "0x7f000001",
    "0X7F000001",
    "2130706433",
    "0x7f.0.0.01",
    "017700000001",
    "127.0.0.1.",
]


@pytest.mark.parametrize("spelling", LOOPBACK_SPELLINGS)
def test_every_ipv4_spelling_of_loopback_parses_to_127_0_0_1(spelling: str) -> None:
    assert parse_ip_literal(spelling) == ipaddress.IPv4Address("127.0.0.1")


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("[::ffff:7f00:1]", "127.0.0.1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("[fd00:ec2::254]", "fd00:ec2::254"),
        ("169.254.169.254", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
    ],
)
def test_ipv6_and_mapped_literals_parse_to_the_address_they_reach(spelling: str, expected: str) -> None:
    assert parse_ip_literal(spelling) == ipaddress.ip_address(expected)


@pytest.mark.parametrize("name", ["example.com", "a1.test", "1.2.3.4.5", "x.0x10", "allowed.test."])
def test_names_are_not_literals(name: str) -> None:
    assert parse_ip_literal(name) is None


@pytest.mark.parametrize(
    "bad",
    ["999.1.1.1", "1.2.3.256", "08.1.1.1", "4294967296", "[::1", "1::2::3", "[::g]", "1.2.65536"],
)
def test_numeric_strings_that_are_not_valid_addresses_are_unreadable_not_names(bad: str) -> None:
    with pytest.raises(UnreadableLiteral):
        parse_ip_literal(bad)


@pytest.mark.parametrize("row", SPECIAL_RANGES, ids=lambda r: f"{r.name}-{r.network}")
def test_every_special_range_row_refuses_an_address_inside_it(row) -> None:  # type: ignore[no-untyped-def]
    inside = row.network.network_address + (1 if row.network.num_addresses > 2 else 0)
    found = classify_address(inside)
    assert found is not None
    # A more specific earlier row may win (metadata before link-local), never a later one.
    assert SPECIAL_RANGES.index(found) <= SPECIAL_RANGES.index(row)


def test_every_special_range_row_has_a_reason_and_a_stable_rule_id() -> None:
    for row in SPECIAL_RANGES:
        assert row.why and row.rule_id == f"egress.special_address.{row.name}"


@pytest.mark.parametrize(
    ("address", "name"),
    [
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("100.100.100.200", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.1.1", "link_local"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.1.1.1", "private"),
        ("100.64.0.1", "cgnat"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("255.255.255.255", "broadcast"),
        ("239.1.1.1", "multicast"),
        ("64:ff9b::7f00:1", "translation"),
        ("fe80::1", "link_local"),
    ],
)
def test_classify_names_the_most_specific_row(address: str, name: str) -> None:
    row = classify_address(ipaddress.ip_address(address))
    assert row is not None and row.name == name


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "8.8.8.8"])
def test_public_addresses_are_not_special(address: str) -> None:
    assert classify_address(ipaddress.ip_address(address)) is None


def test_this_hosts_own_addresses_are_refused_like_loopback() -> None:
    own = ipaddress.ip_address("93.184.215.14")
    row = classify_address(own, host_addresses=frozenset({own}))
    assert row is not None and row.name == "host_address" and row.relaxable_by_hosts


def test_local_interface_addresses_reads_fib_trie_and_if_inet6(tmp_path: Path) -> None:
    (tmp_path / "fib_trie").write_text(
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 203.0.113.7\n        /32 host LOCAL\n"
        "     |-- 203.0.113.255\n        /32 link BROADCAST\n"
    )
    (tmp_path / "if_inet6").write_text("20010db8000000000000000000000002 02 40 00 80 eth0\n")
    assert local_interface_addresses(tmp_path) == frozenset(
        {ipaddress.ip_address("203.0.113.7"), ipaddress.ip_address("2001:db8::2")}
    )


def test_local_interface_addresses_of_a_missing_proc_is_empty(tmp_path: Path) -> None:
    assert local_interface_addresses(tmp_path / "absent") == frozenset()
