"""The HTTP proxy the sandbox's proxy variables point to: CONNECT and absolute-form plain HTTP.

It knows HTTP and nothing about policy: it receives ``decide(Destination) -> EgressDecision`` and a
``record(EgressEvent)`` callable. What it enforces (ESCAPE_CATALOG PX-01..PX-15):

* The request head is read strictly, bounded (``MAX_HEAD_BYTES``) and timed
  (``HEAD_TIMEOUT_S``). Refused with 400: bare LF or CR, obsolete line folding, HTTP/0.9 or any
  version but 1.0/1.1, malformed header names, control characters in values, any control byte,
  whitespace (a tab included) or non-ASCII byte in the request target, more than one Host,
  Content-Length together with Transfer-Encoding, several Content-Lengths, a Content-Length that
  is not 1-19 ASCII digits (``²`` and ``٣`` are digits to Python, not to HTTP), any
  Transfer-Encoding on a forwarded request (bodies must be sized), origin-form or non-``http``
  targets (``cache_object://``, ``/squid-internal-mgr/`` and friends), userinfo in the target.
* The target decides, never a header. A Host header that disagrees with the target (CONNECT or
  plain HTTP) is refused; a forwarded request carries a Host header rebuilt from the target.
* One request per decision: a CONNECT's extra bytes are tunnel payload to the decided
  destination; after a plain HTTP request and its Content-Length body, nothing more is read
  from the client, ``Connection: close`` is sent upstream, and any pipelined bytes are refused
  and recorded. Redirects are passed back to the client, never followed.
* Every refusal answers 403 (policy) or 400 (malformed) with ``Contain-Denied-By: <rule_id>``
  and the reason as the body; every attempt becomes an ``EgressEvent``.

Not enforced here: what flows inside an allowed tunnel (TLS SNI or an inner Host header on a
shared CDN, PX-08, and exfiltration to an allowed destination, PX-14, are residual risks).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from contain._log import LazyLogger
from contain.boundary.kinds import ToolVerdict
from contain.egress.addresses import UnreadableLiteral, parse_ip_literal
from contain.egress.log import EgressEvent, decision_event
from contain.egress.policy import Destination, EgressDecision, Via
from contain.egress.tunnel import Dialled, dial_pinned, pump, tune_stream
from contain.http_framing import TOKEN, FramingError, parse_content_length, parse_header_line

__all__ = [
    "HEAD_TIMEOUT_S",
    "MAX_HEAD_BYTES",
    "BadRequest",
    "Decide",
    "ProxyServer",
    "Record",
    "RequestHead",
    "parse_authority",
    "parse_request_head",
    "plan_forward_head",
]

log = LazyLogger(__name__)

Decide = Callable[[Destination], Awaitable[EgressDecision]]
Record = Callable[[EgressEvent], None]

MAX_HEAD_BYTES = 16 * 1024  # larger than any real request line + headers a tool sends
HEAD_TIMEOUT_S = 10.0
DIAL_TIMEOUT_S = 10.0

_VERSION = re.compile(rb"^HTTP/1\.[01]$")
# The request target: visible ASCII only. No control byte, no whitespace (a tab is not a
# separator to us but is to some servers), nothing above 0x7E.
_TARGET = re.compile(rb"[\x21-\x7e]+")
_PORT = re.compile(r"[0-9]{1,5}")
# Content-Length syntax is contain.http_framing's (shared with the broker); 2^63-1 is the largest
# body size Go's net/http (ParseUint(.., 10, 63)) and nginx (off_t) accept.
MAX_CONTENT_LENGTH = 2**63 - 1
# Hop-by-hop headers (RFC 9110 section 7.6.1) and proxy credentials never go upstream.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)


class BadRequest(Exception):
    """A request head the proxy refuses to interpret (answered with 400)."""

    def __init__(self, reason: str, *, target: str = "", status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.target = target
        self.status = status


@dataclass(frozen=True)
class RequestHead:
    """A parsed, validated request head. Header names are lower case."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    content_length: int | None = None  # parsed and bounded by parse_request_head

    def values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name]


def _check_line_endings(head: bytes) -> None:
    if b"\n" in head.replace(b"\r\n", b"") or b"\r" in head.replace(b"\r\n", b""):
        raise BadRequest("bare LF or CR in the request head; lines must end with CRLF")


