"""Property tests for the broker's HTTP framer (``contain.broker.http_wire``).

Properties: any bytes, cut anywhere, give requests or a mapped ``HttpError`` (never another
exception, never a status outside the table); how the bytes are cut does not change the outcome;
a request read, rendered and read again is the same request. Every red-team finding (issue 18
item 10) is an explicit ``@example`` and must be refused.
"""

from __future__ import annotations

import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from contain.broker.http_wire import MAX_BODY_BYTES, HttpError, HttpRequest, RequestReader, request_bytes
from contain.http_framing import MAX_CONTENT_LENGTH_DIGITS

MAPPED = {400, 411, 413, 431}
FINDINGS = (
    b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 0\r\n\r\nx",
    b"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nxyz",
    b"POST / HTTP/1.1\r\nContent-Length: 1_0\r\n\r\n0123456789",
    b"POST / HTTP/1.1\r\nContent-Length : 3\r\n\r\nxyz",
    b"GET / HTTP/1.1\nHost: x\n\n",
    b"GET / HTTP/1.1\r\nX-A: 1\r\n continued\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"\r\n" * 1000 + b"GET / HTTP/1.1\r\n\r\n",
)


def _outcome(
    data: bytes, cuts: list[int]
) -> tuple[list[tuple[str, str, tuple[tuple[str, str], ...], bytes]], int | None]:
    """Feed ``data`` cut at ``cuts``; the requests taken, and the status of the refusal if any."""
    reader = RequestReader()
    taken = []
    bounds = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    try:
        for start, end in itertools.pairwise(bounds):
            reader.feed(data[start:end])
            while (request := reader.take()) is not None:
                taken.append((request.method, request.path, tuple(sorted(request.headers.items())), request.body))
    except HttpError as exc:
        return taken, exc.status
    return taken, None


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=2048), cuts=st.lists(st.integers(min_value=0, max_value=4096), max_size=8))
@example(data=FINDINGS[0], cuts=[])
@example(data=FINDINGS[1], cuts=[5])
@example(data=FINDINGS[2], cuts=[])
@example(data=FINDINGS[3], cuts=[30])
@example(data=FINDINGS[4], cuts=[1, 2, 3])
@example(data=FINDINGS[5], cuts=[])
@example(data=FINDINGS[6], cuts=[])
@example(data=FINDINGS[7], cuts=[2, 4, 6])
def test_any_bytes_cut_anywhere_give_requests_or_a_mapped_refusal_the_same_way(data: bytes, cuts: list[int]) -> None:
    taken, status = _outcome(data, cuts)
    assert status is None or status in MAPPED
    assert (taken, status) == _outcome(data, [])  # the cuts do not change what is read


@settings(max_examples=300, deadline=None)
@given(finding=st.sampled_from(FINDINGS), cuts=st.lists(st.integers(min_value=0, max_value=4096), max_size=4))
@example(finding=FINDINGS[0], cuts=[])
@example(finding=FINDINGS[1], cuts=[])
@example(finding=FINDINGS[2], cuts=[])
@example(finding=FINDINGS[3], cuts=[])
@example(finding=FINDINGS[4], cuts=[])
@example(finding=FINDINGS[5], cuts=[])
@example(finding=FINDINGS[6], cuts=[])
@example(finding=FINDINGS[7], cuts=[])
def test_every_red_team_finding_is_refused_however_it_arrives(finding: bytes, cuts: list[int]) -> None:
    taken, status = _outcome(finding, cuts)
    assert taken == [] and status in (400, 411)


_TOKEN_CHARS = st.sampled_from("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_NAMES = st.text(_TOKEN_CHARS, min_size=1, max_size=20).filter(
    lambda n: n.lower() not in ("content-length", "transfer-encoding")
)
_VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40).map(
    lambda v: v.strip(" \t")
)
_REQUESTS = st.builds(
    HttpRequest,
    method=st.text(_TOKEN_CHARS, min_size=1, max_size=8),
    path=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60).map(lambda p: "/" + p),
    headers=st.dictionaries(_NAMES.map(str.lower), _VALUES, max_size=8),
    body=st.binary(max_size=512),
    keep_alive=st.booleans(),
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.0"]),
)


@settings(max_examples=300, deadline=None)
@given(requests=st.lists(_REQUESTS, min_size=1, max_size=4), cuts=st.lists(st.integers(0, 8192), max_size=6))
@example(requests=[HttpRequest("POST", "/v1/actions/a", {"authorization": "Bearer x"}, b"{}", True)], cuts=[1, 20, 40])
def test_parse_render_parse_is_stable(requests: list[HttpRequest], cuts: list[int]) -> None:
    wire = b"".join(request_bytes(r) for r in requests)
    first, status = _outcome(wire, cuts)
    assert status is None and len(first) == len(requests)
    rendered = b"".join(
        request_bytes(HttpRequest(method, path, dict(headers), body, True)) for method, path, headers, body in first
    )
    second, status = _outcome(rendered, [])
    assert status is None and second == first


@settings(max_examples=300, deadline=None)
@given(length=st.integers(min_value=MAX_BODY_BYTES + 1, max_value=10**30))
@example(length=MAX_BODY_BYTES + 1)
@example(length=10**19 - 1)
@example(length=10**19)
def test_a_content_length_over_the_limit_is_413_or_400_never_read(length: int) -> None:
    taken, status = _outcome(b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % length, [])
    assert taken == [] and status == (413 if length < 10**MAX_CONTENT_LENGTH_DIGITS else 400)
