"""One command's host-side stdio pump, with a recording ``send`` in place of the channel."""

from __future__ import annotations

import os
import threading

from contain.runtime.microvm.guest_channel import HEADER, WINDOW_BYTES, MsgType, Stream, decode_items
from contain.runtime.microvm.guest_stdio import CommandStdio
from contain.runtime.supervisor_channel import Exited


class Recorder:
    def __init__(self) -> None:
        self.frames: list[tuple[MsgType, Stream, bytes]] = []

    def __call__(self, frame: bytes) -> None:
        _, kind, stream, _ = HEADER.unpack_from(frame)
        self.frames.append((MsgType(kind), Stream(stream), frame[HEADER.size :]))

    def credits(self, stream: Stream) -> int:
        return sum(
            int(decode_items(b)[0].split("=")[1]) for k, s, b in self.frames if k is MsgType.CREDIT and s is stream
        )


def make(stdin: bytes | None = None) -> tuple[CommandStdio, Recorder, dict[str, int]]:
    in_r, in_w = os.pipe()
    if stdin is not None:
        os.write(in_w, stdin)
    os.close(in_w)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wake_r, wake_w = os.pipe()
    sent = Recorder()
    stdio = CommandStdio(
        (in_r, out_w, err_w), lock=threading.Condition(), send=sent, is_lost=lambda: False, wake_fd=wake_r
    )
    return stdio, sent, {"out": out_r, "err": err_r, "wake_w": wake_w}


def finish(stdio: CommandStdio) -> None:
    for out in stdio.out.values():
        out.eof = True
    stdio.exited = Exited(0, 0, 0, 0)
    stdio.pump()  # returns once both outputs are flushed and closed


def test_output_reaches_the_host_pipe_and_exactly_what_it_took_is_credited_back() -> None:
    stdio, sent, fds = make(stdin=b"")
    stdio.out[Stream.STDOUT].pending += b"hello"
    stdio.out[Stream.STDOUT].unacked = 5
    stdio.out[Stream.STDERR].pending += b"err"
    stdio.out[Stream.STDERR].unacked = 3
    finish(stdio)
    assert os.read(fds["out"], 100) == b"hello" and os.read(fds["err"], 100) == b"err"
    assert (sent.credits(Stream.STDOUT), sent.credits(Stream.STDERR)) == (5, 3)
    assert stdio.out[Stream.STDOUT].unacked == 0


def test_a_host_reader_that_went_away_closes_the_stream_in_the_guest_and_credits_the_dropped_bytes() -> None:
    stdio, sent, fds = make(stdin=b"")
    os.close(fds["out"])
    stdio.out[Stream.STDOUT].pending += b"x" * 1000
    stdio.out[Stream.STDOUT].unacked = 1000
    stdio._pump_output(Stream.STDOUT)
    assert (MsgType.CLOSE_OUTPUT, Stream.STDOUT, b"") in sent.frames
    assert sent.credits(Stream.STDOUT) == 1000 and stdio.out[Stream.STDOUT].discard
    finish(stdio)


def test_stdin_is_read_within_the_credit_and_ends_with_an_empty_data_frame() -> None:
    stdio, sent, _ = make(stdin=b"a" * 100)
    stdio.stdin_credit = 40
    stdio._pump_stdin()
    assert sent.frames == [(MsgType.DATA, Stream.STDIN, b"a" * 40)]
    stdio.stdin_credit = WINDOW_BYTES
    stdio._pump_stdin()
    stdio._pump_stdin()
    assert sent.frames[1:] == [(MsgType.DATA, Stream.STDIN, b"a" * 60), (MsgType.DATA, Stream.STDIN, b"")]
    assert stdio.stdin_fd == -1
    finish(stdio)
