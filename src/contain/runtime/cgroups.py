"""One cgroup per sandbox: memory, pids and CPU limits, usage accounting, and a kill that wins.

What is enforced (once the sandbox supervisor is attached; every workload it forks inherits the cgroup):

- ``Resources.memory_bytes`` as a limit on memory *including swap*. v1: ``memory.limit_in_bytes``
  and ``memory.memsw.limit_in_bytes`` set to the same value (plus ``memory.swappiness=0``); v2:
  ``memory.max`` with ``memory.swap.max=0``. Over the limit the kernel OOM-kills inside this cgroup
  only.
- ``Resources.pids_max`` as ``pids.max`` (processes *and* threads); fork() beyond it gets EAGAIN.
- ``Resources.cpu_cores`` as a CFS bandwidth quota (``cpu.cfs_quota_us``/``cpu.max``).
- Accounting: cumulative CPU seconds, peak memory, OOM-kill count and current pids (``usage()``).
- ``kill_all()``: v2 ``cgroup.kill`` (atomic, races fork in the kernel's favour); elsewhere freeze,
  SIGKILL every member, thaw, repeat until empty. A frozen task cannot fork, so a fork bomb cannot
  outrun the loop.

What is NOT enforced here:

- Who may write the cgroup files. The sandbox must not see a writable cgroupfs: bwrap's mount plan
  (``runtime/bwrap.py``) gives it none, and its user namespace maps no uid that owns these files.
- CPU *time* (``Resources.cpu_s``) and wall time: rlimits and the launcher's timer do that; the
  quota here only limits bandwidth. Disk and output budgets live in the mount plan and the supervisor.
- I/O bandwidth, hugetlb, rdma, devices: no controller is configured for them.
- The supervisor itself is not protected from the OOM killer by the cgroup; workloads run with
  ``oom_score_adj=1000`` so the kernel picks them first (see "Decisions").


Planning (which hierarchies, which files, which values) is ``runtime/cgroup_plan.py``; removing
the cgroups of dead contain processes is ``runtime/cgroup_sweep.py``.

Decisions (each one considered against the alternative we did not take):

- **Memory without swap accounting.** When ``memory.memsw.*`` (v1) or ``memory.swap.max`` (v2) is
  absent the kernel cannot bound swap per cgroup. If the host has no swap at all, the RAM limit is
  already a memory+swap limit and we proceed; if it has swap we refuse (``UnsupportedHost``). v1
  also writes ``memory.swappiness=0`` so cgroup reclaim never pushes workload pages to swap.
- **No memory.oom.group on v2.** With oom.group the kernel kills the whole cgroup, supervisor included,
  on the first OOM; the run would end as ``SandboxLost`` instead of one workload being reported as
  OOM-killed. We rely on per-task selection plus ``oom_score_adj=1000`` on workloads instead.
- **Peak memory reset on v2.** ``memory.peak`` became resettable in Linux 6.12, per open file: the
  reset only affects reads through the same descriptor, so ``reset_peak()`` keeps that descriptor
  and ``usage()`` reads through it. Before 6.12 the peak stays cumulative and ``reset_peak()``
  returns False.
- **Pid reuse during kill_all.** Members are signalled by pid while frozen. A frozen member cannot
  exit; one already exiting could be reaped and its pid reused only after the kernel's cyclic
  allocator wraps ``pid_max`` in the microseconds between the read and the kill.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from contain._log import LazyLogger
from contain.boundary.plain import PlainResources
from contain.errors import SandboxLost, SandboxStartError, UnsupportedHost
from contain.host.facts import CGROUP_ROOT_ENV, HostFacts, errno_name
from contain.runtime.cgroup_plan import (
    CONTROLLER_ROWS,
    LEAF_PREFIX,
    PARENT_NAME,
    CgroupHierarchy,
    plan_cgroup_hierarchies,
    plan_cgroup_limits,
)

__all__ = [
    "CgroupOps",
    "CgroupUsage",
    "SandboxCgroup",
    "parse_keyed_counters",
]

log = LazyLogger(__name__)

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,31}$")

_POLL_S = 0.001  # first poll interval while waiting for the kernel; doubles up to _POLL_MAX_S
_POLL_MAX_S = 0.01
_ROUND_S = 0.05  # how long one freeze-kill-thaw round waits for killed members to leave


@dataclass(frozen=True)
class CgroupUsage:
    """What a sandbox cgroup used, read from the kernel's counters."""

    cpu_s: float  # user+system CPU seconds since creation
    memory_peak_bytes: int | None  # None on v2 before Linux 5.19 (no memory.peak)
    oom_kills: int  # tasks the OOM killer killed in this cgroup
    pids_current: int  # tasks (processes and threads) now charged, zombies included
    pids_limit_hits: int = 0  # forks refused at pids.max ("max" in pids.events)


