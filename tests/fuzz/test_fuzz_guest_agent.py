"""Fuzzing the guest agent's frame parser (runtime/microvm/agent/contain-guest-agent.c), live.

Each example starts the real agent as pid 1 of a fresh pid namespace (root needed) and sends it
one frame built from hostile parts: any header (length, type, stream, reserved bits), items
with any keys and values, raw bodies. Property: the agent either answers a following HELLO
(still in step) or ends with "protocol error" on its console; it is never killed by a signal
(SIGSEGV, SIGABRT...) and never hangs. SPAWN and SHUTDOWN are left out (a well-formed SPAWN runs
a program by design); file requests are pinned to a scratch directory the example owns.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contain.runtime.microvm.agent_build import ensure_guest_agent_binary
from contain.runtime.microvm.guest_channel import (
    HEADER,
    PROTOCOL_VERSION,
    FrameDecoder,
    MsgType,
    encode_frame,
    encode_items,
)

pytestmark = pytest.mark.needs_root

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
FUZZED_TYPES = [t for t in MsgType if t not in (MsgType.SPAWN, MsgType.SHUTDOWN)] + [0, 13, 63, 73, 255]
KEYS = ["root", "path", "mode", "size", "max_bytes", "max_entries", "max_depth", "bytes", "version",
        "hostname", "machine_id", "kind", "x", ""]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(["0", "1", "007", "-1", "18446744073709551615", "18446744073709551616", "", "..", "a/../b",
                     "/", "../../etc/passwd", "644", "7777", "0123456789abcdef0123456789abcdef", "inf"]),
    st.text(max_size=40),
)  # fmt: skip


@pytest.fixture(scope="module")
def agent_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONTAIN_CACHE_DIR", str(tmp_path_factory.mktemp("agent-cache")))
        return ensure_guest_agent_binary().path


def items_body(draw: st.DrawFn, scratch: str) -> bytes:
    pairs = draw(st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=6))
    items = [f"{key}={scratch if key == 'root' and value == '/' else value}" for key, value in pairs]
    body = b"".join(item.encode("utf-8", "surrogateescape").replace(b"\0", b"") + b"\0" for item in items)
    return body if draw(st.booleans()) else body[: draw(st.integers(0, len(body)))]


@st.composite
def hostile_frames(draw: st.DrawFn, scratch: str) -> bytes:
    kind = draw(st.sampled_from(FUZZED_TYPES))
    body = draw(st.binary(max_size=600)) if draw(st.booleans()) else items_body(draw, scratch)
    stream = draw(st.sampled_from([0, 0, 1, 2, 3, 4, 200]))
    reserved = draw(st.sampled_from([0, 0, 0, 1, 0x8000]))
    length = draw(st.sampled_from([len(body), len(body), len(body) + 1, 0xFFFFFFFF, 256 * 1024 + 1]))
    # a length past the body makes the agent read the HELLO that follows as body: out of step
    return HEADER.pack(length, kind, stream, reserved) + body


def test_the_agent_survives_or_stops_cleanly_on_hostile_frames(agent_binary: Path) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="contain-agent-fuzz-", dir="/tmp"))
    scratch.chmod(0o755)
    os.chown(scratch, 1000, 1000)
    try:
        run_property(agent_binary, scratch)
    finally:
        shutil.rmtree(scratch)


def run_property(agent: Path, scratch: Path) -> None:
    @given(frame=hostile_frames(str(scratch)))
    def agent_answers_or_stops(frame: bytes) -> None:
        host, guest = socket.socketpair()
        argv = ["unshare", "--pid", "--fork", "--kill-child", "--", str(agent), "--port-fd", str(guest.fileno()),
                "--cgroup-root", str(scratch / "no-cgroup"), "--machine-id-path", str(scratch / "machine-id")]  # fmt: skip
        proc = subprocess.Popen(argv, pass_fds=(guest.fileno(),), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        guest.close()
        try:
            host.settimeout(10)
            host.sendall(frame + encode_frame(MsgType.HELLO, encode_items([f"version={PROTOCOL_VERSION}"])))
            decoder, kinds = FrameDecoder(), []
            with contextlib.suppress(ConnectionResetError):
                while MsgType.READY not in kinds and (chunk := host.recv(65536)):
                    kinds += [f.type for f in decoder.feed(chunk)]
            if MsgType.READY not in kinds:  # the agent stopped: it must say why, and not by crashing
                host.close()
                proc.wait(timeout=10)
                assert proc.returncode not in {-s for s in CRASH_SIGNALS}, proc.returncode
                assert proc.stderr is not None
                assert b"protocol error" in proc.stderr.read(), frame[:64]
        finally:
            host.close()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)
            if proc.stderr is not None:
                proc.stderr.close()

    agent_answers_or_stops()
