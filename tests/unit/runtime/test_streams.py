"""CappedReader keeps at most ``cap`` bytes and closes its end past it; StdinFeeder writes as the
pipe accepts. Real pipes, no sandbox."""

from __future__ import annotations

import contextlib
import os

import pytest

from contain.runtime.streams import CappedReader, StdinFeeder


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    opened = {read_fd, write_fd}
    yield read_fd, write_fd, opened
    for fd in opened:
        with contextlib.suppress(OSError):
            os.close(fd)


def test_output_under_the_cap_is_kept_whole_until_eof(pipe):
    read_fd, write_fd, opened = pipe
    reader = CappedReader(read_fd, cap=100)
    opened.discard(read_fd)
    assert reader.pump() is True  # nothing written yet: still open
    os.write(write_fd, b"hello ")
    assert reader.pump() is True
    os.write(write_fd, b"world")
    os.close(write_fd)
    opened.discard(write_fd)
    while reader.pump():
        pass
    captured = reader.result()
    assert (captured.data, captured.truncated, captured.total_bytes) == (b"hello world", False, 11)
    assert reader.open is False


def test_output_past_the_cap_is_cut_and_the_writer_gets_epipe(pipe):
    read_fd, write_fd, opened = pipe
    reader = CappedReader(read_fd, cap=4)
    opened.discard(read_fd)
    os.write(write_fd, b"0123456789")
    assert reader.pump() is False
    captured = reader.result()
    assert (captured.data, captured.truncated, captured.total_bytes) == (b"0123", True, 10)
    with pytest.raises(BrokenPipeError):
        os.write(write_fd, b"more")


def test_stdin_is_written_whole_then_closed(pipe):
    read_fd, write_fd, opened = pipe
    feeder = StdinFeeder(write_fd, b"input bytes")
    opened.discard(write_fd)
    assert feeder.pump() is False  # all of it fitted in the pipe: done, and closed
    assert feeder.open is False
    assert os.read(read_fd, 100) == b"input bytes"
    assert os.read(read_fd, 100) == b""  # EOF: the feeder closed its end


def test_empty_stdin_closes_at_once(pipe):
    read_fd, write_fd, opened = pipe
    feeder = StdinFeeder(write_fd, b"")
    opened.discard(write_fd)
    assert (feeder.open, feeder.pump()) == (False, False)
    assert os.read(read_fd, 10) == b""


def test_a_reader_that_went_away_ends_the_feed_without_raising(pipe):
    read_fd, write_fd, opened = pipe
    os.close(read_fd)
    opened.discard(read_fd)
    feeder = StdinFeeder(write_fd, b"nobody reads this")
    opened.discard(write_fd)
    assert feeder.pump() is False
    assert feeder.open is False
