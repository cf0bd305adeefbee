"""The OCI bundle (``config.json`` and rootfs skeleton) for one container sandbox, planned from facts.

Pure: ``plan_oci_bundle`` turns the same ``BackendPlan`` the process backend gets, plus a few
resolved facts (``BundleInputs``), into a ``BundlePlan`` value. Nothing here touches the disk or a
runtime; the container backend writes the plan and runs ``runc``.

What the plan enforces, mount for mount as ``runtime/bwrap.py::plan_bwrap_argv`` (read it beside
this one):

- the root is an empty, host-created directory of the bundle, read-only (``root.readonly``); its
  skeleton holds only mount points and the loader symlinks (/bin -> usr/bin ...);
- /usr read-only, loader directories read-only, /etc from the one cached tree (etc_tree.py),
  attachment data and empty masks as read-only bundle files (bwrap's ``--ro-bind-data``);
- or, with ``image_etc_files`` set, the root is a local image the backend mounted (read-only to
  the workload all the same): no host /usr, loader or /etc tree; contain's generated /etc files
  (passwd, group, hosts, resolv.conf, ...) are bound one by one over the image's;
- /proc fresh (pid namespace), /dev a small tmpfs that runc remounts read-only once it has made the
  default device nodes (bwrap's ``--dev`` + ``--remount-ro /dev``); /dev/pts a new devpts instance;
- the disk budget's places (/tmp, /dev/shm, scratch) bound from ``disk_root``, the ONE tmpfs of
  ``disk_bytes`` and an inode cap that the backend mounts before ``runc create`` (disk_budget.py);
- the supervisor read-only at /.contain/supervisor, socket attachments, read and write binds
  parent-first, then protected subpaths of write binds, hidden sockets, then ``block`` masks;
- every namespace new (pid, ipc, uts, mount, user, network, cgroup), hostname ``sandbox``;
- a user namespace mapping exactly two ids: container 1000 (the sandbox user) to the leased host
  ids, and container 0 to a SECOND host id. runc 1.1 needs container root mapped: it looks up
  the host id of container root before it starts (``HostRootUID``) and its init sets the
  container up as that root; without a mapping for 0, ``runc run`` fails with "User namespaces
  enabled, but no user mapping found" (tests/integration/test_oci_bundle_runc.py proves it). Root's host
  id must not be host root nor the sandbox's id: the kernel refuses two container ids on one host
  id, and host root would make container-root-owned files host-root-owned. No process of the
  workload runs as container 0: the supervisor is uid 1000 from exec on;
- no capability in any set, ``noNewPrivileges``, /proc and /sys paths masked and read-only
  (``PROC_PATH_RULES``), seccomp from the same table (``render_oci_seccomp``);
- cgroup limits from the budgets (memory without swap, pids, CPU bandwidth, devices deny-all then
  runc's defaults) in ``<base>/contain-container/<name>``, a parent of its own beside the process
  backend's ``contain`` parent (v1: inside our own cgroup; ``_plan_cgroups_path``); rlimits as
  ``plan_rlimits``, clamped to the host's hard limits. Under runsc the host cgroup counts the
  sentry's tasks, not the workload's: there RLIMIT_NPROC, which the sentry enforces, is
  ``pids_max`` itself and pids.max only the outer bound (``plan_runtime_rlimits``).

What it does NOT do (the backend's job, or a known difference from bwrap):

- Landlock: the supervisor applies it (``supervisor_args`` carry ``--landlock-*``), as in bwrap;
- mount points inside host binds (placeholders under write binds) are NOT in the skeleton: the
  backend creates them on the host first, as the sandbox's host ids
  (``PathFacts.created_placeholders``). runc 1.1.5 would create them itself, but owned by
  container root's host id, left in the user's tree (seen in the integration test);
- bind sources must be reachable (search permission) by the container root's host id, not only
  by the sandbox's: runc's init mounts as container root;
- bwrap's ``--disable-userns`` and ``--new-session`` have no OCI field; nested user namespaces are
  left to the seccomp table, and the workload never gets a terminal (pipes only);
- ``--die-with-parent`` has no OCI field: the backend deletes the container (``runc delete -f``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contain.boundary.kinds import FileAccess
from contain.errors import SandboxStartError, UnsupportedHost
from contain.runtime.backend import BackendPlan
from contain.runtime.bwrap import SANDBOX_GID, SANDBOX_UID, SUPERVISOR_SANDBOX_PATH
from contain.runtime.cgroup_plan import plan_cgroup_hierarchies, plan_cgroup_limits
from contain.runtime.container.oci_seccomp import render_oci_seccomp
from contain.runtime.container.seccomp_probe import PROBE_SANDBOX_PATH
from contain.runtime.disk_budget import plan_disk_places
from contain.runtime.paths import bind_source, is_under_write_bind, with_bind_sources
from contain.runtime.plan import plan_rlimits
from contain.runtime.seccomp_rules import SECCOMP_RULES
from contain.runtime.supervisor_channel import Rlimit

__all__ = [
    "CONTAINER_CGROUP_PARENT",
    "OCI_VERSION",
    "PROC_PATH_RULES",
    "RUNSC_HOST_TASKS",
    "RUNSC_HOST_TASKS_PER_MOUNT",
    "RUNSC_HOST_TASKS_PER_TASK",
    "RUNTIME_DIFFERENCES",
    "BundleFile",
    "BundleInputs",
    "BundlePlan",
    "ProcPathRule",
    "RootfsEntry",
    "RuntimeDifference",
    "plan_oci_bundle",
    "plan_runsc_ids",
    "plan_runtime_rlimits",
]

OCI_VERSION = "1.0.2"  # runtime-spec version runc 1.1 implements
CONTAINER_CGROUP_PARENT = "contain-container"  # beside the process backend's cgroup_plan.PARENT_NAME
# Host tasks runsc's sentry and gofer need besides the workload's (see RUNTIME_DIFFERENCES): 65
# measured idle, with room for the Go runtime's extra threads under blocking syscalls; plus a few
# per bind mount, because the gofer serves each mount with threads blocked in syscalls (measured:
# 299 gofer threads for 78 mounts, six write binds of git repositories with their protected paths).
RUNSC_HOST_TASKS = 256
RUNSC_HOST_TASKS_PER_MOUNT = 8
# Host tasks per workload task under runsc's ptrace platform (RUNTIME_DIFFERENCES
# "nproc-is-the-pids-limit"): each gVisor process has a host stub process, which gains a traced
# thread for every sentry thread that ran it. Measured with runsc 20221219 (host pids.current over
# cgroup.procs while the workload held N children): a python3 fork 5.1, a fork+exec of sleep 11.2,
# a thread 0.5. 12 keeps the host bound above what pids_max workload tasks can cost, so the
# sentry's RLIMIT_NPROC refuses the fork before the host cgroup ends the whole sandbox.
RUNSC_HOST_TASKS_PER_TASK = 12
_RLIM_INFINITY = 2**64 - 1  # RLIM_INFINITY as the OCI spec's uint64
_BIND_RO = ["rbind", "ro", "nosuid", "nodev"]  # bwrap's --ro-bind: recursive, nosuid, nodev
_BIND_RW = ["rbind", "nosuid", "nodev"]
_DEV_TMPFS = ["nosuid", "strictatime", "mode=755", "size=65536k", "ro"]  # runc remounts ro after mknod


@dataclass(frozen=True)
class ProcPathRule:
    """A /proc or /sys path the workload must not read (``masked``) or write (``readonly``)."""

    path: str
    how: str  # "masked" | "readonly"
    why: str


PROC_PATH_RULES: tuple[ProcPathRule, ...] = (
    ProcPathRule("/proc/acpi", "masked", "ACPI tables and controls of the host's hardware"),
    ProcPathRule("/proc/asound", "masked", "the host's sound devices"),
    ProcPathRule("/proc/kcore", "masked", "the host kernel's memory image"),
    ProcPathRule("/proc/keys", "masked", "keys of every keyring the host kernel holds"),
    ProcPathRule("/proc/latency_stats", "masked", "kernel stack addresses (KASLR leak)"),
    ProcPathRule("/proc/timer_list", "masked", "host timers with kernel addresses and task names"),
    ProcPathRule("/proc/timer_stats", "masked", "host-wide timer use by task"),
    ProcPathRule("/proc/sched_debug", "masked", "every host task's name and pid"),
    ProcPathRule("/proc/scsi", "masked", "the host's SCSI devices; writes can rescan buses"),
    ProcPathRule("/sys/firmware", "masked", "firmware tables (ACPI, EFI variables)"),
    ProcPathRule("/sys/devices/virtual/powercap", "masked", "RAPL energy counters (PLATYPUS side channel)"),
    ProcPathRule("/proc/bus", "readonly", "PCI and USB device configuration"),
    ProcPathRule("/proc/fs", "readonly", "file system tunables of the host"),
    ProcPathRule("/proc/irq", "readonly", "interrupt affinity of the host"),
    ProcPathRule("/proc/sys", "readonly", "host-wide sysctls not owned by the sandbox's namespaces"),
    ProcPathRule("/proc/sysrq-trigger", "readonly", "reboots or crashes the host"),
)


@dataclass(frozen=True)
class RuntimeDifference:
    """Where the bundle for one OCI runtime differs from runc's, and why."""

    runtime: str
    name: str
    why: str


