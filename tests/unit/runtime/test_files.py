"""Exports from a scratch tree (bounded in bytes, entries and depth, iterative, reported), and single
files put into and read from it without following symlinks."""

from __future__ import annotations

import os

import pytest

from contain.errors import FileTransferError
from contain.runtime.fdtree import DIR_FLAGS, remove_tree_at
from contain.runtime.files import (
    EXPORT_MIN_ENTRIES,
    HOST_BLOCK_BYTES,
    export_entry_limit,
    export_tree,
    read_file_in,
    write_file_in,
)


def make_deep(root, depth):
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("a", dir_fd=fd)
        child = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def remove_deep(path):
    parent = os.open(path.parent, DIR_FLAGS)
    try:
        remove_tree_at(parent, path.name, max_entries=100_000)
    finally:
        os.close(parent)


def test_an_export_of_many_empty_directories_stops_at_the_entry_limit_and_says_so(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    for i in range(1000):
        (src / f"d{i}").mkdir()
    budget = 1 << 20
    report = export_tree(str(src), str(dst), max_bytes=budget)
    assert export_entry_limit(budget) == budget // HOST_BLOCK_BYTES == 256
    assert len(os.listdir(dst)) == report.dirs == 256
    assert "256 entries" in report.stopped and report.lines()[0].startswith("stopped:")


def test_an_export_of_a_tree_deeper_than_the_recursion_limit_completes_and_reports_the_cut(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    make_deep(src, 1500)
    (src / "result.txt").write_text("kept")
    try:
        report = export_tree(str(src), str(dst), max_bytes=1 << 20, max_entries=10_000, max_depth=64)
    finally:
        remove_deep(src)  # pytest's own clean-up of old temp dirs is recursive
    assert (dst / "result.txt").read_text() == "kept"
    assert report.dirs == 64 and report.skipped_count == 1
    assert report.skipped[0].endswith("(deeper than 64 levels: its content was not copied)")


def test_skipped_lines_are_capped_but_counted(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    for i in range(150):
        (src / f"l{i}").symlink_to("/etc/passwd")
    report = export_tree(str(src), str(dst), max_bytes=1 << 20)
    assert report.skipped_count == 150 and len(report.skipped) == 100
    assert report.lines()[-1] == "... and 50 more skipped"
    assert os.listdir(dst) == []


def test_files_past_the_byte_budget_are_skipped_and_symlinks_in_the_destination_are_not_written_through(tmp_path):
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    src.mkdir()
    dst.mkdir()
    outside.mkdir()
    (src / "a.bin").write_bytes(b"x" * 600)
    (src / "b.bin").write_bytes(b"y" * 600)
    (src / "sub").mkdir()
    (src / "sub" / "f").write_text("z")
    (dst / "sub").symlink_to(outside)
    report = export_tree(str(src), str(dst), max_bytes=1000)
    assert (dst / "a.bin").read_bytes() == b"x" * 600 and not (dst / "b.bin").exists()
    assert os.listdir(outside) == []
    assert report.skipped == ["b.bin (export limit of 1000 bytes reached)", "sub/ (not a plain directory on one side)"]
    assert report.to_dict()["skipped_count"] == 2


def test_a_tiny_budget_still_exports_a_small_result_tree():
    assert export_entry_limit(1) == EXPORT_MIN_ENTRIES


def test_an_anchored_destination_is_not_redirected_by_a_symlink_planted_after_anchoring(tmp_path):
    from contain.runtime.files import anchor_export_destination

    src, ws, victim = tmp_path / "src", tmp_path / "ws", tmp_path / "victim"
    src.mkdir()
    (src / "result.txt").write_text("r")
    (ws / "a").mkdir(parents=True)
    victim.mkdir()
    destination = anchor_export_destination(str(ws / "a" / "out"))  # before the workload
    try:
        (ws / "a").rename(ws / "a.old")  # what a workload with ws write-bound could do
        (ws / "a").symlink_to(victim)
        export_tree(str(src), destination, max_bytes=1 << 20)
    finally:
        destination.close()
    assert os.listdir(victim) == []
    assert (ws / "a.old" / "out" / "result.txt").read_text() == "r"


def test_a_written_file_gets_its_parents_and_mode_and_reads_back(tmp_path):
    write_file_in(str(tmp_path), "a/b/c.txt", b"hello", mode=0o640, label="/work/a/b/c.txt")
    assert (tmp_path / "a" / "b" / "c.txt").stat().st_mode & 0o777 == 0o640
    assert read_file_in(str(tmp_path), "a/b/c.txt", max_bytes=5, label="/work/a/b/c.txt") == b"hello"


@pytest.mark.parametrize("action", ["write", "read"])
def test_file_transfers_refuse_a_symlinked_component_a_missing_root_and_a_missing_file(tmp_path, action):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x").write_bytes(b"host")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "link").symlink_to(elsewhere)

    def transfer(root, relative):
        if action == "write":
            write_file_in(str(root), relative, b"new", mode=0o644, label=f"/work/{relative}")
        else:
            read_file_in(str(root), relative, max_bytes=100, label=f"/work/{relative}")

    with pytest.raises(FileTransferError) as caught:
        transfer(scratch, "link/x")
    assert caught.value.cause == f"cannot {action} /work/link/x: a component is a symlink or not a directory"
    assert (elsewhere / "x").read_bytes() == b"host"
    with pytest.raises(FileTransferError) as caught:
        transfer(tmp_path / "gone", "y")
    assert caught.value.cause == "cannot open scratch for /work/y: No such file or directory"
    if action == "read":
        with pytest.raises(FileTransferError) as caught:
            transfer(scratch, "missing/y")
        assert caught.value.cause == "cannot read /work/missing/y: No such file or directory"


def test_a_read_over_the_limit_is_refused_with_the_size(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 10)
    with pytest.raises(FileTransferError) as caught:
        read_file_in(str(tmp_path), "big", max_bytes=9, label="/work/big")
    assert caught.value.cause == "/work/big is 10 bytes, over the 9-byte limit"
