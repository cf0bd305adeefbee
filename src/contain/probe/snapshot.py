"""Host state before and after an attack: the judge for "nothing was left behind".

A snapshot reads, from the host (never from inside a sandbox):

- processes: pid, ppid, comm, start time and command line (``/proc/<pid>/stat``, ``cmdline``);
- files: names and sizes directly in ``/tmp``, ``/var/tmp`` and ``/dev/shm``;
- mounts: this mount namespace's ``/proc/self/mountinfo`` lines;
- SysV IPC: ``/proc/sysvipc/{shm,sem,msg}`` rows (key first);
- POSIX message queues: names in ``/dev/mqueue`` when it is mounted;
- sockets: listening TCP/UDP ports (``/proc/net/{tcp,tcp6,udp,udp6}``) and Unix socket paths,
  abstract names as ``@name`` (``/proc/net/unix``);
- cgroups: directories under contain's shared ``contain`` parent in every v1/v2 hierarchy.

The machine is shared: other processes create and remove things all the time. So the judge
never says "anything new is a breach". Attacks plant *markers* (a canary with the run id in a
file name, a process command line, a socket path, an IPC key derived from the canary) and
``SnapshotDiff.marked(markers)`` keeps only what appeared and carries a marker. Cgroups are
filtered to this process's own (``contain-<our pid>-``).

Not covered: files deeper than one level in the scanned directories, the network namespace of
another process, kernel keyrings (the keyring cases judge those themselves).
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "SCANNED_DIRS",
    "HostSnapshot",
    "ProcessEntry",
    "SnapshotDiff",
    "ipc_key",
    "kill_marked",
    "marked_processes",
    "take_snapshot",
]

SCANNED_DIRS: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm")
_CGROUP_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class ProcessEntry:
    pid: int
    ppid: int
    comm: str
    start_ticks: int
    cmdline: str

    def describe(self) -> str:
        return f"pid {self.pid} (ppid {self.ppid}, {self.comm}): {self.cmdline[:200]}"


@dataclass(frozen=True)
class HostSnapshot:
    """One reading of host state; every category is a set of text entries."""

    processes: frozenset[ProcessEntry]
    categories: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class SnapshotDiff:
    """What appeared between two snapshots (and is still there in the second)."""

    processes: tuple[ProcessEntry, ...]
    appeared: dict[str, tuple[str, ...]]

    def marked(self, markers: Sequence[str]) -> dict[str, list[str]]:
        """Entries that appeared and contain one of ``markers``, by category (empty ones dropped)."""
        out: dict[str, list[str]] = {}
        procs = [p.describe() for p in self.processes if _has_marker(p.cmdline + " " + p.comm, markers)]
        if procs:
            out["processes"] = procs
        for category, entries in self.appeared.items():
            hits = [e for e in entries if category == "cgroups" or _has_marker(e, markers)]
            if hits:
                out[category] = hits
        return out


def ipc_key(marker: str) -> int:
    """A SysV IPC key derived from a marker (attacks use it, the judge looks for it)."""
    return zlib.crc32(marker.encode()) & 0x7FFFFFFF or 1


def take_snapshot() -> HostSnapshot:
    """Read host state now (see the module docstring for what is read)."""
    return HostSnapshot(
        processes=frozenset(_processes()),
        categories={
            "files": frozenset(_files()),
            "mounts": frozenset(_mounts()),
            "sysvipc": frozenset(_sysvipc()),
            "mqueues": frozenset(_mqueues()),
            "listening": frozenset(_listening()),
            "unix_sockets": frozenset(_unix_sockets()),
            "cgroups": frozenset(_own_cgroups()),
        },
    )


def diff(before: HostSnapshot, after: HostSnapshot) -> SnapshotDiff:
    """What is in ``after`` and was not in ``before``."""
    new_procs = tuple(sorted(after.processes - before.processes, key=lambda p: p.pid))
    appeared = {
        name: tuple(sorted(entries - before.categories.get(name, frozenset())))
        for name, entries in after.categories.items()
    }
    return SnapshotDiff(new_procs, appeared)


def marked_processes(markers: Sequence[str]) -> list[ProcessEntry]:
    """Live host processes whose command line or comm carries a marker."""
    return [p for p in _processes() if _has_marker(p.cmdline + " " + p.comm, markers)]


def kill_marked(markers: Sequence[str]) -> list[int]:
    """SIGKILL every live process carrying a marker (cleanup after a breach); returns the pids."""
    killed = []
    for entry in marked_processes(markers):
        if entry.pid == os.getpid():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(entry.pid, 9)
            killed.append(entry.pid)
    return killed


def _has_marker(text: str, markers: Sequence[str]) -> bool:
    return any(m and m in text for m in markers)


def _read(path: str, limit: int = 1 << 20) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _processes() -> Iterable[ProcessEntry]:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _read(f"/proc/{name}/stat")
        if not stat or ")" not in stat:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        try:
            ppid, start = int(fields[1]), int(fields[19])
        except (IndexError, ValueError):
            continue
        cmdline = _read(f"/proc/{name}/cmdline", 8192).replace("\0", " ").strip()
        yield ProcessEntry(int(name), ppid, comm, start, cmdline)


def _files() -> Iterable[str]:
    for directory in SCANNED_DIRS:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                size = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            yield f"{directory}/{entry.name} ({size} bytes)"


def _mounts() -> Iterable[str]:
    for line in _read("/proc/self/mountinfo").splitlines():
        parts = line.split()
        if len(parts) > 4:
            yield f"{parts[4]} ({' '.join(parts[parts.index('-') + 1 :] if '-' in parts else parts[5:])})"


def _sysvipc() -> Iterable[str]:
    for kind in ("shm", "sem", "msg"):
        for line in _read(f"/proc/sysvipc/{kind}").splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 2:
                yield f"{kind} key={int(parts[0])} id={parts[1]}"


def _mqueues() -> Iterable[str]:
    with contextlib.suppress(OSError):
        for name in os.listdir("/dev/mqueue"):
            yield f"/dev/mqueue/{name}"


def _listening() -> Iterable[str]:
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        for line in _read(f"/proc/net/{proto}").splitlines()[1:]:
            parts = line.split()
            if len(parts) < 4:
                continue
            state = parts[3]
            if proto.startswith("tcp") and state != "0A":  # 0A = LISTEN
                continue
            port = int(parts[1].rsplit(":", 1)[1], 16)
            yield f"{proto} port={port}"


def _unix_sockets() -> Iterable[str]:
    for line in _read("/proc/net/unix").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8:
            yield parts[7]


def _own_cgroups() -> Iterable[str]:
    """This process's sandbox cgroups (``contain-<our pid>-*``) under every candidate parent."""
    prefix = f"contain-{os.getpid()}-"
    own_paths = {line.split(":", 2)[2] for line in _read("/proc/self/cgroup").splitlines() if line.count(":") >= 2}
    relative = {"/"} | own_paths | {str(Path(p).parent) for p in own_paths}
    seen: set[str] = set()
    with contextlib.suppress(OSError):
        for hierarchy in Path(_CGROUP_ROOT).iterdir():
            for rel in relative:
                base = hierarchy / rel.lstrip("/") / "contain"
                with contextlib.suppress(OSError):
                    for child in base.iterdir():
                        if child.is_dir() and child.name.startswith(prefix) and str(child) not in seen:
                            seen.add(str(child))
                            yield str(child)
