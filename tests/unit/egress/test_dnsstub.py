import asyncio
import ipaddress
import struct

import pytest

from contain.egress.dnsstub import DnsStub, parse_question, plan_response

PLACEHOLDER = ipaddress.IPv4Address("127.77.0.1")


def query(name: str, qtype: int = 1, *, ident: int = 0x1234, flags: int = 0x0100, qclass: int = 1) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode("latin-1") for p in name.split(".") if p)
    return struct.pack("!HHHHHH", ident, flags, 1, 0, 0, 0) + labels + b"\x00" + struct.pack("!HH", qtype, qclass)


def rcode(reply: bytes) -> int:
    return struct.unpack("!H", reply[2:4])[0] & 0xF


def answers(reply: bytes) -> int:
    return struct.unpack("!H", reply[6:8])[0]


def test_a_query_for_an_allowed_name_gets_its_placeholder() -> None:
    q = query("allowed.test")
    reply = plan_response(parse_question(q), PLACEHOLDER)
    assert reply == (
        b"\x12\x34\x85\x80\x00\x01\x00\x01\x00\x00\x00\x00"
        + q[12:]
        + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x01\x2c\x00\x04\x7f\x4d\x00\x01"
    )


def test_aaaa_for_an_allowed_name_is_nodata() -> None:
    reply = plan_response(parse_question(query("allowed.test", 28)), PLACEHOLDER)
    assert (rcode(reply), answers(reply)) == (0, 0)


def test_unlisted_name_is_nxdomain() -> None:
    reply = plan_response(parse_question(query("evil.test")), None)
    assert (rcode(reply), answers(reply)) == (3, 0)


def test_question_is_parsed_with_its_name() -> None:
    question = parse_question(query("A.Allowed.test", 16))
    assert (question.ident, question.name, question.qtype, question.qclass) == (
        0x1234,
        "A.Allowed.test",
        16,
        1,
    )


@pytest.mark.parametrize(
    "message",
    [
        b"\x00" * 11,
        query("a.test", flags=0x8100),  # a response
        struct.pack("!HHHHHH", 1, 0, 2, 0, 0, 0) + b"\x01a\x00\x00\x01\x00\x01",  # two questions
        struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",  # pointer
        struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + b"\x05ab",  # truncated label
    ],
)
def test_malformed_queries_are_refused(message: bytes) -> None:
    from contain.egress.dnsstub import DnsFormatError

    with pytest.raises(DnsFormatError):
        parse_question(message)


def run_stub(message: bytes, allowed: dict[str, ipaddress.IPv4Address]) -> tuple[bytes | None, list[str]]:
    asked: list[str] = []

    async def answer(name: str) -> ipaddress.IPv4Address | None:
        asked.append(name)
        return allowed.get(name)

    return asyncio.run(DnsStub(answer).respond(message)), asked


def test_stub_asks_only_its_answer_function_and_replies_formerr_to_garbage() -> None:
    reply, asked = run_stub(query("evil.test", qtype=16), {"allowed.test": PLACEHOLDER})
    assert reply is not None and rcode(reply) == 3 and asked == ["evil.test"]
    reply, asked = run_stub(struct.pack("!HHHHHH", 7, 0, 0, 0, 0, 0), {})
    assert reply is not None and rcode(reply) == 1 and asked == []


def test_stub_stays_silent_for_responses() -> None:
    reply, asked = run_stub(query("a.test", flags=0x8180), {})
    assert reply is None and asked == []


def test_non_query_opcode_is_notimp_without_asking() -> None:
    reply, asked = run_stub(query("allowed.test", flags=0x2800), {"allowed.test": PLACEHOLDER})
    assert reply is not None and rcode(reply) == 4 and asked == []
