"""Fuzzing hostname canonicalisation, IP-literal detection and the egress decision.

Properties: canonicalisation is idempotent and never yields something the C library reads as an
address; every IPv4 spelling ``inet_aton`` accepts is read as the same address by
``parse_ip_literal``; and the policy never allows a destination that a simple reference decision,
written here from the manifest's meaning, would refuse.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import stringprep
import unicodedata

from hypothesis import example, given
from hypothesis import strategies as st

from contain.boundary import boundary_from_mapping
from contain.boundary.hostnames import HostnameError, canonical_hostname, canonical_pattern, looks_like_ip_literal
from contain.egress.addresses import UnreadableLiteral, parse_ip_literal
from contain.egress.policy import Destination, EgressPolicy, Via

SPACE_OR_CONTROL = {"Cc", "Cs", "Zs", "Zl", "Zp"}  # unassigned code points are allowed in a query label
CANONICAL = re.compile(r"[a-z0-9-]{1,63}(\.[a-z0-9-]{1,63})*")

# Issue 18 item 10: names that became IP literals only after canonicalisation.
NUMERIC_AFTER_CANONICALISATION = [
    "0X7F000001",
    "\uff11\uff12\uff17.\uff10.\uff10.\uff11",
    "\u00b9\u00b2\u2077.0.0.1",
    "1\u00b2\u00b3",
]

WIDE = {chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)}  # ASCII -> full-width forms
name_chars = st.one_of(
    st.sampled_from(list("abcXYZ019-._@%:[]\x00\t \u00b2\u00b9\u0663\u00ad\u200b\u3002\uff0e\u00df\u0130")),
    st.sampled_from(list(WIDE.values())[:40]),
    st.characters(codec="utf-8"),
)
raw_names = st.text(name_chars, min_size=1, max_size=30)
inet_text = st.text(st.sampled_from(list("0123456789abcdefABCDEFxX.")), min_size=1, max_size=20)


def c_library_reads_as_address(text: str) -> bool:
    try:
        socket.getaddrinfo(text, None, flags=socket.AI_NUMERICHOST)  # never a DNS query
    except (socket.gaierror, UnicodeError, ValueError):
        return False
    return True


@given(raw_names)
@example("0X7F000001")
@example("\uff11\uff12\uff17.\uff10.\uff10.\uff11")
@example("\u00b9\u00b2\u2077.0.0.1")
@example("1\u00b2\u00b3")
@example("a\u3002b.example")
def test_canonical_hostname_is_idempotent_and_never_an_address(raw: str) -> None:
    try:
        name = canonical_hostname(raw)
    except HostnameError:
        return
    assert CANONICAL.fullmatch(name) and len(name) <= 253
    assert canonical_hostname(name) == name
    assert not looks_like_ip_literal(name)
    assert not c_library_reads_as_address(name)


@given(st.sampled_from(["", "*.", "*", "a.*."]), raw_names)
@example("*.", "\uff11\uff12\uff17.\uff10.\uff10.\uff11")
@example("*.", "0X7F.0.0.1")
def test_canonical_pattern_is_idempotent_and_never_an_address_or_a_bare_tld_wildcard(prefix: str, raw: str) -> None:
    try:
        pattern = canonical_pattern(prefix + raw)
    except HostnameError:
        return
    assert canonical_pattern(pattern) == pattern
    name = pattern.removeprefix("*.")
    assert CANONICAL.fullmatch(name) and not looks_like_ip_literal(name)
    assert not pattern.startswith("*.") or "." in name


@given(inet_text)
@example("0X7F000001")
@example("0x7f.1")
@example("017700000001")
@example("127.1")
def test_every_ipv4_spelling_inet_aton_accepts_is_read_as_the_same_address(text: str) -> None:
    try:
        expected = ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        expected = None
    try:
        got = parse_ip_literal(text)
    except UnreadableLiteral:
        got = None
        assert looks_like_ip_literal(text)
    if expected is not None:
        assert got == expected
        assert looks_like_ip_literal(text)
        try:
            canonical_hostname(text)
        except HostnameError:
            pass
        else:
            raise AssertionError(f"{text!r} is an address to inet_aton but passed as a hostname")


# ---- the egress decision against a reference ------------------------------------------------

ENTRIES = [
    {"host": "allowed.test", "ports": [443]},
    {"host": "*.wild.test", "ports": [443, 8443]},
    {"host": "api.example.com", "ports": [80]},
    {"host": "203.0.113.0/24", "ports": [443]},
    {"host": "2001:db8::/32", "ports": [443]},
]
ADDRESS_SPELLINGS = [
    "203.0.113.5",
    "3405803781",
    "0xcb007105",
    "0313.0.0161.5",
    "203.0.29189",
    "[2001:db8::1]",
    "127.0.0.1",
]


def mutate(draw: st.DrawFn, base: str) -> str:
    text = base
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["upper", "wide", "dot", "prefix", "insert", "suffix"]))
        i = draw(st.integers(0, len(text)))
        if op == "upper":
            text = text.upper()
        elif op == "wide" and text:
            j = min(i, len(text) - 1)
            text = text[:j] + WIDE.get(text[j], text[j]) + text[j + 1 :]
        elif op == "dot":
            text += "."
        elif op == "prefix":
            text = draw(st.sampled_from(["a.", "evil.", "x-y.", ".", "wild.test."])) + text
        elif op == "insert":
            text = text[:i] + draw(name_chars) + text[i:]
        else:
            text += draw(st.sampled_from([".evil.test", "evil", ":443", "\x00.evil", "@evil.test"]))
    return text


@st.composite
def destinations(draw: st.DrawFn) -> tuple[str, int]:
    base = draw(st.sampled_from(["allowed.test", "a.wild.test", "wild.test", "api.example.com", *ADDRESS_SPELLINGS]))
    host = mutate(draw, base) if draw(st.booleans()) else base
    return host, draw(st.sampled_from([80, 443, 8443, 22]))


def reference_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    body = host[:-1] if host.endswith(".") else host
    if body.startswith("[") and body.endswith("]"):
        try:
            return ipaddress.IPv6Address(body[1:-1])
        except ValueError:
            return None
    if re.fullmatch(r"[0-9a-fA-FxX.]+", body):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(body))
        except OSError:
            return None
    return None


def reference_name(host: str) -> str | None:
    """What the name means: compatibility-folded, lower case, one final dot dropped, no empty label.

    Non-ASCII labels are kept as Unicode: the reference decides by label, and only wildcard
    entries can match a label it does not spell in ASCII.
    """
    folded = unicodedata.normalize("NFKC", "".join(c for c in host if not stringprep.in_table_b1(c))).lower()
    folded = folded.replace("\u3002", ".").replace("\uff61", ".")
    folded = folded[:-1] if folded.endswith(".") else folded
    labels = folded.split(".")
    for label in labels:
        if (
            not label
            or set(label) & set("@%:/\\[]?#")
            or any(unicodedata.category(c) in SPACE_OR_CONTROL for c in label)
        ):
            return None
    return folded


def reference_allows(host: str, port: int) -> tuple[str, int] | None:
    """What a correct policy may allow for ``host:port``: the domain it must end with, and the
    number of labels, or None. An exact entry must be matched by the whole name."""
    address = reference_address(host)
    if address is not None:
        for entry in ENTRIES:
            if "/" in entry["host"] and address in ipaddress.ip_network(entry["host"]) and port in entry["ports"]:
                return str(address), 0
        return None
    name = reference_name(host)
    if name is None:
        return None
    for entry in ENTRIES:
        pattern = str(entry["host"])
        if port not in entry["ports"]:
            continue
        if name == pattern:
            return name, name.count(".") + 1
        if pattern.startswith("*.") and name.endswith(pattern[1:]):
            return pattern[2:], name.count(".") + 1
    return None


POLICY = EgressPolicy.from_boundary(boundary_from_mapping({"network": {"allow": ENTRIES}}))


@given(destinations())
@example(("0X7F000001", 443))
@example(("\uff11\uff12\uff17.\uff10.\uff10.\uff11", 443))
@example(("allowed.test\x00.evil", 443))
@example(("ALLOWED.TEST.", 443))
@example(("a.wild.test.evil.test", 443))
@example(("0313.0.0161.5", 443))
@example(("\U00018cd6a.wild.test", 443))  # found by the long run: an unassigned code point under a wildcard
def test_the_policy_never_allows_what_the_reference_decision_refuses(destination: tuple[str, int]) -> None:
    host, port = destination
    decision = POLICY.check_target(Destination(host, port, Via.CONNECT))
    if decision.is_allowed:
        expected = reference_allows(host, port)
        assert expected is not None, f"policy allowed {host!r}:{port} ({decision.reason})"
        domain, labels = expected
        if labels == 0:  # an address entry: the address itself is what is dialled
            assert decision.host == domain
        else:  # the name dialled is the allowed name, or a name with as many labels under the domain
            assert decision.host == domain or decision.host.endswith("." + domain)
            assert decision.host.count(".") + 1 == labels


@given(st.sampled_from(NUMERIC_AFTER_CANONICALISATION), st.sampled_from([80, 443]))
def test_numeric_spellings_are_never_matched_as_names(host: str, port: int) -> None:
    decision = POLICY.check_target(Destination(host, port, Via.CONNECT))
    assert not decision.is_allowed and decision.rule_id == "egress.ip_literal"