RUNTIME_DIFFERENCES: tuple[RuntimeDifference, ...] = (
    RuntimeDifference(
        "runsc",
        "no-user-namespace",
        "runsc 20221219 does not start a spec with a user namespace under --network=host ('error converting "
        "mounts: operation not permitted', docs/gvisor-notes.md), and --network=host is how egress reaches the "
        "workload. The workload then runs as its leased host ids inside the sentry (no id is root), and the "
        "sentry itself runs as nobody in a user namespace runsc makes: the sentry, not a user namespace of "
        "ours, stands between the workload and the host kernel",
    ),
    RuntimeDifference(
        "runsc",
        "sentry-tasks-in-pids",
        "the host cgroup counts the sentry's and gofer's own threads (65 idle, measured with runsc 20221219 on "
        "ptrace), a few per bind mount the gofer serves, and 5 to 12 per workload process (its stub and the stub's "
        "traced threads, RUNSC_HOST_TASKS_PER_TASK), so pids.max gets RUNSC_HOST_TASKS + RUNSC_HOST_TASKS_PER_MOUNT "
        "per bind + RUNSC_HOST_TASKS_PER_TASK per pids_max: the outer bound, never the limit a workload meets "
        "first (that is RLIMIT_NPROC in the sentry, nproc-is-the-pids-limit); without it an idle sandbox at "
        "pids_max 64 is already full and the sentry dies on its next clone",
    ),
    RuntimeDifference(
        "runsc",
        "nproc-is-the-pids-limit",
        "the host cgroup never sees the workload's processes (only the sentry's tasks), so pids.max cannot hold "
        "pids_max for them. The sentry enforces RLIMIT_NPROC over its own tasks of the workload's uid as Linux does "
        "(measured with runsc 20221219: fork and pthread_create fail with EAGAIN at exactly the limit, supervisor "
        "included), and the workload cannot raise it (no capability, the hard limit is set). So NPROC is pids_max "
        "itself under runsc, without the slack it keeps above a cgroup that counts (plan_runtime_rlimits); runsc "
        "2022 has no cgroupfs pids controller of its own that linux.resources.pids would set",
    ),
    RuntimeDifference(
        "runsc",
        "write-binds-as-their-owner",
        "runsc's gofer (host root) creates the workload's files and then gives them the workload's uid; through "
        "the idmapped view of a write bind root is unmapped and every create fails with EOVERFLOW (measured). "
        "So write binds are bound as they are and the workload runs as the binds' owner inside the sentry "
        "(plan_runsc_ids); files it makes there belong to that owner, as through the view on other backends",
    ),
    RuntimeDifference(
        "runsc",
        "clone3-enosys-from-the-sentry",
        "runsc 20221219 ignores errnoRet and answers every SCMP_ACT_ERRNO row with EPERM; for clone3 (denied "
        "with ENOSYS so that glibc falls back to clone(), whose flags the filter can check) EPERM means no "
        "thread can start. The sentry has no clone3 at all (ENOSYS, measured), so the row is left out and the "
        "seccomp self-check (seccomp_probe.py) refuses the sandbox unless clone3 still gives ENOSYS",
    ),
    RuntimeDifference(
        "runsc",
        "host-sockets-unreachable",
        "with --host-uds=none the sentry refuses connect() to every host Unix socket in a bind (EPERM, "
        "docs/gvisor-notes.md), so the empty-file masks that hide sockets are not planned: the gofer cannot "
        "mount over a socket anyway (open() of the mount point fails with ENXIO, measured with IP-51). A "
        "boundary that keeps sockets connectable (allow_sockets) is refused under runsc (plan_layers)",
    ),
    RuntimeDifference(
        "runsc",
        "dev-mount-points-in-skeleton",
        "runsc's gofer mounts each bind onto the host rootfs, so mount points under /dev (/dev/shm, /dev/pts) "
        "must exist in the skeleton; runc makes them inside its own /dev tmpfs",
    ),
)


