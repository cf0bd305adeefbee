"""HTTP/1.1 framing for the broker's server: an incremental request reader with hard limits, and
the reply's bytes.

Only what the broker needs: Content-Length bodies, keep-alive, pipelined requests answered in
order. Anything else (chunked bodies, an oversized line, too many headers, a body over 1 MiB, a
request line that is not ``METHOD PATH HTTP/1.x``) raises ``HttpError`` with the status to answer:
fail closed rather than guess where a request ends. The reader never holds more than one
request's head and body beyond what the limits allow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEADERS",
    "MAX_LINE_BYTES",
    "HttpError",
    "HttpRequest",
    "RequestReader",
    "reply_bytes",
]

MAX_LINE_BYTES = 8192
MAX_HEADERS = 64
MAX_BODY_BYTES = 1 << 20

_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    422: "Unprocessable Content",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
_BLANK = (b"\r\n", b"\n")


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
    headers: Mapping[str, str]  # names lower-cased
    body: bytes
    keep_alive: bool


@dataclass(frozen=True)
class _Head:
    method: str
    path: str
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
        return HttpRequest(head.method, head.path, head.headers, body, head.keep_alive)

    def _lines(self) -> list[bytes] | None:
        """The request line and header lines up to the blank line (consumed), or None if incomplete."""
        buf = self._buf
        lines: list[bytes] = []
        pos = 0
        while True:
            end = buf.find(b"\n", pos, pos + MAX_LINE_BYTES)
            if end < 0:
                if len(buf) - pos >= MAX_LINE_BYTES:
                    raise HttpError(431, "line too long")
                return None
            line = bytes(buf[pos : end + 1])
            pos = end + 1
            if line in _BLANK:
                if not lines:  # blank lines before a request line are skipped (RFC 9112 2.2)
                    del buf[:pos]
                    pos = 0
                    continue
                del buf[:pos]
                return lines
            lines.append(line)
            if len(lines) > MAX_HEADERS + 1:
                raise HttpError(431, "too many headers")

    def _read_head(self) -> _Head | None:
        lines = self._lines()
        if lines is None:
            return None
        parts = lines[0].decode("latin-1").rstrip("\r\n").split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
            raise HttpError(400, "malformed request line")
        method, path, version = parts
        headers: dict[str, str] = {}
        for raw in lines[1:]:
            name, sep, value = raw.decode("latin-1").partition(":")
            if not sep:
                raise HttpError(400, "malformed header")
            headers[name.strip().lower()] = value.strip()
        if "transfer-encoding" in headers:
            raise HttpError(411, "send a Content-Length body; chunked bodies are refused")
        try:
            length = int(headers.get("content-length", "0") or 0)
        except ValueError as exc:
            raise HttpError(400, "bad Content-Length") from exc
        if length < 0 or length > MAX_BODY_BYTES:
            raise HttpError(413, "body over 1 MiB")
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        return _Head(method, path, headers, length, keep)


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
