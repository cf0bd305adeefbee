"""Read-bind snapshots: content digests, no link followed, bounds."""

from __future__ import annotations

import os

import pytest

from contain.errors import SandboxStartError
from contain.runtime.microvm.images import owner_may_read, snapshot_tree


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


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: chown to a second user")
def test_only_what_the_binds_owner_may_read_reaches_the_image(tmp_path):
    # contain reads as root; a 0600 file of another user inside alice's bind must not become
    # readable in the guest (the process backend's idmapped view keeps it unreadable).
    tree = tmp_path / "src"
    (tree / "shut").mkdir(parents=True)
    (tree / "open.txt").write_text("public")
    (tree / "secret").write_text("root only")
    (tree / "shut" / "inside").write_text("x")
    alice = 4242
    os.chown(tree, alice, alice)
    os.chown(tree / "open.txt", alice, alice)
    os.chmod(tree / "open.txt", 0o600)  # alice's own: her owner bits apply
    os.chmod(tree / "secret", 0o600)  # another user's (root's), no bits for others
    os.chmod(tree / "shut", 0o700)
    stage = tmp_path / "stage"
    stage.mkdir()
    snap = snapshot_tree(str(tree), stage)
    assert sorted(os.listdir(stage)) == ["open.txt"]
    assert sorted(snap.skipped) == [
        "secret: the bind's owner (uid 4242) may not read it",
        "shut: the bind's owner (uid 4242) may not read it",
    ]


def test_the_owner_read_rule_uses_owner_then_group_then_other_bits():
    def info(mode, uid, gid):
        return os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))

    import stat as st

    owner = (1000, 1000)
    assert owner_may_read(info(st.S_IFREG | 0o400, 1000, 5), owner=owner)
    assert not owner_may_read(info(st.S_IFREG | 0o044, 1000, 1000), owner=owner)  # owner bits decide
    assert owner_may_read(info(st.S_IFREG | 0o040, 0, 1000), owner=owner)
    assert owner_may_read(info(st.S_IFREG | 0o004, 0, 0), owner=owner)
    assert not owner_may_read(info(st.S_IFDIR | 0o444, 1000, 1000), owner=owner)  # no search bit
    assert owner_may_read(info(st.S_IFDIR | 0o005, 0, 0), owner=owner)
