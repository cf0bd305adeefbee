"""contain.http_framing: the one framing rule, and both parsers answer each head the same way."""

from __future__ import annotations

import pytest

from contain.broker.http_wire import HttpError, RequestReader
from contain.egress.proxy import BadRequest, parse_request_head
from contain.http_framing import FramingError, parse_content_length, parse_header_line

# (header lines, whether the rule accepts them); the same lines go to the proxy and the broker
HEADS = [
    ([b"Host: a", b"Content-Length: 3"], True),
    ([b"Host: a", b"Content-Length: 3", b"Content-Length: 3"], False),  # even equal: refused
    ([b"Host: a", b"Content-Length: +3"], False),
    ([b"Host: a", b"Content-Length: 1_0"], False),
    ([b"Host: a", "Content-Length: ²".encode("latin-1", "replace")], False),
    ([b"Host: a", b"Content-Length: " + b"9" * 20], False),
    ([b"Host: a", b"Content-Length : 3"], False),  # whitespace before the colon
    ([b"Host: a", b" folded", b"Content-Length: 3"], False),
    ([b"Host: a", b"X: a\x01b", b"Content-Length: 3"], False),
    ([b"Host: a", b"X: a\tb", b"Content-Length: 3"], True),  # HTAB is legal in a value
]


def _head(target: bytes, lines: list[bytes]) -> bytes:
    return b"\r\n".join([b"POST " + target + b" HTTP/1.1", *lines]) + b"\r\n\r\n"


@pytest.mark.parametrize(("lines", "accepted"), HEADS)
def test_the_proxy_and_the_broker_accept_and_refuse_the_same_heads(lines, accepted):
    try:
        parse_request_head(_head(b"http://a/", lines))
        proxy_accepts = True
    except BadRequest:
        proxy_accepts = False
    reader = RequestReader()
    try:
        reader.feed(_head(b"/v1/x", lines) + b"abc")
        broker_accepts = reader.take() is not None
    except HttpError:
        broker_accepts = False
    assert (proxy_accepts, broker_accepts) == (accepted, accepted)


def test_content_length_rules():
    assert parse_content_length([], transfer_encoding=True) is None
    assert parse_content_length(["0042"], transfer_encoding=False) == 42
    with pytest.raises(FramingError, match="Transfer-Encoding"):
        parse_content_length(["3"], transfer_encoding=True)
    with pytest.raises(FramingError, match="more than once"):
        parse_content_length(["3", "3"], transfer_encoding=False)


def test_header_names_are_lower_cased_and_values_trimmed():
    assert parse_header_line(b"Content-Type: \t text/plain \t") == ("content-type", "text/plain")
