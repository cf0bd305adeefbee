"""Pure decisions for a sandbox (process and container backends): which layers run, as whom, with which limits and env.

Every function here is a pure function of the boundary and ``HostFacts``; tests drive them with
constructed facts. Fail closed: a layer the boundary needs that the host cannot provide raises
``UnsupportedHost`` naming the cause and the fix. Nothing is ever quietly dropped; a layer that is
absent by the manifest's own choice (``auto`` or ``off``) is reported in ``LayerPlan.report``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from contain.boundary.kinds import CredentialVia, FileAccess, LayerRequirement
from contain.boundary.plain import PlainBoundary, PlainResources
from contain.errors import UnsupportedHost
from contain.host.facts import HostFacts
from contain.runtime.backend_names import RuntimeFacts, plan_runsc_platform
from contain.runtime.bwrap import default_scratch_paths
from contain.runtime.cgroup_plan import plan_cgroup_hierarchies
from contain.runtime.kernel_differences import KERNEL_DIFFERENCES
from contain.runtime.landlock import LandlockPlan, plan_landlock
from contain.runtime.supervisor_channel import Rlimit

__all__ = [
    "NOBODY_UID",
    "PLANNED_BACKENDS",
    "LayerPlan",
    "has_write_binds",
    "plan_base_env",
    "plan_layers",
    "plan_rlimits",
    "sandbox_host_ids",
    "should_lease_host_ids",
    "writable_paths",
]

# When contain runs as root the sandbox runs as this host uid, never as root.
NOBODY_UID = 65534
_BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
_NPROC_SLACK = 16


@dataclass(frozen=True)
class LayerPlan:
    """Which isolation layers this sandbox gets, and a line for each for the record."""

    seccomp: bool
    landlock: LandlockPlan | None
    cgroups: bool
    egress: bool
    report: dict[str, str]


def sandbox_host_ids(facts: HostFacts) -> tuple[int, int]:
    """The host uid and gid the sandbox runs as: nobody when contain runs as root."""
    if facts.is_root:
        return NOBODY_UID, NOBODY_UID
    return facts.uid, facts.gid


def should_lease_host_ids(facts: HostFacts) -> bool:
    """Root gives each sandbox a host uid of its own; an unprivileged caller runs it as itself."""
    return facts.is_root


def has_write_binds(boundary: PlainBoundary) -> bool:
    """Write binds need their files owned by the bind's owner: through idmapped mounts when the
    sandbox has a leased uid, else (idmapping unavailable) as the shared uid nobody."""
    return any(r.access is FileAccess.WRITE for r in boundary.files)


def writable_paths(boundary: PlainBoundary) -> tuple[str, ...]:
    """Sandbox paths Landlock lets a workload write: scratch, /tmp, /dev/shm, write binds, and /dev
    for its device nodes (/dev/null, /dev/tty); the /dev mount itself is read-only, so nothing can
    be created there (disk_budget.py)."""
    binds = tuple(r.path for r in boundary.files if r.access is FileAccess.WRITE)
    return (*default_scratch_paths(boundary), "/tmp", "/dev/shm", "/dev", *binds)


def _decide_cgroups(requirement: LayerRequirement, facts: HostFacts) -> tuple[bool, str]:
    if requirement is LayerRequirement.OFF:
        return False, "off by manifest; per-process rlimits only"
    try:
        hierarchies = plan_cgroup_hierarchies(facts)
    except UnsupportedHost as exc:
        if requirement is LayerRequirement.REQUIRED:
            raise UnsupportedHost(
                f"cgroup limits are required but {exc.cause}",
                f"{exc.fix}; or set hardening.cgroups: off to rely on per-process rlimits only",
            ) from exc
        return False, f"unavailable ({exc.cause}); per-process rlimits only (auto)"
    versions = sorted({h.version for h in hierarchies})
    return True, f"memory, pids, cpu (cgroup v{versions[0]})"


# The backends plan_layers can decide for (full spec strings, backend_names.py), each with what it
# builds on. A name missing here is refused: its layers were never planned, so running it would be
# a sandbox nobody reviewed.
PLANNED_BACKENDS: dict[str, str] = {
    "process": "bubblewrap namespaces, seccomp, Landlock, cgroups (process_backend.py)",
    "container:runc": (
        "runc: OCI bundle from the same plan (namespaces incl. user, seccomp rendered from the same table, "
        "Landlock by the supervisor, cgroups under contain-container; container/backend.py)"
    ),
    "container:runsc": (
        "runsc (gVisor): the same bundle under a user-space kernel, seccomp with --oci-seccomp, egress through "
        "--network=host in our own netns; no Landlock (gVisor has none; container/backend.py)"
    ),
    "microvm": (
        "QEMU -M microvm: a guest kernel of its own; the VMM in a host cgroup and an empty netns, the "
        "workload as uid 1000 under the guest agent with contain's seccomp filter; no Landlock in the guest "
        "(microvm/backend.py)"
    ),
}


def _check_process_host(facts: HostFacts) -> None:
    if facts.bwrap_path is None:
        raise UnsupportedHost(
            "bubblewrap (bwrap) is not installed", "apt-get install bubblewrap (or run `make setup` as root)"
        )
    if not facts.user_namespaces:
        raise UnsupportedHost(
            "unprivileged user namespaces are disabled on this host",
            "sysctl -w user.max_user_namespaces=15000; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0",
        )


def _check_container_host(
    boundary: PlainBoundary, facts: HostFacts, backend: str, runtime: RuntimeFacts | None
) -> dict[str, str]:
    """The container backend's own prerequisites; returns its report lines (runtime, platform)."""
    if not facts.is_root:
        raise UnsupportedHost(
            f"the {backend} backend drives the OCI runtime as root (a user namespace with two leased host ids "
            "and cgroups under contain-container); contain is not running as root",
            "run contain as root, or use --backend process",
        )
    if not facts.user_namespaces:
        raise UnsupportedHost(
            "user namespaces are disabled on this host (the container's root must not be host root)",
            "sysctl -w user.max_user_namespaces=15000",
        )
    variant = backend.partition(":")[2]
    if runtime is None or runtime.runtime != variant:
        raise UnsupportedHost(
            f"no facts about the {variant} binary were gathered for backend {backend}",
            "construct the backend through Sandbox(backend=...) so the runtime binary is probed",
        )
    if variant == "runsc":
        platform = plan_runsc_platform(runtime.platforms)
        kept = [r.path for r in boundary.files if r.allow_sockets]
        if kept:  # --host-uds=none (container/oci_runtime.py): no host socket is connectable in gVisor
            raise UnsupportedHost(
                f"files[] {', '.join(kept)} keep Unix sockets connectable (allow_sockets), which runsc cannot: "
                "the sentry refuses connect() to host sockets",
                "use --backend container:runc or process for this boundary, or drop allow_sockets",
            )
        return {
            "runtime": f"runsc ({runtime.version}): gVisor user-space kernel",
            "platform": f"{platform.name} ({platform.why})",
        }
    return {"runtime": f"runc ({runtime.version}): host kernel", "platform": "native (host kernel)"}