def parse_request_line(line: bytes) -> tuple[str, str, str]:
    """Split ``METHOD SP target SP HTTP/1.x``; anything else (HTTP/0.9 included) is refused."""
    parts = line.split(b" ")
    if len(parts) != 3 or not all(parts):
        raise BadRequest("the request line must be METHOD SP target SP HTTP/1.1")
    method, target, version = parts
    if not TOKEN.fullmatch(method) or not _VERSION.match(version):
        raise BadRequest("only HTTP/1.0 and HTTP/1.1 requests are accepted")
    if not _TARGET.fullmatch(target):
        raise BadRequest("control, whitespace or non-ASCII bytes in the request target")
    return method.decode("ascii"), target.decode("ascii"), version.decode("ascii")


def parse_request_head(head: bytes) -> RequestHead:
    """Parse a request head that ends with CRLF CRLF.

    Raises:
        BadRequest: for any of the ambiguous or malformed forms named in the module docstring.
    """
    if not head.endswith(b"\r\n\r\n"):
        raise BadRequest("the request head is incomplete")
    body = head[:-4]
    _check_line_endings(body)
    lines = body.split(b"\r\n")
    method, target, version = parse_request_line(lines[0])
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        try:
            headers.append(parse_header_line(line))  # the rule the broker's framer uses too
        except FramingError as exc:
            raise BadRequest(exc.reason, target=target) from exc
    parsed = RequestHead(method, target, version, tuple(headers))
    return RequestHead(method, target, version, tuple(headers), _check_framing(parsed))


def _check_framing(head: RequestHead) -> int | None:
    """Refuse ambiguous framing; return the Content-Length (``None`` when absent)."""
    if len(head.values("host")) > 1:
        raise BadRequest("more than one Host header", target=head.target)
    try:
        length = parse_content_length(
            head.values("content-length"), transfer_encoding=bool(head.values("transfer-encoding"))
        )
    except FramingError as exc:
        raise BadRequest(exc.reason, target=head.target, status=exc.status) from exc
    if head.method != "CONNECT" and head.values("transfer-encoding"):
        raise BadRequest(
            "Transfer-Encoding request bodies are not forwarded; send Content-Length",
            target=head.target,
            status=411,
        )
    if length is None:
        return None
    if length > MAX_CONTENT_LENGTH:
        raise BadRequest(f"Content-Length above {MAX_CONTENT_LENGTH}", target=head.target)
    return length


def parse_authority(text: str, *, default_port: int | None) -> tuple[str, int]:
    """Split ``host[:port]`` or ``[v6][:port]``; the host is returned without brackets.

    Raises:
        BadRequest: empty host, userinfo, a bad port, a stray colon, or any byte that is not
            visible ASCII (a Host header value may carry a tab the request line could not).
    """
    if not text.isascii() or not _TARGET.fullmatch(text.encode("ascii")):
        raise BadRequest("control, whitespace or non-ASCII characters in the authority", target=text)
    if "@" in text:
        raise BadRequest("userinfo (@) in the target is refused", target=text)
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise BadRequest("unterminated [ in the target", target=text)
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise BadRequest("junk after ] in the target", target=text)
        port_text = rest[1:] if rest else None
    else:
        host, sep, port_text_raw = text.rpartition(":")
        if not sep:
            host, port_text = text, None
        else:
            port_text = port_text_raw
        if ":" in host:
            raise BadRequest("an IPv6 address must be bracketed", target=text)
    if not host:
        raise BadRequest("empty host in the target", target=text)
    if port_text is None:
        if default_port is None:
            raise BadRequest("the target must name a port", target=text)
        return host, default_port
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise BadRequest("the port must be a number in 1-65535", target=text)
    return host, int(port_text)


def parse_absolute_target(target: str) -> tuple[str, int, str]:
    """``http://host[:port]/path?q`` → ``(host, port, "/path?q")``.

    Raises:
        BadRequest: origin-form, a scheme other than http, or a fragment.
    """
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        raise BadRequest(
            "only absolute-form http:// targets are forwarded; use CONNECT for anything else",
            target=target,
        )
    if "#" in rest:
        raise BadRequest("a fragment in the request target is refused", target=target)
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, origin = rest[:cut], rest[cut:]
    host, port = parse_authority(authority, default_port=80)
    if not origin.startswith("/"):
        origin = "/" + origin
    return host, port, origin