def _kernel_mkdir(path: str) -> None:
    os.mkdir(path, 0o755)


@dataclass(frozen=True)
class CgroupOps:
    """The syscalls that differ between cgroupfs and a plain directory; tests pass fakes.

    On cgroupfs ``mkdir`` makes the kernel create the control files and ``rmdir`` removes a
    directory that still lists them; on a tmpfs fake neither happens by itself.
    """

    mkdir: Callable[[str], None] = _kernel_mkdir
    rmdir: Callable[[str], None] = os.rmdir
    kill: Callable[[int, int], None] = os.kill


def parse_keyed_counters(text: str) -> dict[str, int]:
    """Parse ``key value`` lines (memory.oom_control, memory.events, cpu.stat) into ints.

    Lines whose value is not an integer are skipped; a missing key is the caller's decision.
    """
    counters: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            counters[key] = int(value)
        except ValueError:
            continue
    return counters


def _read(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read()


def _write(path: str, value: str) -> None:
    # No O_CREAT: a control file the kernel did not create must fail, not appear. O_TRUNC is what
    # `echo v > file` does; cgroupfs ignores it.
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode("ascii"))
    finally:
        os.close(fd)


def _host_swap_bytes() -> int:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def _unsupported(action: str, path: str, exc: OSError) -> UnsupportedHost:
    code = errno_name(exc.errno or 0)
    return UnsupportedHost(
        f"cannot {action} {path}: {code} ({exc.strerror})",
        f"run as root, or set {CGROUP_ROOT_ENV} to a cgroup delegated to uid {os.getuid()} "
        "(e.g. systemd-run --user -p Delegate=yes), or set hardening.cgroups: off",
    )


