"""One HTTP/1.x framing rule for every parser contain writes: the egress proxy and the broker.

Two parsers that disagree about where a request ends are a request-smuggling pair: what one reads
as one request, the other reads as two. So the rules that decide framing and header syntax live
here once, and ``egress.proxy`` and ``broker.http_wire`` both call them (each maps
``FramingError`` to its own refusal):

- a header line is ``token ":" OWS value OWS`` (RFC 9110 5.1, 5.5): no whitespace before the
  colon, no obsolete line folding (a line starting with SP or HTAB), no control byte in the
  value except HTAB;
- Content-Length appears at most once, as 1 to ``MAX_CONTENT_LENGTH_DIGITS`` ASCII digits
  (``str.isdigit`` and ``int`` also take ``²``, ``٣``, ``+3`` and ``1_0``, which no upstream
  reads the same way), and never beside Transfer-Encoding.

What each caller decides for itself: which Transfer-Encodings it takes (the proxy tunnels a
CONNECT's, the broker takes none), whether other headers may repeat, and its body size limit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["MAX_CONTENT_LENGTH_DIGITS", "TOKEN", "FramingError", "parse_content_length", "parse_header_line"]

TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 5.6.2 tchar
_CONTROL_IN_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # CTLs except HTAB (RFC 9110 5.5)
_DIGITS = re.compile(rb"[0-9]+")
# 2^63-1 has 19 digits: the largest body size Go's net/http (ParseUint(.., 10, 63)) and nginx
# (off_t) accept; more digits only make int() of an attacker's string longer.
MAX_CONTENT_LENGTH_DIGITS = 19


class FramingError(Exception):
    """A head that breaks the framing rule; ``status`` is the HTTP answer (400, or 411)."""

    def __init__(self, reason: str, *, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def parse_header_line(raw: bytes) -> tuple[str, str]:
    """``(lower-case name, value)`` of one header line (without its CRLF).

    Raises:
        FramingError: folding, a malformed name (whitespace before the colon included), or a
            control byte in the value.
    """
    if raw[:1] in (b" ", b"\t"):
        raise FramingError("obsolete line folding (a header line starting with whitespace) is refused")
    name, sep, value = raw.partition(b":")
    if not sep or TOKEN.fullmatch(name) is None:
        raise FramingError("malformed header line (the name is a token, with no whitespace before the colon)")
    value = value.strip(b" \t")
    if _CONTROL_IN_VALUE.search(value):
        raise FramingError(f"control byte in header {name.decode('ascii')!r}")
    return name.decode("ascii").lower(), value.decode("latin-1")


def parse_content_length(lengths: Sequence[str], *, transfer_encoding: bool) -> int | None:
    """The body length the Content-Length headers give (``None`` when there is none).

    Args:
        lengths: every Content-Length value of the head, in order.
        transfer_encoding: whether the head also has a Transfer-Encoding header.

    Raises:
        FramingError: Content-Length beside Transfer-Encoding, given more than once, or not 1 to
            ``MAX_CONTENT_LENGTH_DIGITS`` ASCII digits.
    """
    if not lengths:
        return None
    if transfer_encoding:
        raise FramingError("both Content-Length and Transfer-Encoding")
    if len(lengths) > 1:
        raise FramingError("Content-Length given more than once")
    digits = lengths[0].encode("latin-1")
    if len(digits) > MAX_CONTENT_LENGTH_DIGITS or _DIGITS.fullmatch(digits) is None:
        raise FramingError(f"Content-Length must be 1 to {MAX_CONTENT_LENGTH_DIGITS} ASCII digits")
    return int(digits)