def _comparable_host(host: str) -> str:
    try:
        literal = parse_ip_literal(host)
    except UnreadableLiteral:
        return host
    if literal is not None:
        return str(literal)
    return host.lower().removesuffix(".")


def check_host_header(head: RequestHead, host: str, port: int, *, default_port: int) -> None:
    """The Host header, when present, must name the same host and port as the target.

    Raises:
        BadRequest: on a mismatch, or a missing Host on an HTTP/1.1 plain request.
    """
    values = head.values("host")
    if not values:
        if head.method != "CONNECT" and head.version == "HTTP/1.1":
            raise BadRequest("HTTP/1.1 requires a Host header", target=head.target)
        return
    try:
        header_host, header_port = parse_authority(values[0], default_port=default_port)
    except BadRequest as exc:
        raise BadRequest(f"bad Host header: {exc.reason}", target=head.target) from exc
    if (_comparable_host(header_host), header_port) != (_comparable_host(host), port):
        raise BadRequest(
            f"Host header {values[0]!r} disagrees with the target; the target decides, so "
            "send a Host header that names it",
            target=head.target,
            status=403,
        )


def plan_forward_head(head: RequestHead, host: str, port: int, origin: str) -> bytes:
    """The request sent upstream: origin-form, Host from the target, hop-by-hop headers dropped."""
    named_by_connection = {token.strip().lower() for v in head.values("connection") for token in v.split(",")}
    shown_host = f"[{host}]" if ":" in host else host
    authority = shown_host if port == 80 else f"{shown_host}:{port}"
    lines = [f"{head.method} {origin} {head.version}", f"Host: {authority}"]
    for name, value in head.headers:
        if name not in _HOP_BY_HOP and name not in named_by_connection:
            lines.append(f"{name}: {value}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def refusal_response(status: int, rule_id: str, reason: str) -> bytes:
    """A complete 400/403/411/502 response with ``Contain-Denied-By`` and the reason as body."""
    titles = {
        400: "Bad Request",
        403: "Forbidden",
        411: "Length Required",
        502: "Bad Gateway",
        431: "Request Header Fields Too Large",
        408: "Request Timeout",
    }
    body = (reason + "\n").encode("utf-8", "replace")
    head = (
        f"HTTP/1.1 {status} {titles.get(status, 'Error')}\r\n"
        f"Contain-Denied-By: {rule_id}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


async def read_head(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """Read up to and including CRLF CRLF; return ``(head, extra bytes already read)``.

    Raises:
        BadRequest: oversize head, early EOF, or a request line that is already wrong.
    """
    buffer = b""
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            return buffer[: end + 4], buffer[end + 4 :]
        first = buffer.find(b"\n")
        if first >= 0:  # judge the request line early: HTTP/0.9 never sends a blank line
            if first == 0 or buffer[first - 1 : first] != b"\r":
                raise BadRequest("bare LF in the request head; lines must end with CRLF")
            parse_request_line(buffer[: first - 1])
        if len(buffer) > MAX_HEAD_BYTES:
            raise BadRequest(f"request head larger than {MAX_HEAD_BYTES} bytes", status=431)
        chunk = await reader.read(MAX_HEAD_BYTES)
        if not chunk:
            raise BadRequest("connection closed before the request head ended")
        buffer += chunk


class ProxyServer:
    """Serves one proxy listener. ``handle`` is the ``asyncio.start_server`` callback."""

    def __init__(self, decide: Decide, record: Record, *, clock: Callable[[], float] = time.time) -> None:
        self.decide = decide
        self.record = record
        self.clock = clock

    def _event(
        self,
        decision: EgressDecision,
        via: Via,
        *,
        address: str | None = None,
        up: int = 0,
        down: int = 0,
        reason: str | None = None,
    ) -> EgressEvent:
        return decision_event(decision, str(via), time=self.clock(), address=address, up=up, down=down, reason=reason)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tune_stream(writer)
        try:
            await self._serve(reader, writer)
        except Exception:  # never let one connection's error reach the loop; it is closed below
            log.exception("proxy connection failed")
        finally:
            writer.close()

    async def _refuse(self, writer: asyncio.StreamWriter, status: int, decision: EgressDecision, via: Via) -> None:
        self.record(self._event(decision, via))
        writer.write(refusal_response(status, decision.rule_id or "egress.request", decision.reason))
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head_bytes, extra = await asyncio.wait_for(read_head(reader), HEAD_TIMEOUT_S)
            head = parse_request_head(head_bytes)
            via = Via.CONNECT if head.method == "CONNECT" else Via.HTTP
            if via is Via.CONNECT:
                host, port = parse_authority(head.target, default_port=None)
                origin = ""
                check_host_header(head, host, port, default_port=port)
            else:
                host, port, origin = parse_absolute_target(head.target)
                check_host_header(head, host, port, default_port=80)
        except TimeoutError:
            bad = BadRequest(f"no complete request head within {HEAD_TIMEOUT_S}s", status=408)
            await self._refuse(writer, 408, _malformed(bad), Via.CONNECT)
            return
        except BadRequest as exc:
            rule = "egress.host_mismatch" if exc.status == 403 else "egress.request"
            await self._refuse(writer, exc.status, _malformed(exc, rule_id=rule), Via.HTTP)
            return
        decision = await self.decide(Destination(host, port, via))
        if not decision.is_allowed:
            await self._refuse(writer, 403, decision, via)
            return
        try:
            upstream = await dial_pinned(decision.addresses, port, timeout_s=DIAL_TIMEOUT_S)
        except OSError as exc:
            reason = f"{decision.host}:{port} is allowed, but connecting failed: {exc}"
            self.record(self._event(decision, via, reason=reason))
            writer.write(refusal_response(502, "egress.upstream", reason))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            return
        if via is Via.CONNECT:
            await self._tunnel(reader, writer, upstream, decision, extra)
        else:
            await self._forward(reader, writer, upstream, decision, head, origin, extra)

    async def _tunnel(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: Dialled,
        decision: EgressDecision,
        extra: bytes,
    ) -> None:
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        if extra:  # bytes after the head are the tunnel's first payload, to the same place
            upstream.writer.write(extra)
        up, down = await pump(reader, writer, upstream)
        self.record(self._event(decision, Via.CONNECT, address=str(upstream.address), up=up + len(extra), down=down))

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: Dialled,
        decision: EgressDecision,
        head: RequestHead,
        origin: str,
        extra: bytes,
    ) -> None:
        length = head.content_length or 0  # parsed and bounded before anything was dialled
        body, pipelined = extra[:length], extra[length:]
        upstream.writer.write(plan_forward_head(head, decision.host, decision.port, origin))
        upstream.writer.write(body)
        # The body and the response run together: a client that sent Expect: 100-continue
        # waits for the upstream's 100 before it sends the body.
        progress = [0]
        up_task = asyncio.ensure_future(_copy_exact(reader, upstream.writer, length - len(body), progress))
        down = await _copy_all(upstream.reader, writer)
        up_task.cancel()
        await asyncio.wait([up_task])
        sent = progress[0]
        for stream in (upstream.writer, writer):
            stream.close()
        self.record(self._event(decision, Via.HTTP, address=str(upstream.address), up=len(body) + sent, down=down))
        if pipelined:
            self.record(
                EgressEvent(
                    time=self.clock(),
                    host=decision.host,
                    port=decision.port,
                    address=None,
                    verdict="deny",
                    reason=f"{len(pipelined)} byte(s) pipelined after a request to "
                    f"{decision.host}:{decision.port} were refused; one request per connection",
                    rule_id="egress.request",
                    via=str(Via.HTTP),
                    bytes_up=0,
                    bytes_down=0,
                )
            )


def _malformed(exc: BadRequest, *, rule_id: str = "egress.request") -> EgressDecision:
    shown = exc.target[:200]
    return EgressDecision(ToolVerdict.DENY, rule_id, f"request refused: {exc.reason}", shown, 0)


async def _copy_exact(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: int, progress: list[int]
) -> None:
    """Copy exactly ``count`` body bytes and no more: the rest of the stream is never read."""
    with contextlib.suppress(ConnectionError):
        while progress[0] < count:
            data = await reader.read(min(count - progress[0], 256 * 1024))
            if not data:
                break
            writer.write(data)
            progress[0] += len(data)
            await writer.drain()


async def _copy_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    total = 0
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(256 * 1024):
            writer.write(data)
            total += len(data)
            await writer.drain()
    return total