class SandboxCgroup:
    """The cgroup directories of one sandbox, across every hierarchy it needs.

    Build with ``create``; tear down with ``remove``. Not thread-safe.
    """

    def __init__(
        self, *, version: int, dirs: dict[str, str], memsw: bool, ops: CgroupOps, leaf: str = "", joined: bool = False
    ) -> None:
        self.version = version
        self.dirs = dirs  # controller (every CONTROLLER_ROWS name) -> directory
        self.leaf = leaf  # the sandbox's directory name, the same in every hierarchy
        self.joined_by_launcher = joined  # see join_files
        self._memsw = memsw
        self._ops = ops
        self._peak_fd: int | None = None

    @property
    def paths(self) -> tuple[str, ...]:
        """Every distinct directory of this sandbox, in creation order."""
        return tuple(dict.fromkeys(self.dirs.values()))

    @classmethod
    def create(
        cls,
        name: str,
        resources: PlainResources,
        facts: HostFacts,
        *,
        ops: CgroupOps = CgroupOps(),
        swap_bytes: int | None = None,
        launcher_joins: bool = False,
        parent_name: str = PARENT_NAME,
    ) -> SandboxCgroup:
        """Create the sandbox cgroup and write every limit; nothing runs in it yet.

        Args:
            name: short label for the directory, ``[a-z0-9][a-z0-9_.-]{0,31}``.
            resources: the limits to enforce.
            facts: the detected host (``cgroups``, ``is_root``, ``cgroup_root``).
            ops: mkdir/rmdir/kill; the kernel's by default.
            swap_bytes: host swap size; read from /proc/meminfo when None and it matters.
            launcher_joins: the caller starts bwrap through the root launcher, which can join
                a v1 cgroup itself before exec (``join_files``); bwrap's monitor process then
                lives in the cgroup too and pids.max makes room for it.
            parent_name: the shared parent the leaf goes in (``cgroup_plan.plan_cgroup_hierarchies``).

        Returns:
            A cgroup with every requested limit in place (never fewer).

        Raises:
            UnsupportedHost: a controller is missing, not writable (path and errno named), or
                swap cannot be bounded.
        """
        if not _NAME_RE.match(name):
            raise SandboxStartError(f"cgroup name {name!r} is not [a-z0-9][a-z0-9_.-]{{0,31}}", "pass a short label")
        hierarchies = plan_cgroup_hierarchies(facts, parent_name=parent_name)
        leaf = f"{LEAF_PREFIX}{os.getpid()}-{name}-{os.urandom(4).hex()}"
        version = hierarchies[0].version
        joined = launcher_joins and version == 1
        cgroup = cls(version=version, dirs={}, memsw=False, ops=ops, leaf=leaf, joined=joined)
        try:
            for hierarchy in hierarchies:
                path = _make_leaf(hierarchy, leaf, ops)
                for controller in hierarchy.controllers:
                    cgroup.dirs[controller] = path
            for row in CONTROLLER_ROWS:  # v2: accounting and freezing live in the same directory
                cgroup.dirs.setdefault(row.controller, cgroup.dirs["memory"])
            cgroup._memsw = _swap_accounted(cgroup.dirs["memory"], version, swap_bytes)
            plan = plan_cgroup_limits(
                resources, version=version, memsw_available=cgroup._memsw, helper_processes=1 if joined else 0
            )
            cgroup._apply(plan)
            cgroup._check_oom_counter()
        except BaseException:
            cgroup._rmdir_all(deadline=time.monotonic() + 1.0, strict=False)
            raise
        log.debug("created cgroup %s", cgroup.paths)
        return cgroup

    def _apply(self, plan: dict[str, dict[str, str]]) -> None:
        for controller, files in plan.items():
            for filename, value in files.items():
                path = posixpath.join(self.dirs[controller], filename)
                try:
                    _write(path, value)
                except OSError as exc:
                    raise _unsupported(f"write {value!r} to", path, exc) from exc

    def _check_oom_counter(self) -> None:
        path = self._memory_file("memory.oom_control" if self.version == 1 else "memory.events")
        if "oom_kill" not in parse_keyed_counters(_read(path)):
            raise UnsupportedHost(
                f"{path} has no oom_kill counter (Linux < 4.13)",
                "upgrade the kernel, or set hardening.cgroups: off",
            )

    def _memory_file(self, filename: str) -> str:
        return posixpath.join(self.dirs["memory"], filename)

    def join_files(self) -> tuple[str, ...]:
        """The v1 ``tasks`` files the launcher writes "0" to before it execs bwrap; empty unless
        created with ``launcher_joins`` on a v1 host.

        Moving oneself (one thread) through ``tasks`` skips the kernel's global threadgroup
        lock, whose writer waits for an RCU grace period (7-15 ms here) when no migration ran
        in the last few milliseconds; ``attach`` (another process, ``cgroup.procs``) pays it.
        """
        if not self.joined_by_launcher:
            return ()
        return tuple(posixpath.join(path, "tasks") for path in self.paths)

    def check_member(self, pid: int) -> None:
        """Confirm that ``pid`` is in this cgroup in every v1 hierarchy (after the launcher joined,
        which it does only on v1: see ``join_files``).

        Raises:
            SandboxStartError: it is not, or its cgroups cannot be read.
        """
        try:
            text = _read(f"/proc/{pid}/cgroup")
        except OSError as exc:
            raise SandboxStartError(
                f"cannot read the cgroups of pid {pid}: {errno_name(exc.errno or 0)}", "remove this sandbox"
            ) from exc
        where: dict[str, str] = {}
        for line in text.splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(","):
                where[controller] = path
        suffix = "/" + self.leaf
        outside = sorted(c for c in self.dirs if not where.get(c, "").endswith(suffix))
        if outside:
            raise SandboxStartError(
                f"pid {pid} is not in its sandbox cgroup for {', '.join(outside)}",
                "report this bug; remove this sandbox",
            )

    def attach(self, pid: int) -> None:
        """Move ``pid`` (and its threads) into this cgroup in every hierarchy.

        Raises:
            SandboxStartError: the pid is gone or the write was refused; the caller removes us.
        """
        for path in self.paths:
            procs = posixpath.join(path, "cgroup.procs")
            try:
                _write(procs, str(pid))
            except OSError as exc:
                raise SandboxStartError(
                    f"cannot move pid {pid} into {procs}: {errno_name(exc.errno or 0)}",
                    "the process must exist and not be a kernel thread; remove this sandbox",
                ) from exc

    def pids(self) -> list[int]:
        """Every process in the cgroup (union over hierarchies), sorted."""
        members: set[int] = set()
        for path in self.paths:
            procs = posixpath.join(path, "cgroup.procs")
            try:
                members.update(int(pid) for pid in _read(procs).split() if pid != "0")
            except FileNotFoundError:
                continue  # already removed
        return sorted(members)

    def usage(self) -> CgroupUsage:
        """Read the accounting counters.

        Raises:
            SandboxLost: a counter file is unreadable (the cgroup was removed under us).
        """
        try:
            if self.version == 1:
                cpu_ns = int(_read(posixpath.join(self.dirs["cpuacct"], "cpuacct.usage")))
                peak_file = "memory.memsw.max_usage_in_bytes" if self._memsw else ("memory.max_usage_in_bytes")
                return CgroupUsage(
                    cpu_s=cpu_ns / 1e9,
                    memory_peak_bytes=int(_read(self._memory_file(peak_file))),
                    oom_kills=parse_keyed_counters(_read(self._memory_file("memory.oom_control")))["oom_kill"],
                    pids_current=self._pids_current(),
                    pids_limit_hits=self._pids_limit_hits(),
                )
            cpu_stat = parse_keyed_counters(_read(posixpath.join(self.dirs["cpu"], "cpu.stat")))
            return CgroupUsage(
                cpu_s=cpu_stat["usage_usec"] / 1e6,
                memory_peak_bytes=self._v2_peak(),
                oom_kills=parse_keyed_counters(_read(self._memory_file("memory.events")))["oom_kill"],
                pids_current=self._pids_current(),
                pids_limit_hits=self._pids_limit_hits(),
            )
        except (OSError, KeyError, ValueError) as exc:
            raise SandboxLost(
                f"cannot read usage of cgroup {self.dirs['memory']}: {exc}",
                "the cgroup was removed or the kernel changed its format; rerun",
            ) from exc

    def _pids_current(self) -> int:
        return int(_read(posixpath.join(self.dirs["pids"], "pids.current")))

    def _pids_limit_hits(self) -> int:
        # pids.events holds "max N" on v1 and v2 (Linux >= 4.3); absent means never counted.
        try:
            return parse_keyed_counters(_read(posixpath.join(self.dirs["pids"], "pids.events"))).get("max", 0)
        except FileNotFoundError:
            return 0

    def _v2_peak(self) -> int | None:
        if self._peak_fd is not None:
            return int(os.pread(self._peak_fd, 64, 0))
        try:
            return int(_read(self._memory_file("memory.peak")))
        except FileNotFoundError:
            return None  # Linux < 5.19

    def set_pids_max(self, value: int) -> None:
        """Rewrite ``pids.max`` (a backend whose own helper tasks live in the cgroup, such as
        runsc's sentry, adds them to the boundary's ``pids_max``) before anything runs in it.

        Raises:
            UnsupportedHost: the file cannot be written (path and errno named).
        """
        path = posixpath.join(self.dirs["pids"], "pids.max")
        try:
            _write(path, str(value))
        except OSError as exc:
            raise _unsupported("write", path, exc) from exc

    def reset_peak(self) -> bool:
        """Start counting peak memory from now.

        Returns:
            True when the next ``usage()`` reports the peak since this call; False when the kernel
            only keeps a cumulative peak (v2 before Linux 6.12) and ``usage()`` still reports it.

        Raises:
            SandboxLost: v1 and the counter cannot be written (the cgroup is gone).
        """
        if self.version == 1:
            files = ["memory.max_usage_in_bytes"]
            if self._memsw:
                files.append("memory.memsw.max_usage_in_bytes")
            for filename in files:
                try:
                    _write(self._memory_file(filename), "0")
                except OSError as exc:
                    raise SandboxLost(
                        f"cannot reset {self._memory_file(filename)}: {errno_name(exc.errno or 0)}",
                        "the cgroup was removed under us; rerun",
                    ) from exc
            return True
        try:
            if self._peak_fd is None:
                self._peak_fd = os.open(self._memory_file("memory.peak"), os.O_RDWR | os.O_CLOEXEC)
            os.write(self._peak_fd, b"reset\n")  # resets the peak seen through this fd only
            return True
        except OSError as exc:
            self._close_peak_fd()
            log.warning(
                "memory.peak of %s is not resettable (%s); peak memory stays cumulative",
                self.dirs["memory"],
                errno_name(exc.errno or 0),
            )
            return False

    def _close_peak_fd(self) -> None:
        if self._peak_fd is not None:
            os.close(self._peak_fd)
            self._peak_fd = None

    def kill_all(self, *, timeout_s: float) -> None:
        """SIGKILL every process in the cgroup and wait until it is empty.

        Raises:
            SandboxStartError: members remain after ``timeout_s`` (named with their pids).
        """
        deadline = time.monotonic() + timeout_s
        try:
            self._kill_until_empty(deadline)
        except OSError as exc:
            raise SandboxStartError(
                f"cannot kill cgroup {self.dirs['freezer']}: {exc}",
                "check the cgroup with `cat .../cgroup.procs`; remove it by hand once empty",
            ) from exc
        if self.pids():
            raise SandboxStartError(
                f"cgroup {self.dirs['freezer']} still holds pids {self.pids()} after {timeout_s} s of SIGKILL",
                "a task may be stuck in uninterruptible sleep (D state); check the host",
            )

    def _kill_until_empty(self, deadline: float) -> None:
        kill_file = posixpath.join(self.dirs["memory"], "cgroup.kill")
        if self.version == 2 and os.path.exists(kill_file):
            _write(kill_file, "1")  # the kernel also kills children forked during the write
            if _wait_until(lambda: not self.pids(), deadline):
                return
        while self.pids():  # at least one round, even with a zero timeout
            self._freeze(deadline)
            try:
                for pid in self.pids():  # nothing can fork while frozen
                    try:
                        self._ops.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
            finally:
                self._thaw()
            # Killed tasks die on thaw; a survivor means a fork raced the freeze: go again.
            _wait_until(lambda: not self.pids(), min(deadline, time.monotonic() + _ROUND_S))
            if time.monotonic() >= deadline:
                return

    def _freeze(self, deadline: float) -> None:
        if self.version == 1:
            state = posixpath.join(self.dirs["freezer"], "freezer.state")
            _write(state, "FROZEN")
            frozen = _wait_until(lambda: _read(state).strip() == "FROZEN", deadline)
        else:
            _write(posixpath.join(self.dirs["freezer"], "cgroup.freeze"), "1")
            events = posixpath.join(self.dirs["freezer"], "cgroup.events")
            frozen = _wait_until(lambda: parse_keyed_counters(_read(events)).get("frozen") == 1, deadline)
        if not frozen:  # kill anyway: SIGKILL still lands, the next round catches stragglers
            log.warning("cgroup %s did not freeze before the deadline", self.dirs["freezer"])

    def _thaw(self) -> None:
        if self.version == 1:
            _write(posixpath.join(self.dirs["freezer"], "freezer.state"), "THAWED")
        else:
            _write(posixpath.join(self.dirs["freezer"], "cgroup.freeze"), "0")

    def remove(self, *, timeout_s: float) -> None:
        """Kill every member, then remove every directory. Idempotent.

        Raises:
            SandboxStartError: a member survived or a directory could not be removed (named).
        """
        deadline = time.monotonic() + timeout_s
        self._close_peak_fd()
        if not any(os.path.isdir(path) for path in self.paths):
            return
        self.kill_all(timeout_s=timeout_s)
        self._rmdir_all(deadline=deadline, strict=True)

    def _rmdir_all(self, *, deadline: float, strict: bool) -> None:
        for path in reversed(self.paths):
            try:
                _rmdir_retrying(path, self._ops, deadline)
            except OSError as exc:
                if strict:
                    raise SandboxStartError(
                        f"cannot remove cgroup {path}: {errno_name(exc.errno or 0)}",
                        f"check `cat {path}/cgroup.procs`; remove it with rmdir once empty",
                    ) from exc
                log.warning("leaving cgroup %s: %s", path, exc)