def plan_runsc_ids(write_bind_owners: set[tuple[int, int]], *, default: tuple[int, int]) -> tuple[int, int]:
    """The ids the workload runs as inside runsc's sentry (RUNTIME_DIFFERENCES
    ``write-binds-as-their-owner``): the one owner of every write bind, else ``default``.

    Raises:
        UnsupportedHost: write binds with different owners, or owned by root.
    """
    if not write_bind_owners:
        return default
    if len(write_bind_owners) > 1:
        raise UnsupportedHost(
            f"under runsc the workload runs as its write binds' owner, and these have several: "
            f"{sorted(write_bind_owners)}",
            "give every write bind the same owner, or use --backend container:runc or process",
        )
    owner = next(iter(write_bind_owners))
    if 0 in owner:
        raise UnsupportedHost(
            "under runsc the workload would run as its write bind's owner, root",
            "bind a directory owned by an ordinary user, or use --backend container:runc or process",
        )
    return owner


@dataclass(frozen=True)
class RootfsEntry:
    """One entry the backend creates in the empty rootfs before ``runc create``, parents first."""

    path: str  # absolute sandbox path, e.g. "/usr" (created as <bundle>/rootfs/usr)
    kind: str  # "dir" | "file" | "symlink"
    target: str = ""  # symlinks only, relative as on the host ("usr/lib")


