"""The stub resolver inside the sandbox (127.0.0.1:53, UDP and TCP). It never forwards.

Programs that ignore proxy variables still resolve names; this stub gives them something to
connect to without letting a query leave. What it enforces:

* An A query for an allowed name gets one placeholder address (from ``answer``); an AAAA or any
  other type for an allowed name gets NODATA (NOERROR, no records); anything else gets NXDOMAIN.
* Nothing is ever sent to another resolver, so a name cannot carry data out (ESCAPE_CATALOG
  NE-05: ``<base32 canary>.<zone>`` queries stop here).
* Malformed messages get FORMERR, other opcodes NOTIMP, responses and multi-question messages
  are refused; names with compression pointers in the question are FORMERR.

The stub knows DNS, not policy: ``answer(name)`` (supplied by the session) returns the placeholder
for an allowed name or ``None``. Message building is pure (``plan_response``) and tested without
sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

__all__ = [
    "Answer",
    "DnsQuestion",
    "DnsStub",
    "parse_question",
    "plan_response",
]

Answer = Callable[[str], Awaitable[ipaddress.IPv4Address | None]]

TYPE_A = 1
CLASS_IN = 1
RCODE_NOERROR, RCODE_FORMERR, RCODE_NXDOMAIN, RCODE_NOTIMP, RCODE_REFUSED = 0, 1, 3, 4, 5
TTL_S = 300  # placeholders are stable for the whole session
MAX_TCP_MESSAGE = 4096
TCP_IDLE_S = 10.0


class DnsFormatError(ValueError):
    """A message the stub cannot read; answered with FORMERR when it has an id."""


@dataclass(frozen=True)
class DnsQuestion:
    """The single question of a query, with the bytes needed to echo it."""

    ident: int
    flags: int
    name: str
    qtype: int
    qclass: int
    question_bytes: bytes


def parse_question(message: bytes) -> DnsQuestion:
    """Read the header and the one question of a query.

    Raises:
        DnsFormatError: short message, not a query, no or several questions, bad labels.
    """
    if len(message) < 12:
        raise DnsFormatError("shorter than a DNS header")
    ident, flags, qdcount = struct.unpack("!HHH", message[:6])
    if flags & 0x8000:
        raise DnsFormatError("a response, not a query")
    if qdcount != 1:
        raise DnsFormatError("exactly one question is accepted")
    offset, labels = 12, []
    while True:
        if offset >= len(message):
            raise DnsFormatError("name runs past the message")
        length = message[offset]
        if length & 0xC0:
            raise DnsFormatError("compression pointers are not accepted in a question")
        offset += 1
        if length == 0:
            break
        label = message[offset : offset + length]
        if len(label) != length:
            raise DnsFormatError("label runs past the message")
        labels.append(label.decode("latin-1"))
        offset += length
    if offset + 4 > len(message) or sum(len(x) + 1 for x in labels) > 254:
        raise DnsFormatError("truncated question or over-long name")
    qtype, qclass = struct.unpack("!HH", message[offset : offset + 4])
    question = message[12 : offset + 4]
    return DnsQuestion(ident, flags, ".".join(labels), qtype, qclass, question)


def _header(ident: int, query_flags: int, rcode: int, *, qd: int, an: int) -> bytes:
    opcode = query_flags & 0x7800
    rd = query_flags & 0x0100
    flags = 0x8000 | opcode | 0x0400 | rd | 0x0080 | rcode  # QR, AA, RD copied, RA
    return struct.pack("!HHHHHH", ident, flags, qd, an, 0, 0)


def plan_response(question: DnsQuestion, placeholder: ipaddress.IPv4Address | None) -> bytes:
    """The full response for ``question`` given the placeholder for its name (or ``None``)."""
    opcode = (question.flags >> 11) & 0xF
    if opcode != 0:
        return _header(question.ident, question.flags, RCODE_NOTIMP, qd=1, an=0) + question.question_bytes
    if placeholder is None or question.qclass != CLASS_IN:
        return _header(question.ident, question.flags, RCODE_NXDOMAIN, qd=1, an=0) + question.question_bytes
    if question.qtype != TYPE_A:  # NODATA: the name exists, but has no record of this type
        return _header(question.ident, question.flags, RCODE_NOERROR, qd=1, an=0) + question.question_bytes
    record = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL_S, 4) + placeholder.packed
    return _header(question.ident, question.flags, RCODE_NOERROR, qd=1, an=1) + question.question_bytes + record


def formerr_for(message: bytes) -> bytes | None:
    """A FORMERR reply echoing the id, or ``None`` when there is nothing to reply to."""
    if len(message) < 4 or message[2] & 0x80:
        return None
    ident, flags = struct.unpack("!HH", message[:4])
    return _header(ident, flags, RCODE_FORMERR, qd=0, an=0)


class DnsStub:
    """Answers queries on the listeners the session binds inside the sandbox."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    async def respond(self, message: bytes) -> bytes | None:
        """The reply to one message, or ``None`` to stay silent (a response, or garbage)."""
        try:
            question = parse_question(message)
        except DnsFormatError:
            return formerr_for(message)
        placeholder = None
        if (question.flags >> 11) & 0xF == 0 and question.qclass == CLASS_IN:
            placeholder = await self.answer(question.name)
        return plan_response(question, placeholder)

    def datagram_protocol(self) -> asyncio.DatagramProtocol:
        return _UdpProtocol(self)

    async def handle_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """RFC 7766 framing: a two-byte length before each message; several per connection."""
        try:
            while True:
                prefix = await asyncio.wait_for(reader.readexactly(2), TCP_IDLE_S)
                (length,) = struct.unpack("!H", prefix)
                if length > MAX_TCP_MESSAGE:
                    break
                message = await asyncio.wait_for(reader.readexactly(length), TCP_IDLE_S)
                reply = await self.respond(message)
                if reply is None:
                    break
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, stub: DnsStub) -> None:
        self.stub = stub
        self.transport: asyncio.DatagramTransport | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, int]) -> None:
        task = asyncio.ensure_future(self._reply(data, addr))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _reply(self, data: bytes, addr: tuple[str | int, int]) -> None:
        reply = await self.stub.respond(data)
        if reply is not None and self.transport is not None:
            with contextlib.suppress(OSError):
                self.transport.sendto(reply, addr)
