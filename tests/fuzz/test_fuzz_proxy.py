"""Fuzzing the egress proxy's request-head parser and its target canonicaliser.

Properties: nothing but ``BadRequest`` ever leaves the parser; what it accepts has a visible-ASCII
target and a bounded Content-Length written in ASCII digits; parse -> render -> parse is stable;
the server asks for a decision only about a head that parses, and records every attempt.
"""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

import proxy_harness
from contain.boundary import ToolVerdict
from contain.egress.log import EgressEvent
from contain.egress.policy import Destination, EgressDecision
from contain.egress.proxy import (
    MAX_CONTENT_LENGTH,
    BadRequest,
    RequestHead,
    parse_absolute_target,
    parse_authority,
    parse_request_head,
)

VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
ASCII_DIGITS = re.compile(r"[0-9]+")

# Text that is hard on parsers: digits of every script, spaces of every kind, controls.
tricky_chars = st.one_of(
    st.sampled_from(list("0123456789:./@[]%#?\t \x0b\x0c\x7f\x00\xb2\xb9\u0663\uff11\u00a0\u2028")),
    st.characters(codec="utf-8"),
)
tricky_text = st.text(tricky_chars, max_size=24)
hosts = st.one_of(
    st.sampled_from(
        ["a.test", "A.TEST.", "127.0.0.1", "0X7F000001", "[::1]", "[fe80::1%25eth0]", "xn--bcher-kva.test"]
    ),
    tricky_text,
)
ports = st.one_of(
    st.sampled_from(["", ":80", ":443", ":0", ":65536", ":+1", ":\u0663"]), tricky_text.map(lambda t: ":" + t)
)
content_lengths = st.one_of(
    st.integers(min_value=0, max_value=2**70).map(str),
    st.sampled_from(["\xb2", "1\xb9", "\u0663", "+4", "-1", " 4", "9" * 5000, "", "0x10", "1_0"]),
    tricky_text,
)
header_names = st.sampled_from(["Host", "Content-Length", "Transfer-Encoding", "Connection", "X-A", "Bad Name", ""])
header_values = st.one_of(content_lengths, hosts, tricky_text)
methods = st.sampled_from(["GET", "POST", "CONNECT", "PUT", "G\tT", "", "get"])
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ", "http/1.1"])


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    method = draw(methods)
    authority = draw(hosts) + draw(ports)
    target = (
        authority
        if method == "CONNECT"
        else draw(st.sampled_from(["http://", "https://", "", "HTTP://"]))
        + authority
        + draw(st.sampled_from(["", "/", "/x?y", "/\t", "#f"]))
    )
    lines = [f"{method} {target} {draw(versions)}"]
    for name, value in draw(st.lists(st.tuples(header_names, header_values), max_size=5)):
        lines.append(f"{name}: {value}")
    if draw(st.booleans()):
        lines.append(f"Host: {authority}")
    text = "\r\n".join(lines) + "\r\n\r\n"
    return text.encode(draw(st.sampled_from(["utf-8", "latin-1"])), "replace")


def render(head: RequestHead) -> bytes:
    lines = [f"{head.method} {head.target} {head.version}"] + [f"{k}: {v}" for k, v in head.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def check_parsed(head: RequestHead) -> None:
    assert VISIBLE_ASCII.fullmatch(head.target)
    lengths = head.values("content-length")
    if lengths:
        assert ASCII_DIGITS.fullmatch(lengths[0]) and len(lengths) == 1
        assert head.content_length == int(lengths[0]) <= MAX_CONTENT_LENGTH
    else:
        assert head.content_length is None
    assert parse_request_head(render(head)) == head  # parse -> render -> parse is stable


# Issue 18 item 7 and 10 findings, replayed on every run.
FINDINGS = [
    b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: \xb2\r\n\r\n",
    b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n",
    b"GET http://a.test/\tx HTTP/1.1\r\nHost: a.test\r\n\r\n",
    b"CONNECT a.test\t:443 HTTP/1.1\r\n\r\n",
]


def _with_findings(test):  # type: ignore[no-untyped-def]
    for finding in FINDINGS:
        test = example(finding)(test)
    return test


@_with_findings
@given(st.one_of(heads(), st.binary(max_size=300).map(lambda b: b + b"\r\n\r\n")))
def test_the_head_parser_accepts_only_well_formed_heads_and_raises_nothing_but_bad_request(raw: bytes) -> None:
    try:
        head = parse_request_head(raw)
    except BadRequest as exc:
        assert exc.status in (400, 403, 411, 431) and exc.reason
        return
    check_parsed(head)


@given(tricky_text, st.sampled_from([None, 80, 443]))
@example("a.test\t:443", None)
@example("0X7F000001:80", None)
@example("[::1]:\u0663", None)
def test_parse_authority_returns_a_visible_host_and_a_valid_port_or_refuses(text: str, default: int | None) -> None:
    try:
        host, port = parse_authority(text, default_port=default)
    except BadRequest:
        return
    assert host and 1 <= port <= 65535
    assert VISIBLE_ASCII.fullmatch(host)
    shown = f"[{host}]" if ":" in host else host
    assert parse_authority(f"{shown}:{port}", default_port=None) == (host, port)


@given(
    st.sampled_from(["http://", "HTTP://", "https://", "", "http:/"]),
    tricky_text,
    st.sampled_from(["", "/", "/a?b", "?q"]),
)
def test_absolute_targets_round_trip_through_render(scheme: str, authority: str, rest: str) -> None:
    try:
        host, port, origin = parse_absolute_target(scheme + authority + rest)
    except BadRequest:
        return
    shown = f"[{host}]" if ":" in host else host
    assert origin.startswith("/")
    assert parse_absolute_target(f"http://{shown}:{port}{origin}") == (host, port, origin)


def serve_once(request: bytes) -> tuple[list[EgressEvent], list[Destination]]:
    """The shared harness (tests/proxy_harness.py) with a decision that denies everything."""

    def decide(destination: Destination) -> EgressDecision:
        reason = "fuzz: everything is denied"
        return EgressDecision(ToolVerdict.DENY, "egress.not_allowed", reason, destination.host, destination.port)

    _response, events, asked = proxy_harness.serve_once(request, decide)
    return events, asked


@_with_findings
@given(heads())
def test_the_server_decides_only_on_heads_that_parse_and_records_every_attempt(raw: bytes) -> None:
    events, asked = serve_once(raw)
    assert len(events) == 1, events  # allowed or refused, every attempt is one event
    try:
        head = parse_request_head(raw)
        if head.method == "CONNECT":
            host, port = parse_authority(head.target, default_port=None)
        else:
            host, port, _ = parse_absolute_target(head.target)
    except BadRequest:
        assert asked == []
        return
    assert asked == [] or [(d.host, d.port) for d in asked] == [(host, port)]
