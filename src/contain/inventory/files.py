"""Directories a process started here could read or write: home, the working tree, shared
writable directories and mounted file systems.

``gather_file_facts`` does the I/O (stat, access, /proc/self/mountinfo); ``classify_files`` is
pure. Only the working tree is proposed as ``read``: it is what the task is for. Everything else is
``block`` because a sandbox sees no host path unless the manifest names it.

Not covered: per-file permissions inside these trees (the verdict is per tree), ACLs, and
file systems mounted after the probe.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contain.inventory.items import Group, InventoryItem, Verdict

__all__ = [
    "PSEUDO_FILESYSTEMS",
    "SHARED_WRITABLE_DIRS",
    "FileFacts",
    "Mount",
    "classify_files",
    "find_repository_root",
    "gather_file_facts",
    "parse_mountinfo",
]

# Kernel interfaces rather than storage; the sandbox gets its own /proc, /dev and /sys anyway.
PSEUDO_FILESYSTEMS: frozenset[str] = frozenset(
    {
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "devpts",
        "mqueue",
        "securityfs",
        "debugfs",
        "tracefs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "hugetlbfs",
        "autofs",
        "binfmt_misc",
        "nsfs",
        "efivarfs",
        "selinuxfs",
        "rpc_pipefs",
        "devtmpfs",
    }
)
# Writes here reach another machine.
_NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "fuse.sshfs",
        "ceph",
        "glusterfs",
        "fuse.rclone",
        "9p",
        "virtiofs",
    }
)
# Directories every local process shares; relative to the probed root.
SHARED_WRITABLE_DIRS: tuple[str, ...] = ("tmp", "var/tmp", "dev/shm")


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo that matters."""

    mountpoint: str
    fstype: str
    source: str
    writable: bool


@dataclass(frozen=True)
class FileFacts:
    """What ``classify_files`` needs."""

    home: Path
    home_exists: bool
    cwd: Path
    repository: Path | None  # the git work tree containing cwd, if any
    writable_dirs: tuple[Path, ...]
    mounts: tuple[Mount, ...]


def gather_file_facts(
    *,
    home: Path,
    cwd: Path,
    environ: Mapping[str, str],
    root: Path = Path("/"),
    proc_root: Path = Path("/proc"),
) -> FileFacts:
    """Stat the candidate directories and read the mount table (I/O only).

    Args:
        home: the home directory.
        cwd: the working directory.
        environ: for ``XDG_RUNTIME_DIR``.
        root: the file system root the shared directories are looked up under.
        proc_root: where procfs is mounted.
    """
    candidates = [root / d for d in SHARED_WRITABLE_DIRS]
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        candidates.append(Path(runtime_dir))
    writable = tuple(p for p in candidates if p.is_dir() and os.access(p, os.W_OK))
    try:
        mountinfo = (proc_root / "self" / "mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        mountinfo = ""
    return FileFacts(
        home=home,
        home_exists=home.is_dir(),
        cwd=cwd,
        repository=find_repository_root(cwd),
        writable_dirs=writable,
        mounts=parse_mountinfo(mountinfo),
    )


def find_repository_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds ``.git`` (directory or file)."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """Parse proc(5) mountinfo lines, dropping pseudo file systems."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 6 or len(rest) < 2:
            continue
        fstype, source = rest[0], rest[1]
        if fstype in PSEUDO_FILESYSTEMS:
            continue
        # octal escapes (\040 for space) as proc(5) documents
        mountpoint = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        # a later line for the same mount point is mounted on top and is what a process sees
        mounts = [m for m in mounts if m.mountpoint != mountpoint]
        mounts.append(Mount(mountpoint, fstype, source, "rw" in fields[5].split(",")))
    return tuple(mounts)


def classify_files(facts: FileFacts) -> tuple[InventoryItem, ...]:
    """Turn file facts into items; pure."""
    items: list[InventoryItem] = []
    if facts.home_exists:
        items.append(
            InventoryItem(
                Group.FILES,
                "home",
                str(facts.home),
                Verdict.BLOCK,
                "holds credentials and shell start-up files; never bind it whole, bind the project",
            )
        )
    if facts.cwd == facts.home or facts.cwd == Path("/"):
        items.append(
            InventoryItem(
                Group.FILES,
                "working-tree",
                str(facts.cwd),
                Verdict.REVIEW,
                "the working directory is the home directory or /; run from the project directory "
                "so the draft binds only that",
            )
        )
    else:
        items.append(
            InventoryItem(
                Group.FILES,
                "working-tree",
                str(facts.cwd),
                Verdict.READ,
                "the task's input: bound read-only; give writes a scratch path with export instead",
            )
        )
    if facts.repository is not None and facts.repository != facts.cwd:
        items.append(
            InventoryItem(
                Group.FILES,
                "git-repository",
                str(facts.repository),
                Verdict.REVIEW,
                "the git work tree around the working directory; bind it only if the task needs "
                "history, and never .git writable (hooks run on the next git command)",
            )
        )
    for directory in facts.writable_dirs:
        items.append(
            InventoryItem(
                Group.FILES,
                "shared-writable",
                str(directory),
                Verdict.BLOCK,
                "shared with every local process (planted files, races); a sandbox gets its own tmp",
            )
        )
    for mount in facts.mounts:
        mode = "read-write" if mount.writable else "read-only"
        why = f"{mount.fstype} {mode} from {mount.source}"
        if mount.fstype in _NETWORK_FILESYSTEMS:
            why += "; a network file system: writes reach another machine"
        items.append(
            InventoryItem(
                Group.FILES,
                "mount",
                mount.mountpoint,
                Verdict.BLOCK,
                f"{why}; not visible in a sandbox unless bound",
            )
        )
    return tuple(items)