def _gvisor_differences() -> str:
    return ", ".join(f"kernel difference {row.name}" for row in KERNEL_DIFFERENCES if "gvisor" in row.kernels)


def _decide_landlock(boundary: PlainBoundary, facts: HostFacts, backend: str) -> tuple[LandlockPlan | None, str]:
    requirement = boundary.hardening.landlock
    if backend == "container:runsc":
        # gVisor's sentry implements no Landlock (docs/gvisor-notes.md): the supervisor would find
        # ABI 0 inside. A required rule is refused, never dropped; auto says why it is off.
        if requirement is LayerRequirement.REQUIRED:
            raise UnsupportedHost(
                "hardening.landlock is required but gVisor (runsc) implements no Landlock",
                "set hardening.landlock: auto (the read-only mounts and gVisor's own kernel still bound writes), "
                "or use --backend process or container:runc",
            )
        if requirement is LayerRequirement.OFF:
            return None, "off by manifest"
        return None, "unavailable under gVisor (runsc implements no Landlock) (auto)"
    landlock = plan_landlock(abi=facts.landlock_abi, write_paths=writable_paths(boundary), requirement=requirement)
    if landlock is None:
        return None, ("off by manifest" if requirement is LayerRequirement.OFF else "unavailable on this kernel (auto)")
    return landlock, f"applied (ABI {landlock.abi})"


