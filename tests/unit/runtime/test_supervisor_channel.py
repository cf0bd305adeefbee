"""The supervisor protocol codec, and SupervisorChannel against a scripted peer on a socketpair."""

from __future__ import annotations

import importlib.resources
import os
import re
import socket
import struct

import pytest

from contain.errors import SandboxLost, SandboxStartError
from contain.runtime.supervisor_channel import (
    MAX_FRAME_BYTES,
    RLIMIT_NAMES,
    SPAWN_STAGES,
    Exited,
    Ready,
    Rlimit,
    SpawnFailed,
    Started,
    SupervisorChannel,
    SupervisorErrorReply,
    decode_items,
    encode_frame,
    encode_run,
    parse_reply,
)

# ---- frames ------------------------------------------------------------------------------------


def test_frame_is_little_endian_length_then_nul_terminated_items() -> None:
    assert encode_frame(["RUN", "cwd=/", "arg=é"]) == b"\x11\0\0\0RUN\0cwd=/\0arg=\xc3\xa9\0"
    assert encode_frame(["X", "a" * 297])[:4] == b"\x2c\x01\0\0"  # 300 bytes, low byte first


def test_frame_round_trips_through_decode_items() -> None:
    items = ["EXITED", "status=0", "env=A=B=C", "arg=", "arg=ünï"]
    frame = encode_frame(items)
    (length,) = struct.unpack("<I", frame[:4])
    assert length == len(frame) - 4
    assert decode_items(frame[4:]) == items


def test_frame_refuses_an_item_containing_nul() -> None:
    with pytest.raises(ValueError, match="NUL"):
        encode_frame(["RUN", "arg=a\0b"])


def test_frame_refuses_no_items() -> None:
    with pytest.raises(ValueError, match="message type"):
        encode_frame([])


def test_frame_length_is_bounded_at_one_mebibyte() -> None:
    # header item "X\0" (2 bytes) + item + NUL: exactly the limit passes, one byte more fails.
    fits = "a" * (MAX_FRAME_BYTES - 3)
    assert len(encode_frame(["X", fits])) == 4 + MAX_FRAME_BYTES
    with pytest.raises(ValueError, match="exceeds"):
        encode_frame(["X", fits + "a"])


@pytest.mark.parametrize("payload", [b"", b"READY", b"READY\0pid=1", b"\xff\xfe\0"])
def test_decode_refuses_unterminated_or_non_utf8_payloads(payload: bytes) -> None:
    with pytest.raises(SandboxLost):
        decode_items(payload)


def test_run_frame_orders_cwd_rlimits_args_then_env() -> None:
    frame = encode_run(
        ["python3", "-c", "print(1)"],
        {"PATH": "/usr/bin", "X": "a=b"},
        "/work",
        [Rlimit("CPU", 1, 2), Rlimit("NOFILE", None, None)],
    )
    assert decode_items(frame[4:]) == [
        "RUN",
        "cwd=/work",
        "rlimit=CPU:1:2",
        "rlimit=NOFILE:inf:inf",
        "arg=python3",
        "arg=-c",
        "arg=print(1)",
        "env=PATH=/usr/bin",
        "env=X=a=b",
    ]


