
import pytest

import proxy_harness
from contain.boundary import ToolVerdict
from contain.egress.log import EgressEvent
from contain.egress.policy import Destination, EgressDecision
from contain.egress.proxy import (
    MAX_HEAD_BYTES,
    BadRequest,
    RequestHead,
    check_host_header,
    parse_absolute_target,
    parse_authority,
    parse_request_head,
    plan_forward_head,
    refusal_response,
)

BAD_HEADS = {
    "http/0.9": b"GET /\r\n\r\n",
    "http/2 version": b"GET http://a.test/ HTTP/2.0\r\nHost: a.test\r\n\r\n",
    "bare LF": b"GET http://a.test/ HTTP/1.1\nHost: a.test\r\n\r\n",
    "bare CR": b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\rX: y\r\n\r\n",
    "obs-fold": b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: a\r\n  folded\r\n\r\n",
    "two hosts": b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
    "CL and TE": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n",
    "two CL": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
    "signed CL": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: +4\r\n\r\n",
    "TE on forward": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n",
    "space before colon": b"GET http://a.test/ HTTP/1.1\r\nHost : a.test\r\n\r\n",
    "NUL in target": b"CONNECT a.test\x00.evil:443 HTTP/1.1\r\n\r\n",
    "NUL in value": b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: a\x00b\r\n\r\n",
    "double space": b"GET  http://a.test/ HTTP/1.1\r\n\r\n",
    "incomplete": b"GET http://a.test/ HTTP/1.1\r\n",
    # Issue 18 items 7 and 10 (fuzzing): each was accepted, and the Content-Length ones failed
    # with ValueError after the upstream was dialled, with no event recorded.
    # Header values are read as latin-1, where the byte 0xB2 is "²": str.isdigit() said yes.
    "superscript CL": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: \xb2\r\n\r\n",
    "superscript CL after a digit": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\xb9\r\n\r\n",
    "UTF-8 arabic-indic CL": "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: \u0663\r\n\r\n".encode(),
    "5000-digit CL": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n",
    "20-digit CL": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 99999999999999999999\r\n\r\n",
    "CL past 2**63-1": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 9223372036854775808\r\n\r\n",
    "empty CL": b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: \r\n\r\n",
    "tab in target": b"GET http://a.test/\tx HTTP/1.1\r\nHost: a.test\r\n\r\n",
    "tab in CONNECT target": b"CONNECT a.test\t:443 HTTP/1.1\r\n\r\n",
    "vertical tab in target": b"GET http://a.test/\x0bx HTTP/1.1\r\nHost: a.test\r\n\r\n",
    "DEL in target": b"GET http://a.test/\x7f HTTP/1.1\r\nHost: a.test\r\n\r\n",
    "non-ASCII in target": "GET http://a.test/\u00e9 HTTP/1.1\r\nHost: a.test\r\n\r\n".encode(),
}


