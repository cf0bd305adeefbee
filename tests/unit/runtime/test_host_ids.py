"""Host uid leases: exclusive while held, reusable after release, never shared."""

import os

import pytest

from contain.errors import SandboxStartError
from contain.runtime import host_ids
from contain.runtime.host_ids import lease_host_ids


def test_two_leases_never_hold_the_same_uid_and_release_frees_it(tmp_path, monkeypatch):
    picks = iter([7, 7, 9, 7])
    monkeypatch.setattr(host_ids, "_random_index", lambda n: next(picks))
    lock_dir = tmp_path / "ids"
    first = lease_host_ids(lock_dir=lock_dir, uid_range=range(1000, 1100))
    second = lease_host_ids(lock_dir=lock_dir, uid_range=range(1000, 1100))  # 7 is taken: tries again, gets 9
    assert (first.uid, second.uid) == (1007, 1009)
    first.release()
    assert not (lock_dir / "1007").exists()
    third = lease_host_ids(lock_dir=lock_dir, uid_range=range(1000, 1100))  # 7 again, now free
    assert third.uid == 1007
    for lease in (second, third):
        lease.release()
        lease.release()  # idempotent


def test_a_full_range_is_refused_with_a_cause(tmp_path):
    lock_dir = tmp_path / "ids"
    held = lease_host_ids(lock_dir=lock_dir, uid_range=range(5, 6))
    with pytest.raises(SandboxStartError, match="no free host uid"):
        lease_host_ids(lock_dir=lock_dir, uid_range=range(5, 6))
    held.release()


def test_a_shared_lease_directory_is_refused(tmp_path):
    lock_dir = tmp_path / "ids"
    lock_dir.mkdir()
    os.chmod(lock_dir, 0o777)
    with pytest.raises(SandboxStartError, match="not a private directory"):
        lease_host_ids(lock_dir=lock_dir)


def test_the_range_sits_above_every_common_allocator():
    assert host_ids.UID_RANGE.start > 6_553_600 and host_ids.UID_RANGE.stop < 2**31
