"""The host half of a guest export, fed entries directly (no channel, no guest)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from contain.runtime.microvm.guest_channel import encode_items
from contain.runtime.microvm.guest_export import SKIP_REASONS, BrokenRule, ExportWalk


def data(*chunks: bytes) -> object:
    def chunks_of(size: int) -> Iterator[bytes]:
        assert size == sum(len(c) for c in chunks)
        return iter(chunks)

    return chunks_of


def walk_into(dest: Path, *, max_bytes: int = 100, max_depth: int = 3) -> ExportWalk:
    dest.mkdir(exist_ok=True)
    return ExportWalk(os.open(dest, os.O_RDONLY | os.O_DIRECTORY), max_bytes=max_bytes, max_depth=max_depth)


def test_a_tree_is_written_in_walk_order_and_counted(tmp_path: Path) -> None:
    walk = walk_into(tmp_path / "d")
    walk.entry(encode_items(["kind=dir", "path=a"]), data())  # type: ignore[arg-type]
    walk.entry(encode_items(["kind=file", "path=a/f", "size=3"]), data(b"ab", b"c"))  # type: ignore[arg-type]
    walk.entry(encode_items(["kind=file", "path=g", "size=1"]), data(b"x"))  # type: ignore[arg-type]
    walk.close()
    report = walk.finish()
    assert (tmp_path / "d/a/f").read_bytes() == b"abc" and (tmp_path / "d/g").read_bytes() == b"x"
    assert (report.files, report.dirs, report.bytes, report.skipped) == (2, 1, 4, [])


def test_a_directory_at_the_depth_limit_is_reported_and_nothing_below_it_is_accepted(tmp_path: Path) -> None:
    walk = walk_into(tmp_path / "d", max_depth=2)
    walk.entry(encode_items(["kind=dir", "path=a"]), data())  # type: ignore[arg-type]
    walk.entry(encode_items(["kind=dir", "path=a/b"]), data())  # type: ignore[arg-type]
    with pytest.raises(BrokenRule):
        walk.entry(encode_items(["kind=file", "path=a/b/c", "size=0"]), data())  # type: ignore[arg-type]
    walk.close()
    assert walk.finish().skipped == ["a/b/ (deeper than 2 levels: its content was not copied)"]


def test_skip_codes_become_the_hosts_own_words(tmp_path: Path) -> None:
    walk = walk_into(tmp_path / "d", max_bytes=10)
    for code in SKIP_REASONS:
        walk.entry(encode_items(["kind=skip", f"path={code}", f"reason={code}"]), data())  # type: ignore[arg-type]
    walk.close()
    assert walk.finish().skipped == [
        "type (not a regular file or directory)",
        "bytes (export limit of 10 bytes reached)",
        "open (could not be opened)",
    ]


def test_bytes_announced_for_a_file_the_host_refused_still_count_against_the_budget(tmp_path: Path) -> None:
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "f").symlink_to(tmp_path / "victim")
    walk = walk_into(dest, max_bytes=10)
    walk.entry(encode_items(["kind=file", "path=f", "size=8"]), data(b"12345678"))  # type: ignore[arg-type]
    with pytest.raises(BrokenRule, match="past the 10-byte limit"):
        walk.entry(encode_items(["kind=file", "path=g", "size=3"]), data(b"123"))  # type: ignore[arg-type]
    walk.close()
    assert not (tmp_path / "victim").exists()
    assert walk.report.skipped == ["f (destination is not a plain file)"]


def test_a_write_error_on_the_host_skips_the_file_and_still_consumes_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walk = walk_into(tmp_path / "d")
    consumed: list[bytes] = []

    def chunks_of(size: int) -> Iterator[bytes]:
        for chunk in (b"ab", b"cd"):
            consumed.append(chunk)
            yield chunk

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    walk.entry(encode_items(["kind=file", "path=f", "size=4"]), chunks_of)
    monkeypatch.undo()
    walk.close()
    assert consumed == [b"ab", b"cd"]  # the channel stays in step: every frame of the file was read
    assert walk.finish().skipped == ["f (could not be written: No space left on device)"]
