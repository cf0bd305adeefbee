"""The snapshot directory: 0700 and ours, owner-only snapshots, no symlinks, listing and removal.

Building a template boots QEMU: integration/test_microvm_snapshot.py."""

from __future__ import annotations

import json
import os
import time

import pytest

from contain.errors import SandboxStartError
from contain.runtime.microvm.snapshot import (
    clear_snapshots,
    list_snapshots,
    mark_used,
    open_cached_snapshot,
    open_snapshot_dir,
    remove_stale_snapshots,
    snapshot_dir,
)
from contain.runtime.microvm.snapshot_plan import UNUSED_AFTER_S, snapshot_file_name

KEY_A, KEY_B, KEY_C = "a" * 24, "b" * 24, "c" * 24


@pytest.fixture
def dir_fd(monkeypatch, tmp_path):
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(tmp_path / "cache"))
    fd = open_snapshot_dir()
    yield fd
    os.close(fd)


def _put(dir_fd, key, *, artefacts="x", built_at=1.0, mode=0o600, data=b"stream"):
    name = snapshot_file_name(key)
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode, dir_fd=dir_fd)
    os.write(fd, data)
    os.fchmod(fd, mode)
    os.close(fd)
    side = os.open(name.replace(".vmstate", ".json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
    os.write(side, json.dumps({"key": key, "artefacts": artefacts, "built_at": built_at}).encode())
    os.close(side)


def test_the_directory_is_created_0700_under_the_guest_cache(dir_fd):
    info = os.fstat(dir_fd)
    assert (info.st_mode & 0o777, info.st_uid) == (0o700, os.geteuid())
    assert os.path.samestat(info, os.stat(snapshot_dir()))


def test_a_directory_others_can_read_is_refused(dir_fd):
    os.chmod(snapshot_dir(), 0o755)
    with pytest.raises(SandboxStartError, match="0700"):
        open_snapshot_dir()


def test_a_symlink_in_place_of_the_directory_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "cache" / "microvm").mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", tmp_path / "cache" / "microvm" / "snapshots")
    with pytest.raises(SandboxStartError, match="symlink"):
        open_snapshot_dir()


def test_a_missing_snapshot_is_none_and_a_present_one_opens_read_only(dir_fd):
    assert open_cached_snapshot(dir_fd, KEY_A) is None
    _put(dir_fd, KEY_A)
    fd = open_cached_snapshot(dir_fd, KEY_A)
    assert fd is not None
    try:
        assert os.read(fd, 100) == b"stream"
        with pytest.raises(OSError):
            os.write(fd, b"x")
    finally:
        os.close(fd)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_snapshot_others_could_read_or_write_is_refused(dir_fd, mode):
    _put(dir_fd, KEY_A, mode=mode)
    with pytest.raises(SandboxStartError, match="swapped"):
        open_cached_snapshot(dir_fd, KEY_A)


def test_a_symlinked_snapshot_is_refused(dir_fd, tmp_path):
    target = tmp_path / "planted"
    target.write_bytes(b"stream")
    os.chmod(target, 0o600)
    os.symlink(target, snapshot_file_name(KEY_A), dir_fd=dir_fd)
    with pytest.raises(SandboxStartError, match="symlink"):
        open_cached_snapshot(dir_fd, KEY_A)


def test_an_empty_snapshot_is_refused(dir_fd):
    _put(dir_fd, KEY_A, data=b"")
    with pytest.raises(SandboxStartError):
        open_cached_snapshot(dir_fd, KEY_A)


def test_listing_reads_sidecars_oldest_first(dir_fd):
    _put(dir_fd, KEY_B, built_at=2.0)
    _put(dir_fd, KEY_A, built_at=3.0)
    listed = list_snapshots(dir_fd)
    assert [(e["key"], e["built_at"], e["bytes"]) for e in listed] == [(KEY_B, 2.0, 6), (KEY_A, 3.0, 6)]


def test_a_sidecar_naming_another_key_is_not_believed(dir_fd):
    _put(dir_fd, KEY_A, artefacts="old")
    side = snapshot_file_name(KEY_A).replace(".vmstate", ".json")
    os.unlink(side, dir_fd=dir_fd)
    fd = os.open(side, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=dir_fd)
    os.write(fd, json.dumps({"key": KEY_B, "artefacts": "new"}).encode())
    os.close(fd)
    (entry,) = list_snapshots(dir_fd)
    assert sorted(entry) == ["bytes", "key", "used_at"] and entry["key"] == KEY_A


def test_stale_snapshots_go_with_their_sidecars_and_the_kept_one_stays(dir_fd):
    _put(dir_fd, KEY_A, artefacts="old")
    _put(dir_fd, KEY_B, artefacts="new")
    _put(dir_fd, KEY_C, artefacts="new")
    long_ago = time.time() - UNUSED_AFTER_S - 60
    os.utime(snapshot_file_name(KEY_A).replace(".vmstate", ".json"), (long_ago, long_ago), dir_fd=dir_fd)
    assert remove_stale_snapshots(dir_fd, keep_key=KEY_B, current_artefacts="new") == [KEY_A]
    assert sorted(os.listdir(dir_fd)) == sorted(
        n for k in (KEY_B, KEY_C) for n in (snapshot_file_name(k), snapshot_file_name(k).replace(".vmstate", ".json"))
    )


def test_a_restore_marks_its_template_used_so_another_build_does_not_remove_it(dir_fd):
    _put(dir_fd, KEY_A, artefacts="old")
    long_ago = time.time() - UNUSED_AFTER_S - 60
    side = snapshot_file_name(KEY_A).replace(".vmstate", ".json")
    os.utime(side, (long_ago, long_ago), dir_fd=dir_fd)
    mark_used(dir_fd, KEY_A)
    assert remove_stale_snapshots(dir_fd, keep_key=KEY_B, current_artefacts="new") == []
    assert list_snapshots(dir_fd)[0]["used_at"] > long_ago


def test_clear_removes_every_snapshot_and_interrupted_temporaries_only(dir_fd):
    _put(dir_fd, KEY_A)
    _put(dir_fd, KEY_B)
    os.close(os.open(f".{snapshot_file_name(KEY_C)}.0123", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=dir_fd))
    os.close(os.open("unrelated", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=dir_fd))
    assert sorted(clear_snapshots(dir_fd)) == [KEY_A, KEY_B]
    assert os.listdir(dir_fd) == ["unrelated"]


def test_the_template_agents_first_answer_gets_the_rest_of_the_boot_budget_not_one_replys_30_s():
    """The serial marker precedes the agent's exec: a fast marker leaves the agent most of the boot
    budget (the bench's 'did not answer within 30s' right after 'init done'), a slow one the floor."""
    from contain.runtime.microvm.snapshot import AGENT_START_MIN_S, TEMPLATE_BOOT_TIMEOUT_S, agent_answer_budget_s

    assert agent_answer_budget_s(5.0) == TEMPLATE_BOOT_TIMEOUT_S - 5.0 > 30.0
    assert agent_answer_budget_s(TEMPLATE_BOOT_TIMEOUT_S + 10) == AGENT_START_MIN_S
