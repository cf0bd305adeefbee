"""HTTP/1.1 framing for the broker's server: an incremental request reader with hard limits, and
the bytes of a request and of a reply.

Only what the broker needs: Content-Length bodies, keep-alive, pipelined requests answered in
order. The reader is strict on purpose: a proxy or a second parser in front of the broker must
never see a different request boundary than the broker does (request smuggling, RFC 9112 11.2),
and a framing rule that guesses is a way to make one request look like two. So:

Refused, with the status answered and why:

- 400: a line not ended by CRLF (a bare LF, or a CR inside a line): two parsers would split
  lines differently (RFC 9112 2.2).
- 400: more than ``MAX_LEADING_BLANK_LINES`` blank lines before a request line: blank lines
  were a way to hold a connection without ever starting a request.
- 400: a request line other than ``TOKEN SP /visible-ASCII-path SP HTTP/1.x``: the path reaches
  the router verbatim.
- 400: a header line starting with SP or HTAB (obs-fold; RFC 9112 5.2 allows reject or unfold).
- 400: a header name that is not an RFC 9110 token, or whitespace before the colon (RFC 9112
  5.1: "MUST reject" with 400).
- 400: a control character other than HTAB in a header value (CR, LF, NUL split or end headers
  in other parsers).
- 400: a header name given twice: "last wins" against "first wins" is a smuggling primitive, and
  the broker never combines values.
- 411: any Transfer-Encoding: only Content-Length bodies are read (TE next to CL is the classic
  smuggling pair).
- 400: a Content-Length that is not 1 to ``MAX_CONTENT_LENGTH_DIGITS`` ASCII digits (``+3``,
  ``1_0``, ``-1``, a list, a non-ASCII digit: Python's ``int()`` accepts several, HTTP none).
- 413: a Content-Length over ``MAX_BODY_BYTES``.
- 431: a line over ``MAX_LINE_BYTES``, more than ``MAX_HEADERS`` headers, or a head over
  ``MAX_HEAD_BYTES`` (bounded memory per connection).

Each refusal raises ``HttpError`` with the status to answer; the connection is then closed.
What is not done here: timing. The reader does not know how long bytes took to arrive; the
whole-request deadline is the server loop's (``server_loop``), which also caps how many body
bytes all connections may hold at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contain.http_framing import MAX_CONTENT_LENGTH_DIGITS, TOKEN, FramingError, parse_content_length, parse_header_line

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_CONTENT_LENGTH_DIGITS",
    "MAX_HEADERS",
    "MAX_HEAD_BYTES",
    "MAX_LEADING_BLANK_LINES",
    "MAX_LINE_BYTES",
    "HttpError",
    "HttpRequest",
    "RequestReader",
    "reply_bytes",
    "request_bytes",
]

MAX_LINE_BYTES = 8192
MAX_HEADERS = 64
MAX_HEAD_BYTES = 32768  # the request line and all header lines together
MAX_BODY_BYTES = 1 << 20
# RFC 9112 2.2 asks a server to ignore "at least one" empty line before a request line (some
# clients send CRLF after a POST body); two allows that, and no more.
MAX_LEADING_BLANK_LINES = 2

_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    422: "Unprocessable Content",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
_PATH = re.compile(rb"/[\x21-\x7e]*")  # origin-form: visible ASCII, no spaces or controls
_VERSIONS = (b"HTTP/1.1", b"HTTP/1.0")


class HttpError(Exception):
    """A request the reader refuses to frame; ``status`` is the answer, then the connection closes."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # names lower-cased, each at most once
    body: bytes
    keep_alive: bool
    version: str = "HTTP/1.1"


@dataclass(frozen=True)
class _Head:
    method: str
    path: str
    version: str
    headers: dict[str, str]
    length: int
    keep_alive: bool