@pytest.mark.parametrize(
    ("argv", "env", "cwd", "rlimits", "message"),
    [
        ([], {}, "/", [], "argv"),
        (["true"], {}, "work", [], "absolute"),
        (["true"], {"A=B": "c"}, "/", [], "environment key"),
        (["true"], {"": "c"}, "/", [], "environment key"),
        (["true"], {}, "/", [Rlimit("CPU", 1, 1), Rlimit("CPU", 2, 2)], "repeat"),
        (["a\0b"], {}, "/", [], "NUL"),
    ],
)
def test_run_frame_refuses_invalid_requests(
    argv: list[str], env: dict[str, str], cwd: str, rlimits: list[Rlimit], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        encode_run(argv, env, cwd, rlimits)


@pytest.mark.parametrize(
    ("name", "soft", "hard"),
    [("BOGUS", 1, 1), ("CPU", 2, 1), ("CPU", None, 5), ("CPU", -1, 1), ("AS", 1, 2**64 - 1)],
)
def test_rlimit_refuses_unknown_names_and_inverted_or_out_of_range_values(
    name: str, soft: int | None, hard: int | None
) -> None:
    with pytest.raises(ValueError):
        Rlimit(name, soft, hard)


def _supervisor_source() -> str:
    # The supervisor's C source and the header it shares with the guest agent (rlimit table).
    package = importlib.resources.files("contain.runtime.supervisor")
    return "".join(package.joinpath(name).read_text() for name in ("contain-supervisor.c", "contain-exec.h"))


def test_rlimit_names_are_exactly_the_supervisors_table() -> None:
    rows = re.findall(r'\{"(\w+)", RLIMIT_(\w+)\}', _supervisor_source())
    assert all(name == constant for name, constant in rows)
    assert tuple(sorted(name for name, _ in rows)) == RLIMIT_NAMES


def test_spawn_stages_are_exactly_the_supervisors_stage_names() -> None:
    names = re.findall(r'case ST_\w+: return "(\w+)";', _supervisor_source())
    assert sorted(names) == sorted(SPAWN_STAGES)


# ---- replies -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["READY", "pid=1", "landlock=off", "securebits=available"], Ready(pid=1, landlock="off", landlock_abi=0)),
        (
            ["READY", "pid=1", "landlock=applied:6", "securebits=available"] + ["landlock_skipped=/a", "landlock_skipped=/b"],
            Ready(pid=1, landlock="applied", landlock_abi=6, landlock_skipped=("/a", "/b")),
        ),
        (
            ["READY", "landlock=unavailable", "securebits=unsupported", "pid=1"],
            Ready(pid=1, landlock="unavailable", landlock_abi=0, securebits="unsupported"),
        ),
        (["STARTED", "pid=42"], Started(pid=42)),
        (["SPAWN_FAILED", "stage=exec", "errno=2"], SpawnFailed(stage="exec", errno=2)),
        (
            ["EXITED", "status=256", "utime_us=10", "stime_us=20", "maxrss_kb=1024"],
            Exited(status=256, utime_us=10, stime_us=20, maxrss_kb=1024),
        ),
        (["ERROR", "message=a run is already active"], SupervisorErrorReply("a run is already active")),
        (["ERROR", "message=x=y"], SupervisorErrorReply("x=y")),
    ],
)
def test_parse_reply_builds_each_reply_type(items: list[str], expected: object) -> None:
    assert parse_reply(items) == expected


@pytest.mark.parametrize(
    "items",
    [
        [],
        ["HELLO"],
        ["STARTED"],
        ["STARTED", "pid=0"],
        ["STARTED", "pid=-3"],
        ["STARTED", "pid=1", "pid=2"],
        ["STARTED", "pid=1", "extra=1"],
        ["STARTED", "pid"],
        ["STARTED", "pid=٣"],  # a non-ASCII digit
        # Issue 18 item 10: a 5,000-digit pid raised a bare ValueError out of int().
        ["STARTED", "pid=" + "9" * 5000],
        ["EXITED", "status=0", "utime_us=" + "1" * 4301, "stime_us=0", "maxrss_kb=0"],
        ["STARTED", "pid=007"],  # the supervisor prints %d: never a leading zero
        ["STARTED", "pid=1_0"],  # int() accepts underscores
        ["STARTED", "pid= 7"],  # and surrounding whitespace
        ["STARTED", "pid=7\n"],
        ["STARTED", "pid=+7"],
        ["STARTED", "pid="],
        ["EXITED", "status=0", "utime_us=" + "9" * 21, "stime_us=0", "maxrss_kb=0"],
        ["READY", "pid=1", "landlock=applied", "securebits=available"],
        ["READY", "pid=1", "landlock=off:3", "securebits=available"],
        ["READY", "pid=1", "landlock=maybe", "securebits=available"],
        ["READY", "pid=1", "landlock=off"],  # securebits= is not optional: silence is not "available"
        ["READY", "pid=1", "landlock=off", "securebits=locked"],
        ["READY", "pid=1", "landlock=off", "securebits=available", "securebits=unsupported"],
        ["SPAWN_FAILED", "stage=teleport", "errno=2"],
        ["SPAWN_FAILED", "stage=exec", "errno=99999"],
        ["EXITED", "status=65536", "utime_us=0", "stime_us=0", "maxrss_kb=0"],
        ["EXITED", "status=0", "utime_us=0", "stime_us=0"],
        ["STARTED", "pid=1", "landlock_skipped=/x"],
    ],
)
def test_parse_reply_refuses_malformed_replies(items: list[str]) -> None:
    with pytest.raises(SandboxLost):
        parse_reply(items)


def test_exited_decodes_exit_codes_and_signals() -> None:
    exited = Exited(status=3 << 8, utime_us=0, stime_us=0, maxrss_kb=0)
    killed = Exited(status=9, utime_us=0, stime_us=0, maxrss_kb=0)
    assert (exited.exit_code, exited.signal) == (3, None)
    assert (killed.exit_code, killed.signal) == (None, 9)


# ---- SupervisorChannel against a scripted peer ------------------------------------------------------


@pytest.fixture
def pair() -> tuple[SupervisorChannel, socket.socket]:
    host, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return SupervisorChannel(host), peer


