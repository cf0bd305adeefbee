from __future__ import annotations

from pathlib import Path

from contain.inventory.files import FileFacts, Mount, classify_files, parse_mountinfo
from contain.inventory.items import Verdict

from .conftest import MOUNTINFO


def test_mountinfo_drops_pseudo_filesystems_and_unescapes_spaces() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert mounts == (
        Mount("/", "ext4", "/dev/sda1", True),
        Mount("/mnt/share", "nfs4", "fileserver:/export", True),
        Mount("/media/usb stick", "vfat", "/dev/sdb1", False),
    )


def test_network_filesystem_reason_says_writes_leave_the_machine() -> None:
    facts = FileFacts(Path("/h"), True, Path("/h/p"), None, (), (Mount("/mnt/share", "nfs4", "srv:/x", True),))
    mount = next(i for i in classify_files(facts) if i.kind == "mount")
    assert "another machine" in mount.reason and mount.verdict is Verdict.BLOCK


def test_working_tree_in_home_is_read_but_home_itself_needs_review() -> None:
    inside = classify_files(FileFacts(Path("/h"), True, Path("/h/p"), Path("/h"), (), ()))
    kinds = {(i.kind, i.verdict) for i in inside}
    assert ("working-tree", Verdict.READ) in kinds and ("git-repository", Verdict.REVIEW) in kinds
    at_home = classify_files(FileFacts(Path("/h"), True, Path("/h"), None, (), ()))
    assert ("working-tree", Verdict.REVIEW) in {(i.kind, i.verdict) for i in at_home}