def plan_layers(
    boundary: PlainBoundary,
    facts: HostFacts,
    *,
    egress_available: bool,
    backend: str = "process",
    runtime: RuntimeFacts | None = None,
) -> LayerPlan:
    """Decide the layers ``backend`` applies, refusing when a needed one is missing.

    Args:
        boundary: the validated boundary.
        facts: the host facts.
        egress_available: the egress package is importable.
        backend: the full backend spec (``process``, ``container:runc``, ``container:runsc``);
            only the names of ``PLANNED_BACKENDS``.
        runtime: the OCI runtime binary's facts, for ``container:*`` (required there).

    Raises:
        UnsupportedHost: an unknown backend, or bwrap (process), root or the runtime's facts
            (container), user namespaces, seccomp, a required Landlock ABI (or any required
            Landlock under runsc), required cgroup controllers or egress are missing.
    """
    if backend not in PLANNED_BACKENDS:
        raise UnsupportedHost(
            f"no layer plan exists for backend {backend!r} in this version",
            f"use one of: {', '.join(PLANNED_BACKENDS)}",
        )
    report: dict[str, str] = {}
    if backend == "microvm":
        return _plan_microvm_layers(boundary, facts, egress_available=egress_available)
    if backend == "process":
        _check_process_host(facts)
    else:
        report.update(_check_container_host(boundary, facts, backend, runtime))
    if not facts.seccomp:
        raise UnsupportedHost(
            "the kernel has no seccomp filter support", "use a kernel built with CONFIG_SECCOMP_FILTER"
        )
    if facts.libseccomp_path is None:
        raise UnsupportedHost("libseccomp is not installed", "apt-get install libseccomp2")
    if backend == "container:runsc":
        report["namespaces"] = (
            "mount, pid, ipc, uts, net (ours), cgroup; no user namespace of ours (runsc refuses one with "
            "--network=host): the sentry runs as nobody in runsc's own, the workload as its leased host ids"
        )
        report["seccomp"] = "applied by the sentry (--oci-seccomp), checked at start with a ptrace probe"
        report["securebits"] = f"not implemented by gVisor; accepted ({_gvisor_differences()})"
    else:
        report["namespaces"] = "user, mount, pid, ipc, uts, net, cgroup"
        report["seccomp"] = "applied"

    landlock, report["landlock"] = _decide_landlock(boundary, facts, backend)

    cgroups, report["cgroups"] = _decide_cgroups(boundary.hardening.cgroups, facts)

    if boundary.allows_network and not egress_available:
        raise UnsupportedHost(
            "the boundary allows network destinations but the egress proxy is not available",
            "remove network.allow (the sandbox then has no network at all)",
        )
    report["network"] = "egress proxy (allow list)" if boundary.allows_network else "none (loopback only)"
    return LayerPlan(seccomp=True, landlock=landlock, cgroups=cgroups, egress=boundary.allows_network, report=report)


