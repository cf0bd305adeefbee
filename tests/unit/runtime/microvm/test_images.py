"""Read-bind snapshots: content digests, no link followed, bounds."""

from __future__ import annotations

import os

import pytest

from contain.errors import SandboxStartError
from contain.runtime.microvm.images import snapshot_tree


def _tree(root):
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha")
    (root / "sub" / "b.bin").write_bytes(b"\0" * 10)
    os.symlink("/etc/shadow", root / "link")
    return root


def test_the_digest_names_the_content_and_changes_with_it(tmp_path):
    tree = _tree(tmp_path / "src")
    first = snapshot_tree(str(tree), None).digest
    assert snapshot_tree(str(tree), None).digest == first
    (tree / "a.txt").write_text("alphA")
    assert snapshot_tree(str(tree), None).digest != first
    (tree / "a.txt").write_text("alpha")
    os.chmod(tree / "a.txt", 0o600)
    assert snapshot_tree(str(tree), None).digest != first  # modes are content too


def test_the_staged_copy_keeps_links_as_links_and_hashes_the_same(tmp_path):
    tree = _tree(tmp_path / "src")
    stage = tmp_path / "stage"
    stage.mkdir()
    snap = snapshot_tree(str(tree), stage)
    assert snap.digest == snapshot_tree(str(tree), None).digest
    assert (stage / "a.txt").read_text() == "alpha"
    assert os.readlink(stage / "link") == "/etc/shadow"  # recorded, never followed on the host
    assert (snap.entries, snap.bytes) == (4, 15)


def test_fifos_are_left_out_and_listed(tmp_path):
    tree = _tree(tmp_path / "src")
    os.mkfifo(tree / "pipe")
    snap = snapshot_tree(str(tree), None)
    assert snap.skipped == ["pipe: not a regular file, directory or symlink"]


def test_a_symlink_as_the_bind_itself_is_refused(tmp_path):
    tree = _tree(tmp_path / "src")
    os.symlink(tree, tmp_path / "alias")
    with pytest.raises(SandboxStartError, match="cannot be opened as a directory"):
        snapshot_tree(str(tmp_path / "alias"), None)


def test_a_tree_past_its_bounds_is_refused_not_truncated(tmp_path):
    tree = _tree(tmp_path / "src")
    with pytest.raises(SandboxStartError, match="larger than the microvm backend images"):
        snapshot_tree(str(tree), None, max_bytes=10)
    with pytest.raises(SandboxStartError, match="larger than the microvm backend images"):
        snapshot_tree(str(tree), None, max_entries=2)