@pytest.mark.parametrize("head", BAD_HEADS.values(), ids=BAD_HEADS.keys())
def test_ambiguous_or_malformed_heads_are_refused(head: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_request_head(head)


def test_content_length_is_parsed_once_as_ascii_digits_and_kept_on_the_head() -> None:
    head = parse_request_head(
        b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 9223372036854775807\r\n\r\n"
    )
    assert head.content_length == 2**63 - 1
    assert parse_request_head(b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n").content_length is None


def test_a_connect_head_parses_with_lower_case_header_names() -> None:
    head = parse_request_head(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nUser-Agent: x\r\n\r\n")
    assert head == RequestHead("CONNECT", "a.test:443", "HTTP/1.1", (("host", "a.test:443"), ("user-agent", "x")))


@pytest.mark.parametrize(
    ("text", "default", "expected"),
    [
        ("a.test:443", None, ("a.test", 443)),
        ("[::1]:443", None, ("::1", 443)),
        ("[::1]", 80, ("::1", 80)),
        ("a.test", 80, ("a.test", 80)),
        ("127.1:8080", None, ("127.1", 8080)),
    ],
)
def test_parse_authority(text: str, default: int | None, expected: tuple[str, int]) -> None:
    assert parse_authority(text, default_port=default) == expected


@pytest.mark.parametrize(
    "text",
    [
        "a.test",
        "user@a.test:443",
        "a.test:0",
        "a.test:65536",
        "a.test:+1",
        "::1:443",
        ":443",
        "[::1]x:1",
        "a.test:",
    ],
)
def test_parse_authority_refuses(text: str) -> None:
    with pytest.raises(BadRequest):
        parse_authority(text, default_port=None)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("http://a.test/x?y=1", ("a.test", 80, "/x?y=1")),
        ("http://a.test:8080", ("a.test", 8080, "/")),
        ("HTTP://a.test?q", ("a.test", 80, "/?q")),
    ],
)
def test_parse_absolute_target(target: str, expected: tuple[str, int, str]) -> None:
    assert parse_absolute_target(target) == expected


@pytest.mark.parametrize(
    "target",
    [
        "/squid-internal-mgr/info",
        "cache_object://a.test/info",
        "https://a.test/",
        "http://u@a.test/",
        "http://a.test/#f",
    ],
)
def test_only_absolute_http_targets_are_forwarded(target: str) -> None:
    with pytest.raises(BadRequest):
        parse_absolute_target(target)


def _head(method: str, target: str, *headers: tuple[str, str], version: str = "HTTP/1.1") -> RequestHead:
    return RequestHead(method, target, version, headers)


def test_connect_host_header_must_agree_with_the_target() -> None:
    head = _head("CONNECT", "allowed.test:443", ("host", "evil.test:443"))
    with pytest.raises(BadRequest) as info:
        check_host_header(head, "allowed.test", 443, default_port=443)
    assert info.value.status == 403


@pytest.mark.parametrize("value", ["allowed.test:443", "ALLOWED.test.:443", "allowed.test"])
def test_connect_host_header_spellings_of_the_same_target_pass(value: str) -> None:
    check_host_header(_head("CONNECT", "allowed.test:443", ("host", value)), "allowed.test", 443, default_port=443)


def test_plain_http_host_must_match_target_port_too() -> None:
    with pytest.raises(BadRequest):
        check_host_header(_head("GET", "http://a.test/", ("host", "a.test:81")), "a.test", 80, default_port=80)
    with pytest.raises(BadRequest):
        check_host_header(_head("GET", "http://a.test/"), "a.test", 80, default_port=80)
    check_host_header(_head("GET", "http://a.test/", version="HTTP/1.0"), "a.test", 80, default_port=80)


def test_forward_head_is_origin_form_with_host_from_target_and_no_hop_by_hop() -> None:
    head = _head(
        "POST",
        "http://a.test:8080/p",
        ("host", "a.test:8080"),
        ("proxy-authorization", "Basic x"),
        ("connection", "keep-alive, X-Secret"),
        ("x-secret", "1"),
        ("content-length", "2"),
        ("accept", "*/*"),
    )
    assert plan_forward_head(head, "a.test", 8080, "/p") == (
        b"POST /p HTTP/1.1\r\nHost: a.test:8080\r\ncontent-length: 2\r\naccept: */*\r\nConnection: close\r\n\r\n"
    )


def test_refusal_carries_the_rule_id_header_and_the_reason_body() -> None:
    response = refusal_response(403, "egress.not_allowed", "x.test:443 is not in network.allow")
    assert response == (
        b"HTTP/1.1 403 Forbidden\r\nContain-Denied-By: egress.not_allowed\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 35\r\n"
        b"Connection: close\r\n\r\n"
        b"x.test:443 is not in network.allow\n"
    )


# ---- the server against an in-memory client (a socketpair; no network, no upstream) ----------


def serve_once(request: bytes, decision: EgressDecision | None = None) -> tuple[bytes, list[EgressEvent], list[Destination]]:
    """The shared harness (tests/proxy_harness.py) with one fixed ``decision`` (None: must not ask)."""
    return proxy_harness.serve_once(request, None if decision is None else lambda _destination: decision)


def test_denied_connect_answers_403_with_rule_and_records_the_attempt() -> None:
    reason = "evil.test:443 is not in network.allow"
    denial = EgressDecision(ToolVerdict.DENY, "egress.not_allowed", reason, "evil.test", 443)
    response, events, asked = serve_once(b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", denial)
    assert response.startswith(b"HTTP/1.1 403 Forbidden\r\nContain-Denied-By: egress.not_allowed\r\n")
    assert response.endswith(b"evil.test:443 is not in network.allow\n")
    assert [(d.host, d.port, str(d.via)) for d in asked] == [("evil.test", 443, "connect")]
    assert events == [
        EgressEvent(
            1.0,
            "evil.test",
            443,
            None,
            "deny",
            "evil.test:443 is not in network.allow",
            "egress.not_allowed",
            "connect",
            0,
            0,
        )
    ]


def test_connect_with_mismatched_host_is_refused_before_any_decision() -> None:
    response, events, asked = serve_once(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
    assert response.startswith(b"HTTP/1.1 403 Forbidden\r\nContain-Denied-By: egress.host_mismatch\r\n")
    assert asked == [] and events[0].rule_id == "egress.host_mismatch"


@pytest.mark.parametrize("head", BAD_HEADS.values(), ids=BAD_HEADS.keys())
def test_malformed_requests_get_4xx_and_a_record_never_a_decision(head: bytes) -> None:
    response, events, asked = serve_once(head)
    assert response[:10] in (b"HTTP/1.1 4",) and b"Contain-Denied-By: egress.request" in response
    assert asked == [] and len(events) == 1 and events[0].verdict == "deny"


def test_oversize_head_is_refused_with_431() -> None:
    response, _, asked = serve_once(b"GET http://a.test/ HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES + 10))
    assert response.startswith(b"HTTP/1.1 431") and asked == []


@pytest.mark.parametrize("text", ["a.test\t:443", "a.test :443", "a.\x0btest", "a.t\u00e9st:443", "a.test\x7f"])
def test_an_authority_with_whitespace_control_or_non_ascii_characters_is_refused(text: str) -> None:
    with pytest.raises(BadRequest, match="control, whitespace or non-ASCII"):
        parse_authority(text, default_port=443)


def test_a_host_header_with_an_inner_tab_is_refused() -> None:
    head = parse_request_head(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\t:443\r\n\r\n")
    with pytest.raises(BadRequest, match="bad Host header"):
        check_host_header(head, "a.test", 443, default_port=443)
