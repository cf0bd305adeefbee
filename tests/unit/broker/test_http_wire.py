"""HTTP framing: requests read incrementally, in order, within hard limits; replies encoded."""

from __future__ import annotations

import json

import pytest

from contain.broker.http_wire import (
    MAX_BODY_BYTES,
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    MAX_LEADING_BLANK_LINES,
    MAX_LINE_BYTES,
    HttpError,
    HttpRequest,
    RequestReader,
    reply_bytes,
    request_bytes,
)

POST = b'POST /v1/actions/a HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\nAuthorization: Bearer t\r\n\r\n{"arguments":'


def _all(reader: RequestReader) -> list[tuple[str, str, bytes, bool]]:
    out = []
    while (request := reader.take()) is not None:
        out.append((request.method, request.path, request.body, request.keep_alive))
    return out


def test_a_request_fed_one_byte_at_a_time_comes_out_whole_once() -> None:
    reader = RequestReader()
    taken = []
    for byte in POST:
        reader.feed(bytes([byte]))
        taken.extend(_all(reader))
    assert taken == [("POST", "/v1/actions/a", b'{"arguments":', True)]
    assert reader.buffered == 0


def test_pipelined_requests_come_out_in_order_and_headers_are_lower_cased() -> None:
    reader = RequestReader()
    reader.feed(
        b"\r\n"
        + POST
        + b"GET /v1/health HTTP/1.0\r\nX-Y: z\r\n\r\nGET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    first = reader.take()
    assert first is not None and first.headers["authorization"] == "Bearer t"
    assert _all(reader) == [("GET", "/v1/health", b"", False), ("GET", "/v1/health", b"", False)]


def test_a_line_may_be_as_long_as_the_limit_and_not_longer() -> None:
    path = "/" + "a" * (MAX_LINE_BYTES - len("GET  HTTP/1.1\r\n") - 1)
    reader = RequestReader()
    reader.feed(f"GET {path} HTTP/1.1\r\n\r\n".encode())
    request = reader.take()
    assert request is not None and request.path == path
    reader.feed(f"GET {path}a HTTP/1.1\r\n\r\n".encode())
    with pytest.raises(HttpError) as raised:
        reader.take()
    assert raised.value.status == 431


def test_an_unterminated_line_is_refused_as_soon_as_it_passes_the_limit() -> None:
    reader = RequestReader()
    reader.feed(b"G" * (MAX_LINE_BYTES - 1))
    assert reader.take() is None  # could still end
    reader.feed(b"G")
    with pytest.raises(HttpError) as raised:
        reader.take()
    assert raised.value.status == 431


def test_headers_up_to_the_limit_are_read_and_one_more_is_refused() -> None:
    ok = b"GET / HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(MAX_HEADERS)) + b"\r\n"
    reader = RequestReader()
    reader.feed(ok)
    request = reader.take()
    assert request is not None and len(request.headers) == MAX_HEADERS
    reader.feed(b"GET / HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(MAX_HEADERS + 1)))
    with pytest.raises(HttpError) as raised:
        reader.take()
    assert raised.value.status == 431


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/2\r\n\r\n", 400),
        (b"GET  / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1), 413),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
        # the red team's findings (issue 18 item 10): each was read as a request before
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 0\r\n\r\nx", 400),  # duplicate, last won
        (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nxyz", 400),  # even when equal
        (b"POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nxyz", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 1_0\r\n\r\n0123456789", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: \xd9\xa3\r\n\r\nxyz", 400),  # a non-ASCII digit
        (b"POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\nxyz", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 00000000000000000001\r\n\r\nx", 400),  # over the digit bound (19)
        (b"POST / HTTP/1.1\r\nContent-Length : 3\r\n\r\nxyz", 400),  # space before the colon
        (b"GET / HTTP/1.1\nHost: x\n\n", 400),  # bare-LF head
        (b"GET / HTTP/1.1\r\nHost: x\n\r\n", 400),  # one bare LF among CRLFs
        (b"GET / HTTP/1.1\r\nX-A: 1\r\n  continued\r\n\r\n", 400),  # obs-fold
        (b"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400),  # a CR inside a line
        (b"GET / HTTP/1.1\r\nX-A: a\x00b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nAuthorization: Bearer a\r\nauthorization: Bearer b\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\nContent-Length: 1\r\n\r\nx", 411),
        (b"GET /a\x7fb HTTP/1.1\r\n\r\n", 400),
        (b"GET a HTTP/1.1\r\n\r\n", 400),
        (b"G(T / HTTP/1.1\r\n\r\n", 400),
        (b"\r\n" * (MAX_LEADING_BLANK_LINES + 1) + b"GET / HTTP/1.1\r\n\r\n", 400),
    ],
)
def test_what_the_reader_will_not_frame_is_refused_with_its_status(head: bytes, status: int) -> None:
    reader = RequestReader()
    reader.feed(head)
    with pytest.raises(HttpError) as raised:
        reader.take()
    assert raised.value.status == status


def test_a_body_of_exactly_the_limit_is_read() -> None:
    reader = RequestReader()
    reader.feed(b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % MAX_BODY_BYTES + b"x" * MAX_BODY_BYTES)
    request = reader.take()
    assert request is not None and len(request.body) == MAX_BODY_BYTES


def test_reply_bytes_frame_the_json_and_name_a_denial() -> None:
    body = {"status": "refused", "error": {"code": "token", "reason": "forged"}}
    data = reply_bytes(401, body, keep_alive=False)
    head, _, payload = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 401 Unauthorized"
    assert "Contain-Denied-By: token" in lines and "Connection: close" in lines
    assert f"Content-Length: {len(payload)}" in lines and json.loads(payload) == body
    assert b"Connection" not in reply_bytes(200, {"ok": True}, keep_alive=True)


def test_blank_lines_before_a_request_are_bounded_even_when_they_trickle_in() -> None:
    reader = RequestReader()
    for _ in range(MAX_LEADING_BLANK_LINES):
        reader.feed(b"\r\n")
        assert reader.take() is None
    reader.feed(b"\r\n")
    with pytest.raises(HttpError) as raised:
        reader.take()
    assert raised.value.status == 400


def test_a_head_is_bounded_in_total_not_only_per_line() -> None:
    reader = RequestReader()
    line = b"X-%02d: " + b"v" * 1000 + b"\r\n"
    reader.feed(b"GET / HTTP/1.1\r\n" + b"".join(line % i for i in range(MAX_HEAD_BYTES // 1000 + 1)))
    with pytest.raises(HttpError) as raised:
        reader.take()
    assert raised.value.status == 431


def test_a_parsed_head_announces_the_body_it_waits_for() -> None:
    reader = RequestReader()
    reader.feed(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n01234")
    assert reader.take() is None and reader.expecting == 10
    reader.feed(b"56789")
    assert reader.take() is not None and reader.expecting == 0


def test_request_bytes_read_back_as_the_same_request() -> None:
    request = HttpRequest("POST", "/v1/actions/a", {"authorization": "Bearer t"}, b'{"a": 1}', True)
    reader = RequestReader()
    reader.feed(request_bytes(request))
    again = reader.take()
    assert again is not None
    assert (again.method, again.path, again.body, again.keep_alive) == ("POST", "/v1/actions/a", b'{"a": 1}', True)
    assert dict(again.headers) == {"authorization": "Bearer t", "content-length": "8"}
