"""Unit tests for contain.runtime.cgroup_sweep against plain directories standing in for cgroupfs.

The fake ``rmdir`` refuses a directory whose ``cgroup.procs`` lists a pid (EBUSY), as the kernel
refuses a populated cgroup. Nothing here needs root or a real cgroupfs.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from contain.host.facts import CgroupMount, HostFacts
from contain.runtime.cgroup_sweep import sweep_stale_cgroups
from contain.runtime.cgroups import CgroupOps
from fake_host import facts_as_root

DEAD_PID = 99_999_999  # above the largest possible pid_max (2**22), so never alive


def _rmdir_unless_populated(path: str) -> None:
    directory = Path(path)
    if (directory / "cgroup.procs").read_text().split():
        raise OSError(errno.EBUSY, "Device or resource busy", path)
    (directory / "cgroup.procs").unlink()
    directory.rmdir()


def _world(tmp_path: Path, *, cgroup_root: str | None = None) -> tuple[HostFacts, Path]:
    mounts = tuple(CgroupMount(1, str(tmp_path / c), (c,), "/") for c in ("memory", "pids"))
    return facts_as_root(mounts, cgroup_root=cgroup_root), tmp_path


def _cgroup(path: Path, *pids: int) -> None:
    path.mkdir(parents=True)
    (path / "cgroup.procs").write_text("\n".join(str(p) for p in pids))


def test_sweep_removes_only_empty_cgroups_of_dead_owners(tmp_path: Path) -> None:
    facts, root = _world(tmp_path)
    parent = root / "pids/contain"
    names = (
        f"contain-{DEAD_PID}-a-1",
        f"contain-{DEAD_PID}-b-2",
        f"contain-{os.getppid()}-c-3",
        f"contain-{os.getpid()}-d-4",
        "other",
    )
    for name in names:
        _cgroup(parent / name, *((12345,) if name.endswith("-b-2") else ()))
    removed = sweep_stale_cgroups(facts, ops=CgroupOps(rmdir=_rmdir_unless_populated))
    assert removed == [str(parent / f"contain-{DEAD_PID}-a-1")]
    assert sorted(p.name for p in parent.iterdir()) == sorted(n for n in names if not n.endswith("-a-1"))


def test_sweep_looks_under_the_delegated_root_from_facts(tmp_path: Path) -> None:
    facts, root = _world(tmp_path, cgroup_root="/deleg")
    _cgroup(root / "memory/contain" / f"contain-{DEAD_PID}-x-1")  # not under the delegated root
    _cgroup(root / "memory/deleg/contain" / f"contain-{DEAD_PID}-y-2")
    removed = sweep_stale_cgroups(facts, ops=CgroupOps(rmdir=_rmdir_unless_populated))
    assert removed == [str(root / "memory/deleg/contain" / f"contain-{DEAD_PID}-y-2")]