def _peer_read_frame(peer: socket.socket) -> tuple[list[str], list[int]]:
    header, fds, _, _ = socket.recv_fds(peer, 4, 8)
    (length,) = struct.unpack("<I", header)
    payload = b""
    while len(payload) < length:
        payload += peer.recv(length - len(payload))
    return decode_items(payload), fds


def test_start_sends_run_with_three_fds_and_returns_started(
    pair: tuple[SupervisorChannel, socket.socket],
) -> None:
    channel, peer = pair
    r, w = os.pipe()
    peer.sendall(encode_frame(["STARTED", "pid=7"]))
    reply = channel.start(["echo", "hi"], {"PATH": "/bin"}, "/", [], (r, w, w))
    items, fds = _peer_read_frame(peer)
    assert reply == Started(pid=7)
    assert items == ["RUN", "cwd=/", "arg=echo", "arg=hi", "env=PATH=/bin"]
    assert len(fds) == 3
    os.write(fds[1], b"through the supervisor's copy")
    assert os.read(r, 100) == b"through the supervisor's copy"
    for fd in (*fds, r, w):
        os.close(fd)


def test_wait_exited_returns_none_on_timeout_then_the_reply(
    pair: tuple[SupervisorChannel, socket.socket],
) -> None:
    channel, peer = pair
    peer.sendall(encode_frame(["STARTED", "pid=2"]))
    r, w = os.pipe()
    assert channel.start(["true"], {}, "/", [], (r, w, w)) == Started(pid=2)
    assert channel.wait_exited(0.0) is None
    frame = encode_frame(["EXITED", "status=0", "utime_us=1", "stime_us=2", "maxrss_kb=3"])
    peer.sendall(frame[:5])  # a partial frame is kept, not lost
    assert channel.wait_exited(0.0) is None
    peer.sendall(frame[5:])
    assert channel.wait_exited(1.0) == Exited(status=0, utime_us=1, stime_us=2, maxrss_kb=3)
    os.close(r)
    os.close(w)


def test_start_refuses_a_second_run_before_exited(
    pair: tuple[SupervisorChannel, socket.socket],
) -> None:
    channel, peer = pair
    peer.sendall(encode_frame(["STARTED", "pid=2"]))
    r, w = os.pipe()
    channel.start(["true"], {}, "/", [], (r, w, w))
    with pytest.raises(ValueError, match="already active"):
        channel.start(["true"], {}, "/", [], (r, w, w))
    os.close(r)
    os.close(w)


def test_error_reply_to_run_raises_sandbox_lost(pair: tuple[SupervisorChannel, socket.socket]) -> None:
    channel, peer = pair
    peer.sendall(encode_frame(["ERROR", "message=RUN needs exactly 3 fds"]))
    r, w = os.pipe()
    with pytest.raises(SandboxLost, match="3 fds"):
        channel.start(["true"], {}, "/", [], (r, w, w))
    os.close(r)
    os.close(w)


def test_error_before_ready_is_a_start_error(pair: tuple[SupervisorChannel, socket.socket]) -> None:
    channel, peer = pair
    peer.sendall(encode_frame(["ERROR", "message=cannot open Landlock path /x"]))
    with pytest.raises(SandboxStartError, match="/x"):
        channel.read_ready(1.0)


def test_eof_raises_sandbox_lost(pair: tuple[SupervisorChannel, socket.socket]) -> None:
    channel, peer = pair
    peer.close()
    with pytest.raises(SandboxLost, match="closed"):
        channel.read_ready(1.0)


def test_oversize_header_raises_sandbox_lost(pair: tuple[SupervisorChannel, socket.socket]) -> None:
    channel, peer = pair
    peer.sendall(struct.pack("<I", MAX_FRAME_BYTES + 1))
    with pytest.raises(SandboxLost, match="exceeds"):
        channel.read_ready(1.0)


def test_unexpected_reply_while_running_raises_sandbox_lost(
    pair: tuple[SupervisorChannel, socket.socket],
) -> None:
    channel, peer = pair
    peer.sendall(encode_frame(["STARTED", "pid=2"]) + encode_frame(["STARTED", "pid=3"]))
    r, w = os.pipe()
    channel.start(["true"], {}, "/", [], (r, w, w))
    with pytest.raises(SandboxLost, match="Started while a run was active"):
        channel.wait_exited(1.0)
    os.close(r)
    os.close(w)


def test_kill_and_exit_send_bare_frames(pair: tuple[SupervisorChannel, socket.socket]) -> None:
    channel, peer = pair
    channel.kill()
    channel.exit()
    assert _peer_read_frame(peer) == (["KILL"], [])
    assert _peer_read_frame(peer) == (["EXIT"], [])
    channel.close()
    with pytest.raises(SandboxLost):
        channel.kill()