class RequestReader:
    """Bytes in (``feed``), whole requests out (``take``), in order."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._head: _Head | None = None  # parsed, waiting for its body

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def expecting(self) -> int:
        """Body bytes announced by a parsed head that is still waiting for them (0 otherwise)."""
        return self._head.length if self._head is not None else 0

    def take(self) -> HttpRequest | None:
        """The next complete request, or None until more bytes arrive.

        Raises:
            HttpError: the bytes are not a request the broker will read (see the module docstring).
        """
        if self._head is None:
            self._head = self._read_head()
            if self._head is None:
                return None
        head = self._head
        if len(self._buf) < head.length:
            return None
        body = bytes(self._buf[: head.length])
        del self._buf[: head.length]
        self._head = None
        return HttpRequest(head.method, head.path, head.headers, body, head.keep_alive, head.version)

    def _lines(self) -> list[bytes] | None:
        """The request line and header lines (without CRLF) up to the blank line, which is consumed
        with them; None while incomplete."""
        buf = self._buf
        lines: list[bytes] = []
        pos = 0
        blanks = 0
        while True:
            end = buf.find(b"\n", pos, pos + MAX_LINE_BYTES)
            if end < 0:
                if len(buf) - pos >= MAX_LINE_BYTES:
                    raise HttpError(431, "line too long")
                return None  # the buffer holds less than MAX_HEAD_BYTES + MAX_LINE_BYTES
            if end == pos or buf[end - 1] != 0x0D:
                raise HttpError(400, "a line must end with CRLF")
            line = bytes(buf[pos : end - 1])
            pos = end + 1
            if b"\r" in line:
                raise HttpError(400, "a bare CR inside a line")
            if not line:
                if lines:
                    del buf[:pos]
                    return lines
                blanks += 1  # before a request line: tolerated up to the bound (RFC 9112 2.2)
                if blanks > MAX_LEADING_BLANK_LINES:
                    raise HttpError(400, "too many blank lines before the request line")
                continue
            lines.append(line)
            if len(lines) > MAX_HEADERS + 1:
                raise HttpError(431, "too many headers")
            if pos > MAX_HEAD_BYTES:
                raise HttpError(431, "request head too large")

    def _read_head(self) -> _Head | None:
        lines = self._lines()
        if lines is None:
            return None
        method, path, version = _request_line(lines[0])
        headers: dict[str, str] = {}
        for raw in lines[1:]:
            name, value = _header(raw)
            if name in headers:
                raise HttpError(400, f"header {name} given more than once")
            headers[name] = value
        if "transfer-encoding" in headers:
            raise HttpError(411, "send a Content-Length body; Transfer-Encoding is refused")
        length = _content_length(headers.get("content-length"))
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        return _Head(method, path, version, headers, length, keep)


def _request_line(line: bytes) -> tuple[str, str, str]:
    parts = line.split(b" ")
    if (
        len(parts) != 3
        or parts[2] not in _VERSIONS
        or TOKEN.fullmatch(parts[0]) is None
        or _PATH.fullmatch(parts[1]) is None
    ):
        raise HttpError(400, "malformed request line")
    return parts[0].decode("ascii"), parts[1].decode("ascii"), parts[2].decode("ascii")


def _header(raw: bytes) -> tuple[str, str]:
    try:
        return parse_header_line(raw)  # the rule the egress proxy uses too
    except FramingError as exc:
        raise HttpError(exc.status, exc.reason) from exc


def _content_length(value: str | None) -> int:
    try:
        length = parse_content_length([] if value is None else [value], transfer_encoding=False) or 0
    except FramingError as exc:
        raise HttpError(exc.status, exc.reason) from exc
    if length > MAX_BODY_BYTES:
        raise HttpError(413, "body over 1 MiB")
    return length


def request_bytes(request: HttpRequest) -> bytes:
    """The bytes of ``request`` as a client sends it (for tests and the benchmark's clients).

    Content-Length is written from the body (any given one is replaced); other headers as given.
    """
    lines = [f"{request.method} {request.path} {request.version}"]
    lines += [f"{name}: {value}" for name, value in request.headers.items() if name != "content-length"]
    if request.body or "content-length" in request.headers:
        lines.append(f"content-length: {len(request.body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body


def reply_bytes(status: int, body: Mapping[str, Any], *, keep_alive: bool) -> bytes:
    """The whole HTTP response for a JSON reply (a denial names its cause in ``Contain-Denied-By``)."""
    data = json.dumps(body, sort_keys=True).encode()
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        "Server: contain-broker/1",
    ]
    error = body.get("error")
    if status in (401, 403) and isinstance(error, Mapping):
        lines.append(f"Contain-Denied-By: {error.get('code', '')}")
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data
