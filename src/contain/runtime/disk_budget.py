"""One disk budget for everything writable inside a process sandbox.

What this enforces: ``resources.disk_bytes`` is ONE total for the sandbox, not one per mount.
Every tmpfs-backed writable place (``/tmp``, ``/dev/shm``, each scratch path, and so ``HOME``,
which is the first scratch path) is a directory of a single tmpfs mounted with
``size=disk_bytes`` and ``nr_inodes=inode_budget(disk_bytes)``; bwrap bind-mounts those
directories onto their sandbox paths (``DISK_PLACES`` lists them with reasons). Filling one place
leaves that much less for the others, and a million empty files stop at the inode budget
instead of growing host kernel memory. ``/dev`` itself is remounted read-only (bwrap's ``--dev``
makes it a writable tmpfs without a size limit), so device nodes still work but nothing can be
created there. After start the host reads ``/proc/<supervisor>/mountinfo`` and refuses the sandbox
unless every place is on that one superblock with those options and ``/dev`` is read-only
(``check_disk_mounts``): the plan is verified, not assumed.

How, and why this way (bwrap 0.8, Linux >= 5.x; each alternative was tried):

- bwrap's ``--size`` applies to one ``--tmpfs`` and its mount data is only ``mode=`` and
  ``size=``: there is no way to pass ``nr_inodes``. A tmpfs mounted without it gets the kernel
  default of half the host's RAM pages (3 million inodes on a 24 GiB host).
- Binding subdirectories of one bwrap-made tmpfs is possible (a ``--bind-try`` source under
  ``/proc/self/root/newroot/...`` is resolved after bwrap's pivot), but it relies on bwrap's
  private directory layout, a failed lookup is silently skipped, and it still has no inode cap.
- The in-sandbox supervisor cannot remount the tmpfs with ``nr_inodes``: bwrap runs it in a nested
  user namespace (``--uid`` with ``--dev``, and ``--disable-userns``) that does not own the
  superblock, so even with ``--cap-add CAP_SYS_ADMIN`` the remount fails with EPERM. Mounting a
  fresh tmpfs from the supervisor would cover the binds bwrap placed below scratch paths.
- Chosen: the launcher (the supervisor binary's ``--exec-as`` mode, which already starts bwrap) makes
  a mount namespace of its own (as root; otherwise inside a user namespace that maps only the
  caller's uid and gid), mounts the one tmpfs with ``size=`` and ``nr_inodes=`` over an empty
  directory of the cache (``MOUNTPOINT_NAME``), creates the places' directories as the sandbox
  user, and execs bwrap there. bwrap's ordinary ``--bind`` then resolves those directories as host
  paths, in the same position of the argv as the old per-place tmpfs mounts, so later binds and
  masks below scratch paths still win. The tmpfs exists only in that namespace and goes away
  with the sandbox; on the host the mountpoint stays an empty directory.

What it does NOT do:

- Write binds are host directories: what a workload writes there is on the host's file system
  and is not counted in ``disk_bytes``. Only ``RLIMIT_FSIZE`` (= ``disk_bytes``) bounds each file
  written there; the total is the host file system's business (quota, free space).
- Tmpfs pages are also memory: they count against the sandbox's memory cgroup as shared memory.
- ``/dev/pts`` (terminals) and ``/proc`` are not disk; they are outside this budget.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from contain.boundary.kinds import FileAccess
from contain.boundary.plain import PlainBoundary
from contain.errors import SandboxStartError

__all__ = [
    "BYTES_PER_INODE",
    "DISK_PLACES",
    "MOUNTPOINT_NAME",
    "DiskPlace",
    "check_disk_mounts",
    "default_scratch_paths",
    "ensure_disk_mountpoint",
    "inode_budget",
    "plan_disk_places",
    "plan_launcher_disk_args",
]

# One inode per 4 KiB page of the budget. A non-empty file already uses at least one page, so the
# cap only binds on empty files, directories and symlinks, which cost kernel memory (~1 KiB of
# shmem inode + dentry each) but no page: the inodes of a full budget cost at most a quarter of
# it. ext4's default is one inode per 16 KiB; small files dominate scratch (pip, node_modules),
# so we allow four times as many.
BYTES_PER_INODE = 4096
MIN_INODES = 256  # the smallest budget (1 MiB) still holds a small tree
MOUNTPOINT_NAME = "disk-budget"  # empty directory in the supervisor's cache dir; mounted over privately
DEFAULT_SCRATCH = "/work"


@dataclass(frozen=True)
class DiskPlace:
    """A writable sandbox path backed by the one budget tmpfs, with why it exists."""

    name: str  # directory inside the budget tmpfs
    sandbox_path: str
    mode: str  # octal, as bwrap and the launcher write it
    why: str


# Fixed places every sandbox gets; scratch paths follow (plan_disk_places).
DISK_PLACES: tuple[DiskPlace, ...] = (
    DiskPlace("tmp", "/tmp", "1777", "TMPDIR: compilers, test runners and mktemp write here"),
    DiskPlace("shm", "/dev/shm", "1777", "POSIX shared memory and semaphores (multiprocessing) live here"),
)


def default_scratch_paths(boundary: PlainBoundary) -> tuple[str, ...]:
    """Scratch paths of the boundary; a boundary with none gets /work."""
    scratch = tuple(r.path for r in boundary.files if r.access is FileAccess.SCRATCH)
    return scratch or (DEFAULT_SCRATCH,)


def inode_budget(disk_bytes: int) -> int:
    """``nr_inodes`` for a budget of ``disk_bytes`` (see ``BYTES_PER_INODE``)."""
    return max(MIN_INODES, disk_bytes // BYTES_PER_INODE)


def plan_disk_places(boundary: PlainBoundary) -> tuple[DiskPlace, ...]:
    """Every place backed by the budget: /tmp, /dev/shm, then each scratch path (HOME first).

    A scratch path that is itself one of the fixed places (``/tmp``) replaces it: one directory
    per sandbox path, so nothing is mounted only to be covered.
    """
    scratch = tuple(
        DiskPlace(f"scratch-{i}", path, "0755", "scratch path of the boundary")
        for i, path in enumerate(default_scratch_paths(boundary))
    )
    taken = {place.sandbox_path for place in scratch}
    return (*(p for p in DISK_PLACES if p.sandbox_path not in taken), *scratch)


def plan_launcher_disk_args(boundary: PlainBoundary, *, mountpoint: str) -> list[str]:
    """The launcher arguments that mount the budget and create its places (supervisor ``--exec-as``)."""
    disk = boundary.resources.disk_bytes
    args = ["--disk-tmpfs", mountpoint, str(disk), str(inode_budget(disk))]
    for place in plan_disk_places(boundary):
        args += ["--disk-dir", place.name, place.mode]
    return args


def ensure_disk_mountpoint(cache_dir: Path) -> str:
    """The empty directory the launcher mounts over, created once (mode 0755) in ``cache_dir``.

    Raises:
        SandboxStartError: it exists but is not a plain directory (a symlink, a file).
    """
    path = cache_dir / MOUNTPOINT_NAME
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SandboxStartError(f"cannot create {path}: {exc.strerror}", "check the cache directory") from exc
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SandboxStartError(
            f"{path} is not a plain directory ({exc.strerror})", f"remove {path}; contain recreates it"
        ) from exc
    try:
        os.fchmod(fd, 0o755)  # bwrap, as the sandbox user, must traverse it
    finally:
        os.close(fd)
    return str(path)


@dataclass(frozen=True)
class _Mount:
    device: str
    root: str
    mount_point: str
    mount_options: str
    fs_type: str
    super_options: str


def _parse_mountinfo(text: str) -> dict[str, _Mount]:
    """Topmost mount per mount point (later lines cover earlier ones)."""
    mounts: dict[str, _Mount] = {}
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 6 or len(rest) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        mounts[point] = _Mount(fields[2], fields[3], point, fields[5], rest[0], rest[2])
    return mounts


def _options(text: str) -> dict[str, str]:
    return dict(item.partition("=")[::2] for item in text.split(","))


def check_disk_mounts(
    mountinfo: str, boundary: PlainBoundary, *, page_bytes: int, bind_paths: frozenset[str] = frozenset()
) -> None:
    """Check that the running sandbox has the planned budget (``/proc/<supervisor>/mountinfo``).

    Every place must be the topmost mount at its path, on one tmpfs superblock whose options say
    ``size=disk_bytes`` (rounded up to a page, as the kernel reports it) and
    ``nr_inodes=inode_budget(disk_bytes)``, bound from the planned directory; ``/dev`` must be
    read-only.

    Args:
        mountinfo: the text of ``/proc/<supervisor pid>/mountinfo``.
        boundary: the boundary the sandbox was planned from.
        page_bytes: the host's page size (tmpfs sizes are whole pages).
        bind_paths: sandbox paths where a read or write bind was made: a place at exactly such a
            path is covered by the host directory the boundary asked for (a write bind at /work
            is host disk, outside the budget), so it is not checked.

    Raises:
        SandboxStartError: naming the first place that differs from the plan.
    """
    fix = "report this bug with `contain doctor` output; the sandbox was not used"
    mounts = _parse_mountinfo(mountinfo)
    disk = boundary.resources.disk_bytes
    pages = -(-disk // page_bytes)
    want = {"size": f"{pages * page_bytes // 1024}k", "nr_inodes": str(inode_budget(disk))}
    devices = set()
    for place in plan_disk_places(boundary):
        if place.sandbox_path in bind_paths:
            continue
        mount = mounts.get(place.sandbox_path)
        if mount is None or mount.fs_type != "tmpfs" or mount.root != f"/{place.name}":
            raise SandboxStartError(f"{place.sandbox_path} is not backed by the sandbox's disk budget", fix)
        got = _options(mount.super_options)
        for key, value in want.items():
            if got.get(key) != value:
                raise SandboxStartError(
                    f"{place.sandbox_path} has {key}={got.get(key)}, planned {value} (disk_bytes {disk})", fix
                )
        devices.add(mount.device)
    if len(devices) != 1:
        raise SandboxStartError(f"the writable places are on {len(devices)} file systems, planned one", fix)
    dev = mounts.get("/dev")
    if dev is None or "ro" not in dev.mount_options.split(","):
        raise SandboxStartError("/dev is writable inside the sandbox", fix)