def _make_leaf(hierarchy: CgroupHierarchy, leaf: str, ops: CgroupOps) -> str:
    if hierarchy.version == 2:
        _enable_controllers(hierarchy.base, hierarchy.controllers)
    try:
        ops.mkdir(hierarchy.parent)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _unsupported("create cgroup", hierarchy.parent, exc) from exc
    if hierarchy.version == 2:
        _enable_controllers(hierarchy.parent, hierarchy.controllers)
    path = posixpath.join(hierarchy.parent, leaf)
    try:
        ops.mkdir(path)
    except OSError as exc:
        raise _unsupported("create cgroup", path, exc) from exc
    if hierarchy.version == 2:
        have = _read(posixpath.join(path, "cgroup.controllers")).split()
        missing = [c for c in hierarchy.controllers if c not in have]
        if missing:
            ops.rmdir(path)
            raise UnsupportedHost(
                f"cgroup {path} lacks controllers {missing} after enabling them in its parents",
                f"enable them in the subtree_control of every ancestor of {hierarchy.parent}",
            )
    return path


def _enable_controllers(cgroup_dir: str, controllers: tuple[str, ...]) -> None:
    control = posixpath.join(cgroup_dir, "cgroup.subtree_control")
    try:
        enabled = _read(control).split()
        missing = [c for c in controllers if c not in enabled]
        if missing:  # EBUSY here means cgroup_dir holds processes (no internal processes rule)
            _write(control, " ".join(f"+{c}" for c in missing))
    except OSError as exc:
        raise _unsupported("enable controllers in", control, exc) from exc


def _swap_accounted(memory_dir: str, version: int, swap_bytes: int | None) -> bool:
    probe = "memory.memsw.limit_in_bytes" if version == 1 else "memory.swap.max"
    if os.path.exists(posixpath.join(memory_dir, probe)):
        return True
    swap = _host_swap_bytes() if swap_bytes is None else swap_bytes
    if swap > 0:
        raise UnsupportedHost(
            f"{memory_dir} has no {probe} (swap accounting off) and the host has "
            f"{swap} bytes of swap, so memory_bytes cannot bound memory including swap",
            "boot with swapaccount=1 (v1) / a kernel with CONFIG_MEMCG_SWAP, or swapoff -a",
        )
    return False


def _rmdir_retrying(path: str, ops: CgroupOps, deadline: float) -> None:
    delay = _POLL_S
    while True:
        try:
            ops.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            # EBUSY: killed tasks still leaving (or exiting zombies being uncharged).
            if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, _POLL_MAX_S)


def _wait_until(predicate: Callable[[], bool], deadline: float) -> bool:
    delay = _POLL_S
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, _POLL_MAX_S)
    return True