@dataclass(frozen=True)
class BundleFile:
    """A file the backend writes under the bundle directory, then bound read-only into the sandbox."""

    name: str  # relative to the bundle directory, e.g. "data/0"
    content: bytes
    mode: int  # 0o444 for data and placeholders, 0o000 for hidden sockets and blocks


@dataclass(frozen=True)
class BundleInputs:
    """What the bundle depends on besides the ``BackendPlan``: resolved host facts and names."""

    bundle_dir: str  # absolute host directory of the bundle
    name: str  # the container's id and the leaf of its cgroup, e.g. "contain-1234-ab12"
    loader_links: Mapping[str, str]  # "/lib" -> "usr/lib" for symlinks on the host
    loader_dirs: tuple[str, ...]  # loader paths that are real directories on the host
    etc_tree: str  # host directory holding the whole sandbox /etc (etc_tree.py, with resolv_conf)
    supervisor_host_path: str
    supervisor_args: tuple[str, ...]  # e.g. ("--control-fd", "3", "--landlock-abi", ...)
    disk_root: str  # host directory where the backend mounted the disk budget (disk_budget.py)
    root_host_ids: tuple[int, int]  # host uid, gid that container root maps to (see the docstring)
    host_hard_limits: Mapping[str, int]  # rlimit name ("NOFILE") -> the host's hard limit (-1: none)
    netns_path: str = ""  # the network namespace the backend made (egress listens there); "": a new one
    userns_path: str = ""  # runc: the user namespace the backend made, owned by the sandbox's uid; "": new
    runtime: str = "runc"  # the OCI runtime the bundle is for; RUNTIME_DIFFERENCES rows apply to it
    # an image rootfs (the backend mounted it at <bundle>/rootfs): no host /usr, loader dirs or /etc
    # tree; these generated /etc files are bound one by one over the image's own /etc instead
    image_etc_files: Mapping[str, str] | None = None
    # runsc: the seccomp self-check program (seccomp_probe.py), bound read-only and executable
    seccomp_probe: bytes | None = None


