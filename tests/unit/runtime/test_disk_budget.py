"""One disk budget: the launcher arguments, the places and the mountinfo check are pure."""

from __future__ import annotations

import pytest

from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.errors import SandboxStartError
from contain.runtime.disk_budget import (
    BYTES_PER_INODE,
    DISK_PLACES,
    MIN_INODES,
    check_disk_mounts,
    inode_budget,
    plan_disk_places,
    plan_launcher_disk_args,
)

MIB = 1024**2


def plain(**sections: object):
    return plain_boundary(Boundary.model_validate(sections))


def test_launcher_mounts_one_tmpfs_of_the_whole_budget_with_an_inode_cap_and_every_place_in_it():
    b = plain(
        resources={"disk_bytes": "8MiB"},
        files=[{"path": "/work/a", "access": "scratch"}, {"path": "/w/b", "access": "scratch"}],
    )
    assert plan_launcher_disk_args(b, mountpoint="/cache/disk-budget") == [
        "--disk-tmpfs", "/cache/disk-budget", str(8 * MIB), str(8 * MIB // BYTES_PER_INODE),
        "--disk-dir", "tmp", "1777",
        "--disk-dir", "shm", "1777",
        "--disk-dir", "scratch-0", "0755",
        "--disk-dir", "scratch-1", "0755",
    ]  # fmt: skip


def test_the_places_are_tmp_shm_then_scratch_with_home_first():
    assert [p.sandbox_path for p in plan_disk_places(plain())] == ["/tmp", "/dev/shm", "/work"]
    assert all(p.why for p in DISK_PLACES)


def test_the_inode_budget_scales_with_the_disk_budget_and_has_a_floor():
    assert inode_budget(256 * MIB) == 65536
    assert inode_budget(MIB) == MIN_INODES
    assert inode_budget(10**9) * 1024 <= 10**9 // 2  # ~1 KiB of kernel memory per inode: at most half


def _line(mount_id: int, dev: str, root: str, point: str, opts: str, fs: str, sopts: str) -> str:
    return f"{mount_id} 1 {dev} {root} {point} {opts} shared:1 - {fs} {fs} {sopts}"


def _mountinfo(*, size="8192k", inodes="2048", dev_opts="ro,nosuid,nodev", shm_dev="0:47", extra=()) -> str:
    s = f"rw,size={size},nr_inodes={inodes},mode=700,uid=1000,gid=1000"
    return "\n".join(
        [
            _line(1, "0:40", "/", "/", "ro,nosuid", "tmpfs", "rw"),
            _line(2, "0:51", "/", "/dev", dev_opts, "tmpfs", "rw,mode=755"),
            _line(3, "0:47", "/tmp", "/tmp", "rw,nosuid,nodev", "tmpfs", s),
            _line(4, shm_dev, "/shm", "/dev/shm", "rw,nosuid,nodev", "tmpfs", s),
            _line(5, "0:47", "/scratch-0", "/work", "rw,nosuid,nodev", "tmpfs", s),
            *extra,
        ]
    )


def test_the_planned_mounts_pass_the_check():
    check_disk_mounts(_mountinfo(), plain(resources={"disk_bytes": "8MiB"}), page_bytes=4096)


def test_a_budget_that_is_not_whole_pages_is_compared_as_the_kernel_rounds_it():
    disk = 2 * MIB + 5  # kernel: 513 pages = 2052k
    check_disk_mounts(_mountinfo(size="2052k", inodes="512"), plain(resources={"disk_bytes": disk}), page_bytes=4096)


@pytest.mark.parametrize(
    ("mountinfo", "names"),
    [
        (_mountinfo(size="16384k"), "size=16384k"),
        (_mountinfo(inodes="3085510"), "nr_inodes=3085510"),
        (_mountinfo(dev_opts="rw,nosuid"), "/dev is writable"),
        (_mountinfo(shm_dev="0:48"), "2 file systems"),
        (_mountinfo(extra=[_line(6, "0:60", "/", "/tmp", "rw", "tmpfs", "rw,size=8192k,nr_inodes=2048")]), "/tmp"),
        (_mountinfo().replace(" /scratch-0 /work ", " /scratch-0 /elsewhere "), "/work is not backed"),
    ],
    ids=["size", "inodes", "dev-writable", "two-superblocks", "covered-by-another-tmpfs", "missing-place"],
)
def test_any_difference_from_the_plan_refuses_the_sandbox(mountinfo: str, names: str) -> None:
    with pytest.raises(SandboxStartError) as info:
        check_disk_mounts(mountinfo, plain(resources={"disk_bytes": "8MiB"}), page_bytes=4096)
    assert names in info.value.cause


def test_the_mountpoint_is_created_once_and_a_symlink_in_its_place_is_refused(tmp_path):
    from contain.runtime.disk_budget import ensure_disk_mountpoint

    made = ensure_disk_mountpoint(tmp_path)
    assert ensure_disk_mountpoint(tmp_path) == made and (tmp_path / "disk-budget").stat().st_mode & 0o777 == 0o755
    other = tmp_path / "other"
    other.mkdir()
    (tmp_path / "disk-budget").rmdir()
    (tmp_path / "disk-budget").symlink_to(other)
    with pytest.raises(SandboxStartError, match="is not a plain directory"):
        ensure_disk_mountpoint(tmp_path)


def test_a_scratch_path_at_tmp_replaces_the_fixed_tmp_place():
    b = plain(files=[{"path": "/tmp", "access": "scratch"}, {"path": "/tmp/x", "access": "scratch"}])
    assert [(p.name, p.sandbox_path) for p in plan_disk_places(b)] == [
        ("shm", "/dev/shm"),
        ("scratch-0", "/tmp"),
        ("scratch-1", "/tmp/x"),
    ]


def test_a_place_covered_by_a_bind_at_the_same_path_is_not_checked():
    b = plain(resources={"disk_bytes": "8MiB"})
    covered = _mountinfo() + "\n" + _line(9, "8:1", "/srv", "/work", "rw,nosuid", "ext4", "rw")
    with pytest.raises(SandboxStartError, match="/work is not backed"):
        check_disk_mounts(covered, b, page_bytes=4096)
    check_disk_mounts(covered, b, page_bytes=4096, bind_paths=frozenset({"/work"}))