def _plan_microvm_layers(boundary: PlainBoundary, facts: HostFacts, *, egress_available: bool) -> LayerPlan:
    """The microvm backend's layers: the guest kernel is the boundary; the accelerator line is
    added by the backend once it decided (microvm/accel.py)."""
    if facts.libseccomp_path is None:  # the guest's filter is compiled on the host
        raise UnsupportedHost("libseccomp is not installed", "apt-get install libseccomp2")
    if not facts.is_root:
        raise UnsupportedHost(
            "the microvm backend starts QEMU in a network namespace of its own, which needs root",
            "run contain as root, or use --backend process",
        )
    if boundary.hardening.landlock is LayerRequirement.REQUIRED:
        raise UnsupportedHost(
            "hardening.landlock is required but the microvm guest applies no Landlock",
            "set hardening.landlock: auto (the guest kernel, read-only images and uid 1000 bound the workload), "
            "or use --backend process",
        )
    cgroups, cgroup_line = _decide_cgroups(boundary.hardening.cgroups, facts)
    if boundary.allows_network and not egress_available:
        raise UnsupportedHost(
            "the boundary allows network destinations but the egress proxy is not available",
            "remove network.allow (the guest then has no network device at all)",
        )
    report = {
        "namespaces": "a guest kernel of its own (QEMU -M microvm); the VMM runs in an empty network namespace",
        "seccomp": "contain's filter (the same rule table, x86_64), installed by the guest agent before exec",
        "landlock": (
            "off by manifest" if boundary.hardening.landlock is LayerRequirement.OFF else "not in the guest (auto)"
        ),
        "cgroups": f"the VMM's host cgroup: {cgroup_line}; the workload's guest cgroup: by the guest agent",
        "network": (
            "egress proxy only (QEMU user network, restrict=on, one forward)"
            if boundary.allows_network
            else "none (no network device in the guest)"
        ),
    }
    return LayerPlan(seccomp=False, landlock=None, cgroups=cgroups, egress=boundary.allows_network, report=report)


def plan_rlimits(resources: PlainResources, *, cgroups: bool) -> tuple[Rlimit, ...]:
    """Per-process limits every workload starts with.

    CPU: soft at the budget (SIGXCPU), hard one second later (SIGKILL). NPROC is counted per user
    namespace on Linux >= 5.14, so it bounds the sandbox's own processes; with cgroups it sits
    slightly above ``pids.max`` so that the cgroup, whose refusals the host can count, acts first.
    Under runsc the host cgroup never counts the workload's tasks, so the container backend makes
    NPROC ``pids_max`` itself there (``container.bundle.plan_runtime_rlimits``).
    DATA stands in for the memory limit only when cgroups are off; AS is never set (it breaks
    runtimes that reserve large address ranges, such as V8 and the JVM).
    """
    cpu = max(1, math.ceil(resources.cpu_s))
    # With cgroups, pids.max is the limit that holds (and the one the host can observe and report);
    # NPROC stays a little above it as a backstop. Without cgroups NPROC is the limit.
    nproc = resources.pids_max + _NPROC_SLACK if cgroups else resources.pids_max
    limits = [
        Rlimit("CPU", cpu, cpu + 1),
        Rlimit("NPROC", nproc, nproc),
        Rlimit("FSIZE", resources.disk_bytes, resources.disk_bytes),
        Rlimit("NOFILE", resources.open_files_max, resources.open_files_max),
        Rlimit("CORE", 0, 0),
    ]
    if not cgroups:
        limits.append(Rlimit("DATA", resources.memory_bytes, resources.memory_bytes))
    return tuple(limits)


def plan_base_env(
    boundary: PlainBoundary,
    *,
    host_environ: Mapping[str, str],
    egress_env: Mapping[str, str],
) -> dict[str, str]:
    """The environment every run starts from, built from nothing.

    Order (later wins): safe defaults, egress proxy variables, the boundary's ``env``, credentials
    declared ``via: env`` (copied from the named host variable). Nothing else of the caller's
    environment is read.

    Raises:
        UnsupportedHost: a credential's source variable is not set on the host.
    """
    home = default_scratch_paths(boundary)[0]
    env = {"PATH": _BASE_PATH, "HOME": home, "LANG": "C.UTF-8", "TMPDIR": "/tmp", "USER": "sandbox"}
    env.update(egress_env)
    env.update(boundary.env)
    for credential in boundary.credentials:
        if credential.via is CredentialVia.ENV:
            assert credential.source is not None
            if credential.source not in host_environ:
                raise UnsupportedHost(
                    f"credential {credential.name} comes from host variable {credential.source}, which is not set",
                    f"export {credential.source}, or route {credential.name} through the broker",
                )
            env[credential.name] = host_environ[credential.source]
    return env