@dataclass(frozen=True)
class BundlePlan:
    """The whole bundle: ``config.json`` as a dict, the rootfs skeleton, the files beside it."""

    config: dict[str, Any]
    rootfs: tuple[RootfsEntry, ...]
    files: tuple[BundleFile, ...]


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _bind(source: str, destination: str, *, writable: bool = False) -> dict[str, Any]:
    return {
        "destination": destination,
        "type": "bind",
        "source": source,
        "options": list(_BIND_RW if writable else _BIND_RO),
    }


def _tmpfs(destination: str, options: list[str]) -> dict[str, Any]:
    return {"destination": destination, "type": "tmpfs", "source": "tmpfs", "options": options}


class _Files:
    """Bundle files in the order they are asked for, named data/0, data/1, ..."""

    def __init__(self, bundle_dir: str) -> None:
        self.bundle_dir = bundle_dir
        self.files: list[BundleFile] = []

    def add(self, content: bytes, mode: int) -> str:
        name = f"data/{len(self.files)}"
        self.files.append(BundleFile(name, content, mode))
        return posixpath.join(self.bundle_dir, name)


def _plan_mounts(
    plan: BackendPlan, inputs: BundleInputs, files: _Files, differences: set[str]
) -> list[tuple[dict[str, Any], str]]:
    """Mounts in bwrap's order, each with the kind of its mount point ("dir" or "file")."""
    # binds and the masks below them come from the staged idmapped views, as in the process backend
    paths = with_bind_sources(plan.paths, plan.bind_sources) if plan.bind_sources else plan.paths
    mounts: list[tuple[dict[str, Any], str]] = []
    if inputs.image_etc_files is None:
        mounts.append((_bind("/usr", "/usr"), "dir"))
        mounts += [(_bind(p, p), "dir") for p in sorted(inputs.loader_dirs)]
        mounts.append((_bind(inputs.etc_tree, "/etc"), "dir"))
    else:  # the image's /etc stays (certificates, its loader cache); contain's own files cover it
        for path, text in sorted(inputs.image_etc_files.items()):
            mounts.append((_bind(files.add(text.encode(), 0o444), path), "file"))
    for attachment in sorted(plan.attachments, key=lambda a: a.sandbox_path):
        if attachment.data is not None:
            mounts.append((_bind(files.add(attachment.data, 0o444), attachment.sandbox_path), "file"))
    mounts.append(({"destination": "/proc", "type": "proc", "source": "proc", "options": []}, "dir"))
    mounts.append((_tmpfs("/dev", list(_DEV_TMPFS)), "dir"))
    pts = ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]  # no gid=5: tty is unmapped
    mounts.append(({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": pts}, "dir"))
    for place in plan_disk_places(plan.boundary):  # one budget: every place is a directory of one tmpfs
        mounts.append((_bind(f"{inputs.disk_root}/{place.name}", place.sandbox_path, writable=True), "dir"))
    mounts.append((_bind(inputs.supervisor_host_path, SUPERVISOR_SANDBOX_PATH), "file"))
    if inputs.seccomp_probe is not None:
        mounts.append((_bind(files.add(inputs.seccomp_probe, 0o555), PROBE_SANDBOX_PATH), "file"))
    for attachment in plan.attachments:
        if attachment.host_path is not None:  # connect() needs write permission on the inode
            source = bind_source(plan.bind_sources, attachment.host_path)
            mounts.append((_bind(source, attachment.sandbox_path, writable=True), "file"))
    for bind in sorted(paths.binds, key=lambda b: (_depth(b.rule.path), b.rule.path)):
        writable = bind.rule.access is FileAccess.WRITE
        mounts.append((_bind(bind.host_realpath, bind.rule.path, writable=writable), "dir" if bind.is_dir else "file"))
    for bind in paths.binds:
        for mask in bind.masks:
            if mask.exists:  # immovable: bound onto itself writable so it cannot be renamed
                mounts.append((_bind(mask.host_path, mask.sandbox_path, writable=mask.immovable), mask.kind))
            elif mask.kind == "dir":
                mounts.append((_tmpfs(mask.sandbox_path, ["ro", "nosuid", "nodev", "noexec", "mode=555"]), "dir"))
            else:
                mounts.append((_bind(files.add(b"", 0o444), mask.sandbox_path), "file"))
    for path in paths.hidden_sockets:  # connect() on an empty regular file fails
        if "host-sockets-unreachable" not in differences:
            mounts.append((_bind(files.add(b"", 0o000), path), "file"))
    for path, kind in sorted(paths.blocks.items()):
        if kind == "file":
            mounts.append((_bind(files.add(b"", 0o000), path), "file"))
        elif kind == "dir" or is_under_write_bind(path, paths.binds):
            mounts.append((_tmpfs(path, ["ro", "nosuid", "nodev", "noexec", "mode=000"]), "dir"))
    return mounts


def _plan_skeleton(mounts: list[tuple[dict[str, Any], str]], inputs: BundleInputs) -> tuple[RootfsEntry, ...]:
    """Mount points that lie in the rootfs itself (not inside an earlier mount), with their parents."""
    entries: dict[str, RootfsEntry] = {}
    for link in sorted(inputs.loader_links):
        entries[link] = RootfsEntry(link, "symlink", inputs.loader_links[link])
    earlier: list[str] = []
    for mount, kind in mounts:
        destination = mount["destination"]
        if not any(destination.startswith(prefix.rstrip("/") + "/") for prefix in earlier):
            parts = destination.strip("/").split("/")
            for i in range(1, len(parts)):
                parent = "/" + "/".join(parts[:i])
                entries.setdefault(parent, RootfsEntry(parent, "dir"))
            entries.setdefault(destination, RootfsEntry(destination, kind))
        earlier.append(destination)
    return tuple(sorted(entries.values(), key=lambda e: (_depth(e.path), e.path)))


def _plan_resources(plan: BackendPlan, differences: set[str], *, binds: int) -> dict[str, Any]:
    devices = [{"allow": False, "access": "rwm"}]  # runc appends its default devices after this
    if not plan.layers.cgroups:
        return {"devices": devices}
    resources = plan.boundary.resources
    limits = plan_cgroup_limits(resources, version=2)
    quota, period = (int(v) for v in limits["cpu"]["cpu.max"].split())
    return {
        "devices": devices,
        "memory": {"limit": resources.memory_bytes, "swap": resources.memory_bytes},  # swap = RAM + swap
        "pids": {
            "limit": int(limits["pids"]["pids.max"])
            + (_runsc_host_tasks(resources.pids_max, binds=binds) if "sentry-tasks-in-pids" in differences else 0)
        },
        "cpu": {"quota": quota, "period": period},
    }


def _runsc_host_tasks(pids_max: int, *, binds: int) -> int:
    """Host tasks runsc adds to the cgroup besides ``pids_max`` (RUNTIME_DIFFERENCES ``sentry-tasks-in-pids``)."""
    return RUNSC_HOST_TASKS + RUNSC_HOST_TASKS_PER_MOUNT * binds + RUNSC_HOST_TASKS_PER_TASK * pids_max


def plan_runtime_rlimits(rlimits: tuple[Rlimit, ...], *, runtime: str, pids_max: int) -> tuple[Rlimit, ...]:
    """The per-process limits as ``runtime`` must get them (RUNTIME_DIFFERENCES rows).

    Under runsc (``nproc-is-the-pids-limit``) RLIMIT_NPROC becomes ``pids_max`` exactly, soft and
    hard: the sentry enforces it over the workload's tasks, and the host cgroup cannot. Every other
    limit, and every limit under runc, is returned unchanged.

    Args:
        rlimits: ``plan_rlimits`` for the boundary's resources.
        runtime: "runc" or "runsc".
        pids_max: the boundary's ``resources.pids_max``.

    Returns:
        The limits in the same order.
    """
    differences = {row.name for row in RUNTIME_DIFFERENCES if row.runtime == runtime}
    if "nproc-is-the-pids-limit" not in differences:
        return rlimits
    return tuple(Rlimit("NPROC", pids_max, pids_max) if r.name == "NPROC" else r for r in rlimits)


def _plan_cgroups_path(plan: BackendPlan, name: str) -> str:
    """Where runc puts the container's cgroup: a ``contain-container`` parent of its own.

    With a delegated root (``HostFacts.cgroup_root``) it is ``<root>/contain-container/<name>``.
    Otherwise it is placed as ``cgroup_plan`` places the process backend's ``contain`` parent: on
    v2 beside our own cgroup (absolute path from its parent), on v1 inside our own cgroup of every
    hierarchy, which is what runc does with a relative ``cgroupsPath`` (v1 joins it to its own
    cgroup per hierarchy; runc is our child, so that is ours).
    """
    hierarchies = plan_cgroup_hierarchies(plan.facts)  # refuses hosts the process backend refuses
    leaf = posixpath.join(CONTAINER_CGROUP_PARENT, name)
    if plan.facts.cgroup_root is not None:
        return posixpath.join(plan.facts.cgroup_root, leaf)
    hierarchy = hierarchies[0]
    if hierarchy.version == 1:
        return leaf
    base = posixpath.relpath(hierarchy.base, hierarchy.mountpoint)
    return posixpath.join("/", "" if base == "." else base, leaf)


def _plan_rlimits(plan: BackendPlan, host_hard: Mapping[str, int], runtime: str) -> list[dict[str, Any]]:
    """``plan_runtime_rlimits`` with each hard limit no higher than the host's (runc cannot raise it)."""
    resources = plan.boundary.resources
    limits = plan_rlimits(resources, cgroups=plan.layers.cgroups)
    out = []
    for limit in plan_runtime_rlimits(limits, runtime=runtime, pids_max=resources.pids_max):
        if limit.name not in host_hard:
            raise SandboxStartError(
                f"the host's hard limit for RLIMIT_{limit.name} was not gathered", "this is a bug in the backend"
            )
        cap = host_hard[limit.name]
        hard = _RLIM_INFINITY if limit.hard is None else limit.hard
        hard = hard if cap < 0 else min(hard, cap)
        soft = min(_RLIM_INFINITY if limit.soft is None else limit.soft, hard)
        out.append({"type": f"RLIMIT_{limit.name}", "hard": hard, "soft": soft})
    return out


def _id_mappings(plan: BackendPlan, inputs: BundleInputs) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    (uid, gid), (root_uid, root_gid) = plan.host_ids, inputs.root_host_ids
    if 0 in (uid, gid, root_uid, root_gid) or root_uid == uid or root_gid == gid:
        raise SandboxStartError(
            f"container ids map to host uid {root_uid}/{uid}, gid {root_gid}/{gid}: each must be its own "
            "non-root host id",
            "lease a second host id for the container's root (host_ids.lease_host_ids)",
        )
    uids = [{"containerID": 0, "hostID": root_uid, "size": 1}, {"containerID": SANDBOX_UID, "hostID": uid, "size": 1}]
    gids = [{"containerID": 0, "hostID": root_gid, "size": 1}, {"containerID": SANDBOX_GID, "hostID": gid, "size": 1}]
    return uids, gids


def _namespace(kind: str, inputs: BundleInputs) -> dict[str, str]:
    # The network namespace is the backend's own (made before the start, so egress can bind in it
    # before any workload exists); every other namespace is new.
    if kind == "network" and inputs.netns_path:
        return {"type": kind, "path": inputs.netns_path}
    if kind == "user" and inputs.userns_path:  # owned by the sandbox's uid, not by runc's root
        return {"type": kind, "path": inputs.userns_path}
    return {"type": kind}


def plan_oci_bundle(plan: BackendPlan, inputs: BundleInputs) -> BundlePlan:
    """Plan the whole OCI bundle for one container sandbox.

    Steps, in order (later mounts cover earlier ones, as in ``plan_bwrap_argv``):
      1. mounts: system view, /proc, /dev, disk places, supervisor, sockets, binds parent-first,
         protected subpaths, hidden sockets, blocks;
      2. the rootfs skeleton for the mount points that are not inside another mount;
      3. process: the supervisor as uid 1000, no capabilities, noNewPrivileges, rlimits;
      4. linux: namespaces, id mappings, cgroup path and resources, seccomp, masked paths.

    Args:
        plan: what ``Sandbox`` decided (boundary, facts, layers, host ids, path facts, staged
            idmapped sources, attachments).
        inputs: resolved facts and names (``BundleInputs``).

    Returns:
        The ``BundlePlan``; the backend writes ``config`` as ``config.json``.

    Raises:
        SandboxStartError: container root would share a host id with the sandbox or be host root,
            or a host hard limit is missing.
        UnsupportedHost: no usable cgroup layout (``plan_cgroup_hierarchies``), or the seccomp
            table cannot be rendered for the arch.
    """
    files = _Files(inputs.bundle_dir)
    differences = {row.name for row in RUNTIME_DIFFERENCES if row.runtime == inputs.runtime}
    mounts = _plan_mounts(plan, inputs, files, differences)
    user_namespace = "no-user-namespace" not in differences
    kinds = ("pid", "ipc", "uts", "mount", "user", "network", "cgroup")
    empty: list[str] = []
    linux: dict[str, Any] = {
        "namespaces": [_namespace(t, inputs) for t in kinds if user_namespace or t != "user"],
        "cgroupsPath": _plan_cgroups_path(plan, inputs.name),
        "resources": _plan_resources(plan, differences, binds=sum(m["type"] == "bind" for m, _kind in mounts)),
        "maskedPaths": [r.path for r in PROC_PATH_RULES if r.how == "masked"],
        "readonlyPaths": [r.path for r in PROC_PATH_RULES if r.how == "readonly"],
        "rootfsPropagation": "rprivate",
    }
    if user_namespace:
        linux["uidMappings"], linux["gidMappings"] = _id_mappings(plan, inputs)
        user = {"uid": SANDBOX_UID, "gid": SANDBOX_GID, "additionalGids": []}
    else:  # the workload's ids are its host ids (the leased ones, never root: _check_unmapped_ids)
        user = {"uid": plan.host_ids[0], "gid": plan.host_ids[1], "additionalGids": []}
        _check_unmapped_ids(plan)
    if plan.layers.seccomp:
        rules = SECCOMP_RULES
        if "clone3-enosys-from-the-sentry" in differences:
            rules = tuple(r for r in SECCOMP_RULES if r.syscall != "clone3")
        linux["seccomp"] = render_oci_seccomp(rules, arch=plan.facts.arch, libseccomp_path=plan.facts.libseccomp_path)
    config: dict[str, Any] = {
        "ociVersion": OCI_VERSION,
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "sandbox",
        "process": {
            "terminal": False,
            "user": user,
            "args": [SUPERVISOR_SANDBOX_PATH, *inputs.supervisor_args],
            "env": ["PATH=/usr/bin:/bin"],
            "cwd": "/",
            "capabilities": {k: list(empty) for k in ("bounding", "effective", "inheritable", "permitted", "ambient")},
            "noNewPrivileges": True,
            # In a user namespace the backend made (userns_path), runc 1.1.5's prlimit on its init
            # fails with EPERM for every limit (measured); the supervisor then runs with inherited
            # limits, as under bubblewrap, and every command gets plan_rlimits from its RUN frame.
            "rlimits": [] if inputs.userns_path else _plan_rlimits(plan, inputs.host_hard_limits, inputs.runtime),
        },
        "mounts": [mount for mount, _kind in mounts],
        "linux": linux,
    }
    rootfs = _plan_skeleton(mounts, inputs)
    if "dev-mount-points-in-skeleton" in differences:
        rootfs = _with_dev_mount_points(rootfs, mounts)
    return BundlePlan(config=config, rootfs=rootfs, files=tuple(files.files))


def _with_dev_mount_points(
    rootfs: tuple[RootfsEntry, ...], mounts: list[tuple[dict[str, Any], str]]
) -> tuple[RootfsEntry, ...]:
    have = {entry.path for entry in rootfs}
    extra = [
        RootfsEntry(mount["destination"], kind)
        for mount, kind in mounts
        if mount["destination"].startswith("/dev/") and mount["destination"] not in have
    ]
    return tuple(sorted((*rootfs, *extra), key=lambda e: (_depth(e.path), e.path)))


def _check_unmapped_ids(plan: BackendPlan) -> None:
    if 0 in plan.host_ids:
        raise SandboxStartError(
            "without a user namespace the workload would run as host root", "this is a bug in the backend"
        )
