"""The guest protocol's pure codec: frames, items and strict reply parsing (no agent, no VM)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contain.errors import SandboxLost
from contain.runtime.microvm.guest_channel import (
    HEADER,
    MAX_BODY_BYTES,
    MAX_FILTER_INSTRUCTIONS,
    Frame,
    FrameDecoder,
    MsgType,
    Stream,
    decode_items,
    encode_frame,
    encode_items,
    encode_spawn,
    parse_credit,
    parse_error,
    parse_exited,
    parse_fields,
    parse_ready,
    parse_spawn_failed,
)
from contain.runtime.supervisor_channel import Exited, Rlimit, SpawnFailed

GUEST_FRAMES = st.one_of(
    st.builds(lambda body, stream: Frame(MsgType.DATA, stream, body), st.binary(max_size=512),
              st.sampled_from([Stream.STDOUT, Stream.STDERR, Stream.TRANSFER])),
    st.builds(lambda kind, body: Frame(kind, Stream.STDIN, body),
              st.sampled_from([t for t in MsgType if t >= MsgType.READY] + [MsgType.CREDIT]), st.binary(max_size=256)),
)  # fmt: skip

READY_ITEMS = [
    "version=2",
    "pid=1",
    "boot_id=0f0e0d0c-0b0a-4908-8706-050403020100",
    "kernel=6.1.0-53-cloud-amd64",
    "cgroup=v2:memory,pids",
]
EXITED_ITEMS = ["status=256", "utime_us=10", "stime_us=20", "maxrss_kb=3000", "oom_kills=1", "pids_limit_hits=0"]


@given(st.lists(GUEST_FRAMES, max_size=20), st.lists(st.integers(min_value=1, max_value=64), min_size=1))
def test_guest_frames_decode_whatever_the_reads_split_them_into(frames: list[Frame], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(f.type, f.body, stream=f.stream) for f in frames)
    decoder = FrameDecoder()
    decoded: list[Frame] = []
    offset, index = 0, 0
    while offset < len(wire):
        step = cuts[index % len(cuts)]
        decoded += decoder.feed(wire[offset : offset + step])
        offset, index = offset + step, index + 1
    assert decoded == frames
    assert decoder.pending == 0


@given(st.binary(max_size=2048))
def test_arbitrary_bytes_either_decode_or_lose_the_channel_and_nothing_else(data: bytes) -> None:
    decoder = FrameDecoder()
    try:
        for frame in decoder.feed(data):
            assert len(frame.body) <= MAX_BODY_BYTES
    except SandboxLost:
        pass
    assert decoder.pending < HEADER.size + MAX_BODY_BYTES


@pytest.mark.parametrize(
    ("raw", "cause"),
    [
        (HEADER.pack(MAX_BODY_BYTES + 1, MsgType.OK, 0, 0), "exceeds"),
        (HEADER.pack(0, MsgType.OK, 0, 1), "reserved"),
        (HEADER.pack(0, 99, 0, 0), "unknown frame type 99"),
        (HEADER.pack(0, MsgType.HELLO, 0, 0), "unknown frame type 1"),  # a host-only type from the guest
        (HEADER.pack(0, MsgType.DATA, Stream.STDIN, 0), "stream 0"),  # stdin data from the guest
        (HEADER.pack(0, MsgType.CREDIT, Stream.STDOUT, 0), "stream 1"),  # the guest cannot grant output credit
        (HEADER.pack(0, MsgType.EXITED, Stream.STDERR, 0), "stream 2"),
    ],
)
def test_the_decoder_refuses_what_the_protocol_does_not_allow(raw: bytes, cause: str) -> None:
    with pytest.raises(SandboxLost, match=cause):
        FrameDecoder().feed(raw)


def test_an_oversize_header_is_refused_before_its_body_arrives() -> None:
    with pytest.raises(SandboxLost):
        FrameDecoder().feed(HEADER.pack(0xFFFFFFFF, MsgType.DATA, Stream.STDOUT, 0))


def test_items_keep_non_utf8_file_names_byte_for_byte() -> None:
    name = b"caf\xe9/\xff".decode("utf-8", "surrogateescape")
    assert decode_items(encode_items([f"path={name}", "kind=file"])) == [f"path={name}", "kind=file"]
    assert encode_items([f"path={name}"]) == b"path=caf\xe9/\xff\0"


def test_items_refuse_nul_and_bodies_without_a_final_nul() -> None:
    with pytest.raises(ValueError):
        encode_items(["path=a\0b"])
    with pytest.raises(SandboxLost):
        decode_items(b"path=a")


def test_ready_parses_strictly() -> None:
    ready = parse_ready(encode_items(READY_ITEMS))
    assert (ready.pid, ready.kernel, ready.controllers) == (1, "6.1.0-53-cloud-amd64", frozenset({"memory", "pids"}))
    for bad in (
        [*READY_ITEMS[:-1], "cgroup=v1"],
        ["version=1", *READY_ITEMS[1:]],  # the version before SPAWN carried seccomp=
        [READY_ITEMS[0], "pid=01", *READY_ITEMS[2:]],
        [*READY_ITEMS, "extra=1"],
        [*READY_ITEMS, "pid=1"],
        READY_ITEMS[:-1],
        [READY_ITEMS[0], READY_ITEMS[1], "boot_id=../../etc", *READY_ITEMS[3:]],
        [*READY_ITEMS[:3], "kernel=6.1\x1b[2J", READY_ITEMS[4]],
    ):
        with pytest.raises(SandboxLost):
            parse_ready(encode_items(bad))


def test_exited_carries_the_guest_cgroup_counts() -> None:
    assert parse_exited(encode_items(EXITED_ITEMS)) == Exited(256, 10, 20, 3000, oom_kills=1, pids_limit_hits=0)


@pytest.mark.parametrize("value", ["٣", "007", "1_0", " 7", "-1", "+1", "1" * 21, "", "0x10"])
def test_numbers_spelled_other_than_the_agent_prints_them_lose_the_channel(value: str) -> None:
    items = [f"status={value}", *EXITED_ITEMS[1:]]
    with pytest.raises(SandboxLost):
        parse_exited(encode_items(items))


def test_a_wait_status_above_16_bits_is_refused() -> None:
    with pytest.raises(SandboxLost, match="not a wait status"):
        parse_exited(encode_items(["status=65536", *EXITED_ITEMS[1:]]))


def test_credit_must_be_within_one_window_and_positive() -> None:
    assert parse_credit(encode_items(["bytes=262144"])) == 262144
    for bad in ("bytes=0", "bytes=262145"):
        with pytest.raises(SandboxLost):
            parse_credit(encode_items([bad]))


def test_error_errno_is_optional_and_bounded() -> None:
    assert parse_error(encode_items(["message=no"])) == ("no", 0)
    assert parse_error(encode_items(["message=no", "errno=40"])) == ("no", 40)
    with pytest.raises(SandboxLost):
        parse_error(encode_items(["message=no", "errno=99999"]))


def test_fields_refuse_unknown_repeated_and_missing_keys() -> None:
    required = frozenset({"size"})
    assert parse_fields(MsgType.FILE, encode_items(["size=3"]), required) == {"size": "3"}
    for items in (["size=3", "size=4"], ["size=3", "other=1"], []):
        with pytest.raises(SandboxLost):
            parse_fields(MsgType.FILE, encode_items(items), required)


def test_spawn_is_encoded_as_one_literal_frame() -> None:
    frame = encode_spawn(
        ["python3", "-c", "print(1)"],
        {"PATH": "/usr/bin", "A": "x=y"},
        "/work",
        [Rlimit("NOFILE", 64, 64)],
        seccomp_bpf=bytes.fromhex("0600000000ff7f00") + bytes(range(8)),
        memory_max_bytes=1 << 28,
        pids_max=64,
        output_max_bytes=4097,
    )
    body = (
        b"cwd=/work\0rlimit=NOFILE:64:64\0arg=python3\0arg=-c\0arg=print(1)\0env=PATH=/usr/bin\0env=A=x=y\0"
        b"memory_max=268435456\0pids_max=64\0output_max=4097\0seccomp=0600000000ff7f000001020304050607\0"
    )
    assert frame == HEADER.pack(len(body), MsgType.SPAWN, 0, 0) + body


@pytest.mark.parametrize(
    "kwargs",
    [
        {"argv": []},
        {"cwd": "work"},
        {"env": {"A=B": "1"}},
        {"env": {"": "1"}},
        {"rlimits": [Rlimit("NOFILE", 1, 1), Rlimit("NOFILE", 2, 2)]},
        {"pids_max": 0},
        {"memory_max_bytes": -1},
        {"argv": ["a\0b"]},
        {"argv": ["x" * (MAX_BODY_BYTES + 1)]},
        {"seccomp_bpf": b""},
        {"seccomp_bpf": bytes(12)},
        {"seccomp_bpf": bytes(8 * (MAX_FILTER_INSTRUCTIONS + 1))},
    ],
)
def test_a_bad_spawn_request_is_refused_before_anything_is_sent(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"argv": ["true"], "env": {}, "cwd": "/", "rlimits": [], "seccomp_bpf": bytes(8)}
    args.update(kwargs)
    with pytest.raises(ValueError):
        encode_spawn(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("stage", ["namespaces", "proc"])
def test_spawn_failed_names_the_run_namespace_stages_the_agent_reports(stage: str) -> None:
    body = encode_items([f"stage={stage}", "errno=1"])
    assert parse_spawn_failed(body) == SpawnFailed(stage=stage, errno=1)
