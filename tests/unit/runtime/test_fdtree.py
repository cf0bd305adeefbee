"""Descriptor-based walks and removals: no symlink followed, no recursion, limits reported."""

from __future__ import annotations

import os

from contain.runtime.fdtree import DIR_FLAGS, WalkLimits, WalkOutcome, remove_tree_at, walk


def test_a_walk_lists_symlinks_without_following_them_and_reports_its_limits(tmp_path):
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_text("")
    (tmp_path / "link").symlink_to("/etc")
    fd = os.open(tmp_path, DIR_FLAGS)
    try:
        outcome = WalkOutcome()
        seen = sorted(e.relative for e in walk(fd, WalkLimits(100, 10), outcome))
        assert seen == ["d", "d/e", "d/e/f", "link"] and outcome.complete
        shallow = WalkOutcome()
        assert sorted(e.relative for e in walk(fd, WalkLimits(100, 1), shallow)) == ["d", "link"]
        assert shallow.too_deep == ["d"]
        capped = WalkOutcome()
        assert len(list(walk(fd, WalkLimits(2, 10), capped))) == 2 and capped.stopped_at_limit
    finally:
        os.close(fd)


def test_removing_a_tree_unlinks_symlinks_and_never_touches_their_targets(tmp_path):
    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    tree = tmp_path / "tree"
    (tree / "x").mkdir(parents=True)
    (tree / "x" / "to-victim").symlink_to(victim)
    (tree / "x" / "file").write_text("")
    parent = os.open(tmp_path, DIR_FLAGS)
    try:
        assert remove_tree_at(parent, "tree", max_entries=100)
    finally:
        os.close(parent)
    assert not tree.exists() and (victim / "keep").is_dir()


def test_removing_a_tree_far_deeper_than_the_descriptor_budget_completes(tmp_path):
    fd = os.open(tmp_path, DIR_FLAGS)
    os.mkdir("deep", dir_fd=fd)
    current = os.open("deep", DIR_FLAGS, dir_fd=fd)
    for _ in range(1200):
        os.mkdir("a", dir_fd=current)
        child = os.open("a", DIR_FLAGS, dir_fd=current)
        os.close(current)
        current = child
    os.close(current)
    try:
        assert remove_tree_at(fd, "deep", max_entries=100_000)
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_removal_stops_at_its_entry_budget_and_says_so(tmp_path):
    (tmp_path / "t").mkdir()
    for i in range(20):
        (tmp_path / "t" / f"d{i}").mkdir()
        (tmp_path / "t" / f"d{i}" / "f").write_text("")
    fd = os.open(tmp_path, DIR_FLAGS)
    try:
        assert remove_tree_at(fd, "t", max_entries=5) is False
    finally:
        os.close(fd)
    assert (tmp_path / "t").exists()
