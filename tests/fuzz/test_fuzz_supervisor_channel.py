"""Fuzzing the host side of the supervisor control protocol (runtime/supervisor_channel.py).

Properties: any bytes from the supervisor give a typed reply or ``SandboxLost``, never another
exception; frames round-trip through ``encode_frame`` / ``decode_items``; every valid reply
rendered the way the supervisor prints it parses back to the same value.
"""

from __future__ import annotations

import contextlib
import socket
import struct

from hypothesis import example, given
from hypothesis import strategies as st

from contain.errors import SandboxLost
from contain.runtime.supervisor_channel import (
    LANDLOCK_STATES,
    SECUREBITS_STATES,
    SPAWN_STAGES,
    Exited,
    Ready,
    SpawnFailed,
    Started,
    SupervisorChannel,
    SupervisorErrorReply,
    SupervisorReply,
    decode_items,
    encode_frame,
    parse_reply,
)

# Issue 18 item 10: a 5,000-digit pid escaped as ValueError.
FINDINGS = [
    ["STARTED", "pid=" + "9" * 5000],
    ["EXITED", "status=0", "utime_us=" + "1" * 4400, "stime_us=0", "maxrss_kb=0"],
]

numbers = st.one_of(
    st.integers(min_value=0, max_value=2**70).map(str),
    st.sampled_from(["", "-1", "+1", "007", "1_0", " 1", "\u0663", "\xb2", "9" * 5000, "0x10", "1e3"]),
)
keys = st.sampled_from(
    [
        "pid",
        "landlock",
        "landlock_skipped",
        "securebits",
        "stage",
        "errno",
        "status",
        "utime_us",
        "stime_us",
        "maxrss_kb",
        "message",
        "",
        "x",
    ]
)
values = st.one_of(
    numbers,
    st.sampled_from([*LANDLOCK_STATES, "applied:3", "applied:", *SPAWN_STAGES, *SECUREBITS_STATES]),
    st.text(max_size=10),
)
items = st.lists(st.one_of(st.tuples(keys, values).map(lambda kv: f"{kv[0]}={kv[1]}"), st.text(max_size=8)), max_size=6)
kinds = st.sampled_from(["READY", "STARTED", "SPAWN_FAILED", "EXITED", "ERROR", "", "HELLO"])


def _with_findings(test):  # type: ignore[no-untyped-def]
    for finding in FINDINGS:
        test = example(finding)(test)
    return test


@_with_findings
@given(st.builds(lambda kind, rest: [kind, *rest], kinds, items))
def test_any_reply_items_parse_to_a_reply_or_sandbox_lost(reply_items: list[str]) -> None:
    try:
        reply = parse_reply(reply_items)
    except SandboxLost as exc:
        assert exc.cause and exc.fix
        return
    assert parse_reply(render(reply)) == reply


@given(st.binary(max_size=200))
@example(b"STARTED\x00pid=" + b"9" * 5000 + b"\x00")
@example(b"\xff\x00")
def test_any_payload_decodes_to_items_or_sandbox_lost(payload: bytes) -> None:
    try:
        decoded = decode_items(payload)
    except SandboxLost:
        return
    assert encode_frame(decoded)[4:] == payload  # decode -> encode is the identity on what decodes
    with contextlib.suppress(SandboxLost):
        parse_reply(decoded)


@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12), min_size=1, max_size=6))
def test_frames_round_trip(frame_items: list[str]) -> None:
    frame = encode_frame(frame_items)
    (length,) = struct.unpack("<I", frame[:4])
    assert length == len(frame) - 4 and decode_items(frame[4:]) == frame_items


def render(reply: SupervisorReply) -> list[str]:
    """The items the supervisor prints for ``reply`` (contain-supervisor.c uses %d / %llu / %ld)."""
    if isinstance(reply, Ready):
        landlock = f"applied:{reply.landlock_abi}" if reply.landlock == "applied" else reply.landlock
        return [
            "READY",
            f"pid={reply.pid}",
            f"landlock={landlock}",
            f"securebits={reply.securebits}",
            *(f"landlock_skipped={p}" for p in reply.landlock_skipped),
        ]
    if isinstance(reply, Started):
        return ["STARTED", f"pid={reply.pid}"]
    if isinstance(reply, SpawnFailed):
        return ["SPAWN_FAILED", f"stage={reply.stage}", f"errno={reply.errno}"]
    if isinstance(reply, Exited):
        return [
            "EXITED",
            f"status={reply.status}",
            f"utime_us={reply.utime_us}",
            f"stime_us={reply.stime_us}",
            f"maxrss_kb={reply.maxrss_kb}",
        ]
    assert isinstance(reply, SupervisorErrorReply)
    return ["ERROR", f"message={reply.message}"]


pids = st.integers(1, 2**31 - 1)
u64 = st.integers(0, 2**64 - 1)
replies = st.one_of(
    st.builds(
        Ready,
        pid=pids,
        landlock=st.just("applied"),
        landlock_abi=st.integers(1, 1000),
        landlock_skipped=st.lists(
            st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8), max_size=2
        ).map(tuple),
    ),
    st.builds(
        Ready,
        pid=pids,
        landlock=st.sampled_from(["off", "unavailable"]),
        landlock_abi=st.just(0),
        securebits=st.sampled_from(SECUREBITS_STATES),
    ),
    st.builds(Started, pid=pids),
    st.builds(SpawnFailed, stage=st.sampled_from(SPAWN_STAGES), errno=st.integers(0, 4095)),
    st.builds(Exited, status=st.integers(0, 0xFFFF), utime_us=u64, stime_us=u64, maxrss_kb=u64),
    st.builds(SupervisorErrorReply, message=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)),
)


@given(replies)
def test_every_valid_reply_renders_and_parses_back_to_itself(reply: SupervisorReply) -> None:
    assert parse_reply(decode_items(encode_frame(render(reply))[4:])) == reply


@given(st.binary(max_size=300))
@example(struct.pack("<I", 2**31) + b"x")
@example(struct.pack("<I", 12) + b"STARTED\x00pid=")
def test_the_channel_reads_any_byte_stream_as_replies_or_sandbox_lost(stream: bytes) -> None:
    ours, theirs = socket.socketpair()
    channel = SupervisorChannel(ours)
    try:
        theirs.sendall(stream)
        theirs.shutdown(socket.SHUT_WR)
        for _ in range(len(stream) + 1):  # every reply consumes at least 5 bytes; EOF ends it
            try:
                reply = channel.read_reply(timeout_s=5.0)
            except SandboxLost:
                return
            assert reply is not None
    finally:
        channel.close()
        theirs.close()
