"""What a sandbox cgroup is made of, decided as data: which hierarchies it spans, where its shared
parent goes, and which value each limit file gets.

Pure: every function here is a function of ``HostFacts`` and ``Resources``; nothing reads or
writes a cgroup filesystem. ``runtime/cgroups.py`` (the live ``SandboxCgroup``) writes these plans,
``runtime/cgroup_sweep.py`` finds the shared parents through ``plan_parent_dirs``. ``plan_layers``
and ``contain doctor`` both take their cgroup decision from ``plan_cgroup_hierarchies``, so they
cannot disagree about a host.

What is NOT decided here: whether a directory is writable, whether swap is accounted per cgroup
(``memsw_available`` is the caller's observation) and what the sandbox may see of cgroupfs (the
mount plan, ``runtime/bwrap.py``).

Decisions (each one considered against the alternative we did not take):

- **Where cgroups live.** Directories are named ``contain-<owner pid>-<name>-<random>`` inside a
  shared ``contain`` parent. v1: the parent sits in this process's own cgroup of every hierarchy
  (v1 has no "no internal processes" rule). v2: a cgroup that holds processes cannot enable
  controllers for children (cgroup-v2.rst, "No Internal Process Constraint"), so the parent is a
  *sibling* of our own cgroup (``<parent of own>/contain``), or ``/contain`` when we sit in the
  root. ``CONTAIN_CGROUP_ROOT=/some/delegated/cgroup`` (a path inside the hierarchy, as in
  /proc/self/cgroup) overrides the base on both versions; that is how a non-root user points us at
  a systemd ``Delegate=yes`` subtree. We did not move our own process into a leaf to free our
  cgroup: that would change the caller's accounting behind its back.
- **CPU quota.** The period is the kernel default 100 ms; quotas under the kernel's 1 ms minimum
  use a 1 s period (the kernel maximum), so 0.001 cores is the smallest bandwidth we can express.
  Smaller values are refused rather than rounded up.
- **Who may create cgroups.** Root, or a user who names a cgroup delegated to it in
  ``CONTAIN_CGROUP_ROOT`` (``HostFacts.cgroup_root``). Without either we refuse rather than try
  our own cgroup: a systemd user session usually cannot enable controllers there.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from contain.boundary.plain import PlainResources
from contain.errors import UnsupportedHost
from contain.host.facts import CGROUP_ROOT_ENV, CgroupMount, HostFacts

__all__ = [
    "CONTROLLER_ROWS",
    "LEAF_PREFIX",
    "PARENT_NAME",
    "CgroupHierarchy",
    "ControllerRow",
    "plan_base_dir",
    "plan_cgroup_hierarchies",
    "plan_cgroup_limits",
    "plan_parent_dirs",
]

PARENT_NAME = "contain"
LEAF_PREFIX = "contain-"

# Documentation/scheduler/sched-bwc.rst: default period 100 ms; period <= 1 s; quota >= 1 ms.
CFS_PERIOD_US = 100_000
CFS_LONG_PERIOD_US = 1_000_000
CFS_MIN_QUOTA_US = 1_000


@dataclass(frozen=True)
class ControllerRow:
    """One controller a sandbox cgroup needs, on which cgroup versions, and why."""

    controller: str
    versions: tuple[int, ...]
    why: str


CONTROLLER_ROWS: tuple[ControllerRow, ...] = (
    ControllerRow("memory", (1, 2), "memory_bytes limit (incl. swap), peak memory, OOM-kill count"),
    ControllerRow("pids", (1, 2), "pids_max limit and the current count; bounds fork bombs"),
    ControllerRow("cpu", (1, 2), "cpu_cores as a CFS bandwidth quota"),
    ControllerRow("cpuacct", (1,), "cumulative CPU seconds (v2: cpu.stat exists in every cgroup)"),
    ControllerRow("freezer", (1,), "freeze a fork bomb before SIGKILL (v2: cgroup.freeze is core)"),
)


@dataclass(frozen=True)
class CgroupHierarchy:
    """One mounted hierarchy a sandbox needs a directory in, and the shared parent there."""

    version: int
    mountpoint: str
    base: str  # existing cgroup directory the parent goes in (own cgroup or delegated root)
    parent: str  # the shared "contain" directory: sandbox cgroups are its children
    controllers: tuple[str, ...]  # CONTROLLER_ROWS served by this directory


def plan_cgroup_limits(
    resources: PlainResources, *, version: int, memsw_available: bool = True, helper_processes: int = 0
) -> dict[str, dict[str, str]]:
    """Turn ``Resources`` into the files to write, per controller, in write order.

    Args:
        resources: the boundary's budgets.
        version: 1 or 2.
        memsw_available: whether the kernel accounts swap per cgroup (v1 ``memory.memsw.*``, v2
            ``memory.swap.max``). When False the swap file is left out; the caller must only do
            that on a host without swap (see the module docstring).
        helper_processes: contain's own processes that live in the cgroup besides the supervisor
            (bwrap's monitor, when the launcher joined before exec); pids.max grows by as many
            so that the workload's budget stays ``pids_max``.

    Returns:
        ``{controller: {file: value}}``. Order matters and is kept: v1 ``memory.limit_in_bytes``
        before ``memory.memsw.limit_in_bytes`` (memsw may never be below the RAM limit), and
        ``cpu.cfs_period_us`` before ``cpu.cfs_quota_us``.

    Raises:
        UnsupportedHost: unknown version, or a CPU quota below the kernel's 1 ms minimum.
    """
    memory = str(resources.memory_bytes)
    period, quota = _cfs_bandwidth(resources.cpu_cores)
    if version == 1:
        mem = {"memory.limit_in_bytes": memory}
        if memsw_available:
            mem["memory.memsw.limit_in_bytes"] = memory
        mem["memory.swappiness"] = "0"
        cpu = {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": str(quota)}
    elif version == 2:
        mem = {"memory.max": memory}
        if memsw_available:
            mem["memory.swap.max"] = "0"
        cpu = {"cpu.max": f"{quota} {period}"}
    else:
        raise UnsupportedHost(f"cgroup version {version} is unknown", "use cgroup v1 or v2")
    return {"memory": mem, "pids": {"pids.max": str(resources.pids_max + helper_processes)}, "cpu": cpu}


def _cfs_bandwidth(cores: float) -> tuple[int, int]:
    for period in (CFS_PERIOD_US, CFS_LONG_PERIOD_US):
        quota = round(cores * period)
        if quota >= CFS_MIN_QUOTA_US:
            return period, quota
    raise UnsupportedHost(
        f"resources.cpu_cores={cores} is below the kernel's minimum CFS quota "
        f"({CFS_MIN_QUOTA_US} us per {CFS_LONG_PERIOD_US} us period)",
        "set resources.cpu_cores to 0.001 or more",
    )


def plan_cgroup_hierarchies(facts: HostFacts, *, parent_name: str = PARENT_NAME) -> tuple[CgroupHierarchy, ...]:
    """Decide which hierarchies a sandbox cgroup spans and where its shared parent goes.

    This is the runtime's one cgroup decision: ``plan_layers`` and ``contain doctor`` both call it.

    Args:
        facts: the detected host: ``cgroups``, ``is_root`` and ``cgroup_root`` (a delegated cgroup
            path such as ``/user.slice/x``, from ``CONTAIN_CGROUP_ROOT``; None when not set).
        parent_name: the shared parent's name: ``contain`` for the process backend, each other
            backend kind its own (``backend_names.BACKEND_KINDS``: ``contain-container``).

    Returns:
        One entry per directory to create: v1 one per distinct mount (``cpu,cpuacct`` co-mounted
        is one), v2 exactly one.

    Raises:
        UnsupportedHost: a needed controller is missing, or memory/pids/cpu are split between
            v1 and v2, or ``cgroup_root`` is not a normalised absolute cgroup path, or contain is
            not root and no cgroup is delegated to it.
    """
    if facts.cgroup_root is not None:
        _check_cgroup_path(facts.cgroup_root)
    core = [row.controller for row in CONTROLLER_ROWS if 2 in row.versions]
    v1 = {
        row.controller: mount
        for row in CONTROLLER_ROWS
        if (mount := facts.cgroup_for(row.controller)) is not None and mount.version == 1
    }
    if all(controller in v1 for controller in core):
        return _check_owner(facts, _plan_v1(facts, v1, parent_name))
    unified = next((m for m in facts.cgroups if m.version == 2), None)
    if unified is None or any(c not in unified.controllers for c in core):
        raise UnsupportedHost(
            "sandbox cgroups need memory, pids and cpu all on cgroup v1 or all on cgroup v2; "
            f"this host has: {_describe_controllers(facts, core)}",
            "boot with all of them on one version (e.g. systemd.unified_cgroup_hierarchy=1), "
            "or set hardening.cgroups: off to run without cgroup limits",
        )
    base = plan_base_dir(facts, unified)
    hierarchy = CgroupHierarchy(
        version=2,
        mountpoint=unified.mountpoint,
        base=base,
        parent=posixpath.join(base, parent_name),
        controllers=tuple(core),
    )
    return _check_owner(facts, (hierarchy,))


def _check_owner(facts: HostFacts, plan: tuple[CgroupHierarchy, ...]) -> tuple[CgroupHierarchy, ...]:
    # Checked after the layout so a host without usable controllers is told that first.
    if not facts.is_root and facts.cgroup_root is None:
        raise UnsupportedHost(
            "contain is not running as root and no cgroup is delegated to this user",
            f"run as root, or delegate a cgroup and name it in {CGROUP_ROOT_ENV}",
        )
    return plan


def _plan_v1(facts: HostFacts, v1: dict[str, CgroupMount], parent_name: str) -> tuple[CgroupHierarchy, ...]:
    missing = [row for row in CONTROLLER_ROWS if 1 in row.versions and row.controller not in v1]
    if missing:
        raise UnsupportedHost(
            "cgroup v1 hierarchies missing for: " + "; ".join(f"{row.controller} ({row.why})" for row in missing),
            "mount them (mount -t cgroup -o <controller> cgroup /sys/fs/cgroup/<controller>), "
            "or set hardening.cgroups: off to run without cgroup limits",
        )
    by_mount: dict[str, list[str]] = {}
    for row in CONTROLLER_ROWS:
        by_mount.setdefault(v1[row.controller].mountpoint, []).append(row.controller)
    plans = []
    for mountpoint, controllers in by_mount.items():
        base = plan_base_dir(facts, v1[controllers[0]])
        plans.append(
            CgroupHierarchy(
                version=1,
                mountpoint=mountpoint,
                base=base,
                parent=posixpath.join(base, parent_name),
                controllers=tuple(controllers),
            )
        )
    return tuple(plans)


def plan_base_dir(facts: HostFacts, mount: CgroupMount) -> str:
    """The existing cgroup directory in ``mount`` that the shared ``contain`` parent goes in:
    the delegated root when there is one, else our own cgroup (v1) or its parent (v2).

    ``contain doctor`` tries to create a child exactly here.
    """
    base = facts.cgroup_root or (_v2_default_base(mount.own_path) if mount.version == 2 else mount.own_path)
    return _join(mount.mountpoint, base)


def _v2_default_base(own_path: str) -> str:
    # Our own cgroup holds us, so it cannot enable controllers for a child; its parent holds no
    # processes (it has us as a child with controllers) and can. The root is exempt from the rule.
    return "/" if own_path == "/" else posixpath.dirname(own_path.rstrip("/"))


def _check_cgroup_path(path: str) -> None:
    if not path.startswith("/") or posixpath.normpath(path) != path.rstrip("/") or ".." in path:
        raise UnsupportedHost(
            f"{CGROUP_ROOT_ENV}={path!r} is not a normalised absolute cgroup path",
            f"set {CGROUP_ROOT_ENV} to a path as /proc/self/cgroup shows it, e.g. /user.slice/contain",
        )


def _describe_controllers(facts: HostFacts, controllers: list[str]) -> str:
    parts = []
    for controller in controllers:
        mount = facts.cgroup_for(controller)
        parts.append(f"{controller}=" + (f"v{mount.version}" if mount else "missing"))
    return ", ".join(parts)


def _join(mountpoint: str, *parts: str) -> str:
    return posixpath.join(mountpoint, *(part.strip("/") for part in parts if part.strip("/")))


def plan_parent_dirs(facts: HostFacts) -> tuple[str, ...]:
    """The shared ``contain`` parent directory in every mounted hierarchy, whether or not the
    layout is one ``plan_cgroup_hierarchies`` accepts (the sweep looks everywhere a sandbox
    cgroup could have been made)."""
    return tuple(posixpath.join(plan_base_dir(facts, mount), PARENT_NAME) for mount in facts.cgroups)
