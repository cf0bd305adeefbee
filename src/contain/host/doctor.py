"""`contain doctor`: what this host offers, each gap with its exact fix, and a verdict per backend.

Three steps, kept apart so the decisions can be tested without a host:

1. ``observe_host(facts)`` does the I/O ``probe_host`` deliberately skips because it is too slow
   or too intrusive for every sandbox start: it *tries* a user namespace (bwrap or unshare, as
   nobody when we are root, 5 s timeout), creates and removes a ``contain-doctor-<pid>`` cgroup
   in each hierarchy, runs the KVM test guests (``host/kvm.py``, 3 s hard timeout), asks QEMU
   and the OCI runtimes for their versions, and looks for the sandbox supervisor. It returns a
   frozen ``Observations`` value.
2. ``CHECKS`` is a table of small pure functions ``(facts, observations) -> Check``; each row
   gives one ``Check(name, status, detail, fix)``. ``VERDICTS`` is a second table of pure
   functions over the finished checks: one verdict per backend and layer.
3. ``render_text`` / ``render_json`` turn a ``Report`` into output; they do no I/O.

What the exit code means (``Report.exit_code``): 0 when the process backend works here (bwrap,
user namespaces, seccomp, libseccomp, the supervisor), 1 otherwise. The other verdicts are advice.

What doctor does not do: it changes nothing on the host except the cgroup directory it creates
and removes at once, and (only with ``--build-supervisor``, via ``contain.runtime.supervisor_build``) the
supervisor cache. It does not prove a sandbox is escape-proof: that is ``contain probe``. The verdicts
mirror the runtime's own decisions (``runtime/plan.py``, ``runtime/cgroups.py``); when those
change, the rows here must change with them (a unit test pins the controller table).
"""

from __future__ import annotations

import errno
import glob
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum

from contain.host.facts import CgroupMount, HostFacts, bwrap_version
from contain.host.kvm import KVM_API_VERSION, KVM_DEVICE, KvmGuestResult, KvmStatus
from contain.visible_text import for_terminal

__all__ = [
    "CGROUP_CONTROLLERS",
    "CHECKS",
    "PROCESS_NEEDS",
    "VERDICTS",
    "CgroupTrial",
    "Check",
    "CheckRow",
    "Observations",
    "Report",
    "Status",
    "SupervisorProbe",
    "ToolProbe",
    "Trial",
    "build_report",
    "cgroup_layout",
    "observe_host",
    "observe_supervisor",
    "render_json",
    "render_text",
    "run_checks",
]

# (controller, cgroup versions the runtime needs it on, why). Mirrors
# runtime/cgroups.py CONTROLLER_ROWS; tests/unit/host/test_doctor.py asserts they agree.
CGROUP_CONTROLLERS: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("memory", (1, 2), "memory limit incl. swap, peak memory, OOM kills"),
    ("pids", (1, 2), "pids_max; bounds fork bombs"),
    ("cpu", (1, 2), "cpu_cores as a CFS quota"),
    ("cpuacct", (1,), "CPU seconds used (v2: cpu.stat is core)"),
    ("freezer", (1,), "freeze before kill (v2: cgroup.freeze is core)"),
)
OCI_RUNTIMES: tuple[tuple[str, str], ...] = (
    ("runc", "apt-get install runc"),
    ("crun", "apt-get install crun"),
    ("runsc", "install gVisor: https://gvisor.dev/docs/user_guide/install/"),
)
QEMU = "qemu-system-x86_64"
QEMU_FIX = "apt-get install qemu-system-x86"
KERNEL_IMAGE_GLOBS = ("/boot/vmlinuz*", "/boot/vmlinux*")
CGROUP_ROOT_ENV = "CONTAIN_CGROUP_ROOT"  # same variable as runtime/cgroups.py ROOT_ENV
NOBODY_UID = 65534  # runtime/plan.py NOBODY_UID: the sandbox's host uid when contain is root
_COMPILERS = ("cc", "gcc", "clang")
_TRIAL_TIMEOUT_S = 5.0
_CACHE_HIT_S = 0.05  # a supervisor cache hit is a few stat() calls; slower means it compiled
_VERSION_TIMEOUT_S = 3.0
_USERNS_FIX = (
    "sysctl -w user.max_user_namespaces=15000; on Ubuntu also sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
)


class Status(StrEnum):
    """ok: usable; warn: absent or degraded but not needed by the process backend; fail: broken
    or missing where something needs it."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One row of the report."""

    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Trial:
    """The outcome of actually trying something (a command, an ioctl)."""

    ok: bool
    detail: str


@dataclass(frozen=True)
class ToolProbe:
    """An executable and the first line of its ``--version`` (None when absent or broken)."""

    name: str
    path: str | None
    version: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class CgroupTrial:
    """Where a controller is mounted and whether we could mkdir+rmdir a child under our cgroup.

    ``error`` is None when the child was created and removed; ``mount`` None when the
    controller is not mounted (or, on v2, not enabled at our level).
    """

    controller: str
    mount: CgroupMount | None
    directory: str | None
    error: str | None


@dataclass(frozen=True)
class SupervisorProbe:
    """The in-sandbox supervisor: built (path), buildable, or broken (error + fix)."""

    path: str | None
    error: str | None = None
    fix: str = ""
    compiler: str | None = None
    built_now: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class Observations:
    """Everything doctor learned beyond ``HostFacts``. Construct one by hand in tests."""

    userns_trial: Trial | None  # None: neither bwrap nor unshare to try with
    bwrap_version: str | None  # `bwrap --version`; None when absent or it failed
    seccomp_actions: tuple[str, ...]
    lsm: str | None  # /sys/kernel/security/lsm, e.g. "lockdown,capability,yama"
    cgroup_trials: tuple[CgroupTrial, ...]
    memsw: bool | None  # memory+swap accounting files exist; None without a memory controller
    swap_bytes: int
    cgroup_root_env: str | None
    kvm_present: bool
    kvm_api: Trial | None  # detail is the version number when ok
    kvm_guest: KvmGuestResult | None
    qemu: ToolProbe
    qemu_microvm: bool | None  # None: QEMU absent or `-machine help` failed
    kernel_images: tuple[str, ...]
    oci: tuple[ToolProbe, ...]
    supervisor: SupervisorProbe


@dataclass(frozen=True)
class CheckRow:
    """One check: its name, why doctor looks, and the pure function that judges it."""

    name: str
    why: str
    judge: Callable[[HostFacts, Observations], Check]


@dataclass(frozen=True)
class VerdictRow:
    """One backend or layer and the pure function that judges it from the checks."""

    name: str
    judge: Callable[[HostFacts, Mapping[str, Check]], Check]


@dataclass(frozen=True)
class Report:
    """Checks, then verdicts; the process backend's verdict decides the exit code."""

    checks: tuple[Check, ...]
    verdicts: tuple[Check, ...]

    @property
    def process_backend(self) -> Check:
        return next(v for v in self.verdicts if v.name == PROCESS_BACKEND)

    @property
    def exit_code(self) -> int:
        return 0 if self.process_backend.status is not Status.FAIL else 1


# --------------------------------------------------------------------------- checks (pure)


def cgroup_layout(mounts: Sequence[CgroupMount]) -> str:
    """ "v1", "v2", "hybrid" (v1 controllers plus a cgroup2 mount) or "none"."""
    versions = {m.version for m in mounts}
    if versions == {1, 2}:
        return "hybrid"
    if versions == {2}:
        return "v2"
    if versions == {1}:
        return "v1"
    return "none"


def _check_bwrap(facts: HostFacts, obs: Observations) -> Check:
    if facts.bwrap_path is None:
        return Check("bwrap", Status.FAIL, "bubblewrap is not installed", "apt-get install bubblewrap")
    if obs.bwrap_version is None:
        return Check(
            "bwrap",
            Status.FAIL,
            f"{facts.bwrap_path} --version failed",
            f"reinstall bubblewrap; check that {facts.bwrap_path} runs",
        )
    return Check("bwrap", Status.OK, f"{facts.bwrap_path}, version {obs.bwrap_version}")


def _check_userns(facts: HostFacts, obs: Observations) -> Check:
    name = "user-namespaces"
    if not facts.user_namespaces:
        return Check(name, Status.FAIL, "disabled by sysctl (user.max_user_namespaces)", _USERNS_FIX)
    if obs.userns_trial is None:
        return Check(
            name,
            Status.FAIL,
            "not tried: neither bwrap nor unshare is installed",
            "apt-get install bubblewrap",
        )
    if not obs.userns_trial.ok:
        return Check(name, Status.FAIL, f"creating one failed: {obs.userns_trial.detail}", _USERNS_FIX)
    return Check(name, Status.OK, f"work ({obs.userns_trial.detail})")


def _check_seccomp(facts: HostFacts, obs: Observations) -> Check:
    if not facts.seccomp:
        return Check(
            "seccomp",
            Status.FAIL,
            "the kernel has no seccomp support",
            "use a kernel built with CONFIG_SECCOMP_FILTER=y",
        )
    if obs.seccomp_actions and "errno" not in obs.seccomp_actions:
        return Check(
            "seccomp",
            Status.FAIL,
            f"the kernel lacks the errno action ({' '.join(obs.seccomp_actions)})",
            "use a kernel built with CONFIG_SECCOMP_FILTER=y",
        )
    actions = " ".join(obs.seccomp_actions) or "not listed"
    return Check("seccomp", Status.OK, f"kernel filter actions: {actions}")


def _check_libseccomp(facts: HostFacts, obs: Observations) -> Check:
    if facts.libseccomp_path is None:
        return Check("libseccomp", Status.FAIL, "libseccomp.so.2 not found", "apt-get install libseccomp2")
    return Check("libseccomp", Status.OK, facts.libseccomp_path)


def _check_landlock(facts: HostFacts, obs: Observations) -> Check:
    if facts.landlock_abi > 0:
        return Check("landlock", Status.OK, f"ABI {facts.landlock_abi}")
    lsms = [m for m in (obs.lsm or "").strip().split(",") if m and m != "landlock"]
    boot = f"lsm={','.join([*lsms, 'landlock'])}" if lsms else "lsm=...,landlock"
    return Check(
        "landlock",
        Status.WARN,
        "not available (ABI 0)",
        f"boot with {boot} (the kernel needs CONFIG_SECURITY_LANDLOCK=y)",
    )


def _check_cgroup_layout(facts: HostFacts, obs: Observations) -> Check:
    layout = cgroup_layout(facts.cgroups)
    if layout == "none":
        return Check(
            "cgroup-layout",
            Status.FAIL,
            "no cgroup filesystem is mounted",
            "mount cgroup2 at /sys/fs/cgroup (mount -t cgroup2 none /sys/fs/cgroup)",
        )
    unified = [m for m in facts.cgroups if m.version == 2]
    note = ""
    if layout == "hybrid":
        enabled = " ".join(unified[0].controllers) or "none"
        note = f"; cgroup2 at {unified[0].mountpoint} with controllers: {enabled}"
    return Check("cgroup-layout", Status.OK, f"{layout}{note}")


def _cgroup_row(controller: str, versions: tuple[int, ...], why: str) -> CheckRow:
    name = f"cgroup-{controller}"

    def judge(facts: HostFacts, obs: Observations) -> Check:
        trial = next((t for t in obs.cgroup_trials if t.controller == controller), None)
        if trial is None or trial.mount is None:
            if (
                versions == (1,)
                and any(m.version == 2 for m in facts.cgroups)
                and not any(m.version == 1 for m in facts.cgroups)
            ):
                return Check(name, Status.OK, "not needed on cgroup v2")
            return Check(
                name,
                Status.FAIL,
                f"not mounted or not enabled (needed for: {why})",
                f"mount it: mount -t cgroup -o {controller} cgroup /sys/fs/cgroup/{controller}; "
                f"on v2 enable it: echo +{controller} > <parent>/cgroup.subtree_control",
            )
        where = f"v{trial.mount.version} at {trial.directory}"
        if trial.error is not None:
            fix = f"run as root, or delegate a cgroup to uid {facts.uid} and set {CGROUP_ROOT_ENV} to it"
            return Check(name, Status.FAIL, f"{where}: cannot create a child ({trial.error})", fix)
        return Check(name, Status.OK, f"{where}: can create a child")

    return CheckRow(name, why, judge)


def _check_memsw(facts: HostFacts, obs: Observations) -> Check:
    name = "memory-swap-accounting"
    if obs.memsw is None:
        return Check(name, Status.WARN, "no memory controller to account with")
    if obs.memsw:
        return Check(name, Status.OK, "memory+swap is accounted (memory.memsw.* / memory.swap.max)")
    if obs.swap_bytes == 0:
        return Check(
            name,
            Status.OK,
            "not accounted, but the host has no swap: the RAM limit already bounds memory+swap",
        )
    return Check(
        name,
        Status.FAIL,
        f"not accounted and the host has {obs.swap_bytes} bytes of swap: "
        "memory limits cannot bound swap, so sandboxes with cgroups are refused",
        "boot with swapaccount=1 (v1) or use cgroup v2, or swapoff -a",
    )


def _check_root(facts: HostFacts, obs: Observations) -> Check:
    if facts.is_root:
        return Check(
            "root",
            Status.OK,
            "running as root: each sandbox runs as a host uid leased for it alone (never root), owning its "
            f"binds through idmapped mounts; uid {NOBODY_UID} (nobody) only where a write bind cannot be idmapped",
        )
    return Check("root", Status.OK, f"running as uid {facts.uid}: sandboxes run as this uid")


def _check_kvm_device(facts: HostFacts, obs: Observations) -> Check:
    if not obs.kvm_present:
        return Check(
            "kvm-device",
            Status.WARN,
            f"{KVM_DEVICE} does not exist",
            "enable virtualisation in the firmware and modprobe kvm_intel (or kvm_amd); "
            "or use software emulation (QEMU -accel tcg)",
        )
    return Check("kvm-device", Status.OK, f"{KVM_DEVICE} exists")


def _check_kvm_api(facts: HostFacts, obs: Observations) -> Check:
    if obs.kvm_api is None:
        return Check("kvm-api", Status.WARN, f"not asked: no {KVM_DEVICE}")
    if not obs.kvm_api.ok:
        fix = (
            f"add this user to the group owning {KVM_DEVICE}"
            if obs.kvm_api.detail.startswith("EACCES")
            else "use QEMU -accel tcg"
        )
        return Check("kvm-api", Status.WARN, f"KVM_GET_API_VERSION failed: {obs.kvm_api.detail}", fix)
    if obs.kvm_api.detail != str(KVM_API_VERSION):
        return Check(
            "kvm-api",
            Status.FAIL,
            f"KVM_GET_API_VERSION is {obs.kvm_api.detail}, expected {KVM_API_VERSION}",
            "use QEMU -accel tcg",
        )
    return Check("kvm-api", Status.OK, f"KVM_GET_API_VERSION = {KVM_API_VERSION}")


def _check_kvm_guest(facts: HostFacts, obs: Observations) -> Check:
    guest = obs.kvm_guest
    if guest is None:
        return Check(
            "kvm-guest",
            Status.WARN,
            f"not tried: no {KVM_DEVICE}",
            "use software emulation (QEMU -accel tcg)",
        )
    if guest.status is KvmStatus.RUNS:
        return Check("kvm-guest", Status.OK, f"{guest.verdict}: {guest.detail}")
    if guest.status is KvmStatus.HANGS:
        return Check(
            "kvm-guest",
            Status.FAIL,
            f"hangs (timed out after {guest.timeout_s:g} s)",
            "use software emulation (QEMU -accel tcg)",
        )
    return Check("kvm-guest", Status.WARN, guest.verdict, "use software emulation (QEMU -accel tcg)")


def _check_qemu(facts: HostFacts, obs: Observations) -> Check:
    if obs.qemu.path is None:
        return Check("qemu", Status.WARN, f"{QEMU} is not installed", QEMU_FIX)
    if obs.qemu.version is None:
        return Check("qemu", Status.WARN, f"{obs.qemu.path} --version failed: {obs.qemu.error}", QEMU_FIX)
    if obs.qemu_microvm is False:
        return Check(
            "qemu",
            Status.WARN,
            f"{obs.qemu.version}; no microvm machine type",
            "install QEMU 4.2 or later (apt-get install qemu-system-x86)",
        )
    return Check("qemu", Status.OK, f"{obs.qemu.version}; supports -machine microvm")


def _oci_row(runtime: str, install: str) -> CheckRow:
    def judge(facts: HostFacts, obs: Observations) -> Check:
        probe = next((p for p in obs.oci if p.name == runtime), ToolProbe(runtime, None))
        if probe.path is None:
            return Check(runtime, Status.WARN, "not installed", install)
        if probe.version is None:
            return Check(runtime, Status.WARN, f"{probe.path} --version failed: {probe.error}", install)
        if runtime == "crun" and cgroup_layout(facts.cgroups) == "hybrid":
            return Check(
                runtime,
                Status.WARN,
                f"{probe.version}; crun refuses hybrid cgroup layouts like this host's",
                "use runc, or boot with systemd.unified_cgroup_hierarchy=1 (pure cgroup v2)",
            )
        return Check(runtime, Status.OK, f"{probe.path}, {probe.version}")

    return CheckRow(runtime, "OCI runtime for the container backend", judge)


def _check_supervisor(facts: HostFacts, obs: Observations) -> Check:
    supervisor = obs.supervisor
    if supervisor.path is not None:
        done = f" (built now in {supervisor.seconds:.1f} s)" if supervisor.built_now else ""
        return Check("supervisor", Status.OK, f"{supervisor.path}{done}")
    if supervisor.error is not None:
        return Check("supervisor", Status.FAIL, supervisor.error, supervisor.fix)
    if supervisor.compiler is None:
        return Check(
            "supervisor",
            Status.FAIL,
            "not built, and no C compiler to build it",
            "apt-get install gcc libc6-dev, then run `contain doctor --build-supervisor`",
        )
    return Check(
        "supervisor",
        Status.WARN,
        f"not built yet; the first sandbox builds it with {supervisor.compiler}",
        "run `contain doctor --build-supervisor`",
    )


def _check_kernel_image(facts: HostFacts, obs: Observations) -> Check:
    if not obs.kernel_images:
        return Check(
            "kernel-image",
            Status.WARN,
            "no guest kernel in /boot",
            "apt-get install linux-image-amd64 (or point the microvm backend at a vmlinux)",
        )
    return Check("kernel-image", Status.OK, ", ".join(obs.kernel_images))


CHECKS: tuple[CheckRow, ...] = (
    CheckRow("bwrap", "the process backend is bubblewrap", _check_bwrap),
    CheckRow(
        "user-namespaces",
        "bwrap builds the sandbox in an unprivileged user namespace",
        _check_userns,
    ),
    CheckRow("seccomp", "the syscall filter needs kernel seccomp filters", _check_seccomp),
    CheckRow("libseccomp", "the filter is compiled with libseccomp", _check_libseccomp),
    CheckRow("landlock", "an extra filesystem layer inside the sandbox", _check_landlock),
    CheckRow("cgroup-layout", "where cgroup controllers live", _check_cgroup_layout),
    *(_cgroup_row(c, versions, why) for c, versions, why in CGROUP_CONTROLLERS),
    CheckRow("memory-swap-accounting", "memory limits must bound swap too", _check_memsw),
    CheckRow("root", "as root the sandbox runs as nobody; cgroups need root", _check_root),
    CheckRow("kvm-device", "the microvm backend wants KVM", _check_kvm_device),
    CheckRow("kvm-api", "a KVM that answers the stable API", _check_kvm_api),
    CheckRow("kvm-guest", "a KVM that actually runs a guest", _check_kvm_guest),
    CheckRow("qemu", "the microvm backend's VMM", _check_qemu),
    CheckRow("kernel-image", "the microvm backend boots a guest kernel", _check_kernel_image),
    *(_oci_row(name, install) for name, install in OCI_RUNTIMES),
    CheckRow("supervisor", "pid 1 of every process sandbox", _check_supervisor),
)


# ------------------------------------------------------------------------- verdicts (pure)

PROCESS_BACKEND = "process backend"
PROCESS_NEEDS = ("bwrap", "user-namespaces", "seccomp", "libseccomp", "supervisor")


def _gaps(checks: Mapping[str, Check], names: Sequence[str]) -> list[Check]:
    return [checks[n] for n in names if checks[n].status is not Status.OK]


def _fixes(gaps: Sequence[Check]) -> str:
    return "; ".join(f"{g.name}: {g.fix}" for g in gaps if g.fix)


def _verdict_process(facts: HostFacts, checks: Mapping[str, Check]) -> Check:
    gaps = _gaps(checks, PROCESS_NEEDS)
    failed = [g for g in gaps if g.status is Status.FAIL]
    if failed:
        return Check(
            PROCESS_BACKEND,
            Status.FAIL,
            "does not work: " + ", ".join(g.name for g in failed),
            _fixes(failed),
        )
    if gaps:
        return Check(
            PROCESS_BACKEND,
            Status.WARN,
            "works, with warnings: " + ", ".join(g.name for g in gaps),
            _fixes(gaps),
        )
    return Check(PROCESS_BACKEND, Status.OK, "works (bwrap + user namespaces + seccomp + supervisor)")


def _verdict_landlock(facts: HostFacts, checks: Mapping[str, Check]) -> Check:
    if facts.landlock_abi > 0:
        return Check(
            "landlock",
            Status.OK,
            f"hardening.landlock auto and required both apply it (ABI {facts.landlock_abi})",
        )
    return Check(
        "landlock",
        Status.WARN,
        "auto: sandboxes run without Landlock; required: refused",
        checks["landlock"].fix,
    )


def _verdict_cgroups(facts: HostFacts, checks: Mapping[str, Check]) -> Check:
    names = [f"cgroup-{c}" for c, _, _ in CGROUP_CONTROLLERS]
    gaps = _gaps(checks, [*names, "memory-swap-accounting"])
    off = "hardening.cgroups: required (the default) is refused; set hardening.cgroups: off for "
    off += "rlimits only"
    if not facts.is_root:
        return Check(
            "cgroups",
            Status.FAIL,
            f"contain applies cgroup limits only as root; {off}",
            "run contain as root",
        )
    if gaps:
        return Check(
            "cgroups",
            Status.FAIL,
            "missing: " + ", ".join(g.name for g in gaps) + f"; {off}",
            _fixes(gaps),
        )
    where = "v1" if cgroup_layout(facts.cgroups) in ("v1", "hybrid") else "v2"
    return Check("cgroups", Status.OK, f"memory, pids and cpu limits on cgroup {where}")


def _verdict_container(facts: HostFacts, checks: Mapping[str, Check]) -> Check:
    found = [name for name, _ in OCI_RUNTIMES if checks[name].status is Status.OK]
    have = f"OCI runtimes usable here: {', '.join(found)}" if found else "no usable OCI runtime"
    return Check(
        "container backend",
        Status.WARN,
        f"not implemented in contain yet; {have}",
        "" if found else "apt-get install runc",
    )


def _verdict_microvm(facts: HostFacts, checks: Mapping[str, Check]) -> Check:
    accel = "KVM" if checks["kvm-guest"].status is Status.OK else "TCG (software emulation)"
    qemu = checks["qemu"]
    kernel = checks.get("kernel-image")
    parts = [f"QEMU: {'ok' if qemu.status is Status.OK else qemu.detail}", f"accelerator: {accel}"]
    fixes = [f"qemu: {qemu.fix}"] if qemu.status is not Status.OK else []
    if kernel is not None:
        parts.append(f"kernel: {kernel.detail}")
        if kernel.status is not Status.OK:
            fixes.append(f"kernel-image: {kernel.fix}")
    return Check(
        "microvm backend",
        Status.WARN,
        "not implemented in contain yet; " + "; ".join(parts),
        "; ".join(fixes),
    )


VERDICTS: tuple[VerdictRow, ...] = (
    VerdictRow(PROCESS_BACKEND, _verdict_process),
    VerdictRow("landlock", _verdict_landlock),
    VerdictRow("cgroups", _verdict_cgroups),
    VerdictRow("container backend", _verdict_container),
    VerdictRow("microvm backend", _verdict_microvm),
)


def run_checks(facts: HostFacts, obs: Observations) -> tuple[Check, ...]:
    """Every row of ``CHECKS``, in order."""
    return tuple(row.judge(facts, obs) for row in CHECKS)


def build_report(facts: HostFacts, obs: Observations) -> Report:
    """Checks, then a verdict per backend and layer. Pure."""
    checks = run_checks(facts, obs)
    by_name = {c.name: c for c in checks}
    return Report(checks, tuple(row.judge(facts, by_name) for row in VERDICTS))


# ------------------------------------------------------------------------ rendering (pure)


def render_text(report: Report) -> str:
    """The human report: one line per check (a ``fix:`` line under each gap), then verdicts.

    Details quote what host tools answered, so each field goes through ``for_terminal``.
    """
    lines: list[str] = []
    for title, rows in (("host", report.checks), ("backends and layers", report.verdicts)):
        lines.append(title)
        width = max(len(r.name) for r in rows) + 2
        for row in rows:
            lines.append(f"  {row.status.value:<5} {for_terminal(row.name):<{width}}{for_terminal(row.detail)}")
            if row.fix and row.status is not Status.OK:
                lines.append(f"  {'':<5} {'':<{width}}fix: {for_terminal(row.fix)}")
    works = "works" if report.exit_code == 0 else "does NOT work"
    lines.append(f"result: the process backend {works} on this host (exit {report.exit_code})")
    return "\n".join(lines) + "\n"


def report_to_dict(report: Report) -> dict[str, object]:
    """The JSON shape: checks, verdicts, process_backend status and the exit code."""
    return {
        "checks": [asdict(c) for c in report.checks],
        "verdicts": [asdict(v) for v in report.verdicts],
        "process_backend": report.process_backend.status.value,
        "exit_code": report.exit_code,
    }


def render_json(report: Report) -> str:
    """Exactly one JSON object, newline-terminated."""
    return json.dumps(report_to_dict(report), sort_keys=False) + "\n"


# ------------------------------------------------------------------------------- I/O probes


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _errno_text(exc: OSError) -> str:
    return f"{errno.errorcode.get(exc.errno or 0, str(exc.errno))} ({exc.strerror})"


def _run(argv: Sequence[str], *, timeout_s: float, as_nobody: bool = False) -> Trial:
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd="/",  # nobody may not be able to enter the caller's directory
            user=NOBODY_UID if as_nobody else None,
            group=NOBODY_UID if as_nobody else None,
            extra_groups=[] if as_nobody else None,
        )
    except subprocess.TimeoutExpired:
        return Trial(False, f"timed out after {timeout_s:g} s")
    except OSError as exc:
        return Trial(False, _errno_text(exc))
    out = (done.stdout.strip() or done.stderr.strip()).splitlines()
    first = out[0] if out else ""
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [first])[-1]
        return Trial(False, f"exit status {done.returncode}: {tail}")
    return Trial(True, first)


def try_user_namespace(facts: HostFacts) -> Trial | None:
    """Create a user namespace for real: bwrap (or unshare) running /usr/bin/true.

    As root the trial runs as nobody, like the sandbox does, so it tests the *unprivileged* path.
    """
    as_nobody = facts.is_root
    who = f"as uid {NOBODY_UID}" if as_nobody else f"as uid {facts.uid}"
    if facts.bwrap_path is not None:
        argv = [
            facts.bwrap_path,
            "--unshare-all",
            "--unshare-user",
            "--die-with-parent",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--symlink",
            "usr/bin",
            "/bin",
            "/usr/bin/true",
        ]
        tool = "bwrap --unshare-all"
    elif (unshare := shutil.which("unshare")) is not None:
        argv = [unshare, "--user", "--map-root-user", "--", "/usr/bin/true"]
        tool = "unshare --user"
    else:
        return None
    trial = _run(argv, timeout_s=_TRIAL_TIMEOUT_S, as_nobody=as_nobody)
    return Trial(trial.ok, f"{tool} {who}" if trial.ok else f"{tool} {who}: {trial.detail}")


def try_cgroup_children(facts: HostFacts, *, root_override: str | None, pid: int) -> tuple[CgroupTrial, ...]:
    """mkdir+rmdir ``contain-doctor-<pid>`` under our cgroup of each hierarchy (once per mount)."""
    done: dict[str, str | None] = {}
    trials = []
    for controller, _, _ in CGROUP_CONTROLLERS:
        mount = facts.cgroup_for(controller)
        if mount is None:
            trials.append(CgroupTrial(controller, None, None, None))
            continue
        base = root_override or mount.own_path
        directory = os.path.join(mount.mountpoint, base.lstrip("/")).rstrip("/")
        if directory not in done:
            child = os.path.join(directory, f"contain-doctor-{pid}")
            try:
                os.mkdir(child)
                os.rmdir(child)
                done[directory] = None
            except OSError as exc:
                done[directory] = _errno_text(exc)
        trials.append(CgroupTrial(controller, mount, directory, done[directory]))
    return tuple(trials)


def _memsw(trials: Sequence[CgroupTrial]) -> bool | None:
    memory = next((t for t in trials if t.controller == "memory"), None)
    if memory is None or memory.mount is None or memory.directory is None:
        return None
    name = "memory.memsw.limit_in_bytes" if memory.mount.version == 1 else "memory.swap.max"
    # The v2 root cgroup has no memory.swap.max, so look in our own cgroup first, then the root.
    places = (memory.directory, memory.mount.mountpoint)
    return any(os.path.exists(os.path.join(d, name)) for d in places)


def _swap_bytes() -> int:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def probe_tool(name: str, *args: str) -> ToolProbe:
    """``name --version`` (or ``args``): path and first line of output."""
    path = shutil.which(name)
    if path is None:
        return ToolProbe(name, None)
    trial = _run([path, *(args or ("--version",))], timeout_s=_VERSION_TIMEOUT_S)
    if not trial.ok:
        return ToolProbe(name, path, None, trial.detail)
    return ToolProbe(name, path, trial.detail or "(no version output)")


def _qemu_microvm(qemu: ToolProbe) -> bool | None:
    if qemu.path is None or qemu.version is None:
        return None
    try:
        done = subprocess.run(
            [qemu.path, "-machine", "help"],
            capture_output=True,
            text=True,
            timeout=_VERSION_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return any(line.split()[:1] == ["microvm"] for line in done.stdout.splitlines())


def _kvm_api() -> Trial:
    from contain.host.kvm import kvm_api_version

    try:
        return Trial(True, str(kvm_api_version()))
    except OSError as exc:
        return Trial(False, _errno_text(exc))


def _compiler() -> str | None:
    return next((p for c in _COMPILERS if (p := shutil.which(c)) is not None), None)


def observe_supervisor(*, build: bool) -> SupervisorProbe:
    """Find the sandbox supervisor; with ``build`` compile it when missing.

    Without ``build`` nothing is written: an existing binary for the current source is validated
    (owner, mode) through ``ensure_supervisor_binary``, a missing one is reported as not built.
    """
    try:
        from contain.runtime import supervisor_build
    except ImportError as exc:
        return SupervisorProbe(
            None,
            f"not built: contain.runtime.supervisor_build unavailable ({exc})",
            "reinstall contain (pip install -e .)",
        )
    from contain.errors import ContainError

    compiler = _compiler()
    # supervisor_build names the binary by a digest it keeps private (no public "expected path" yet);
    # look it up the same way. If that name ever goes away, fall back to ensure_supervisor_binary(),
    # which builds when missing, exactly as the next sandbox start would.
    digest = getattr(supervisor_build, "_build_digest", None)
    expected = (
        supervisor_build.supervisor_cache_dir().absolute() / f"contain-supervisor-{digest()}"
        if callable(digest)
        else None
    )
    existed = expected is not None and os.path.lexists(expected)
    if not build and expected is not None and not existed:
        return SupervisorProbe(None, compiler=compiler)
    started = time.monotonic()
    try:
        path = supervisor_build.ensure_supervisor_binary()
    except ContainError as exc:
        return SupervisorProbe(None, exc.cause, exc.fix, compiler)
    seconds = time.monotonic() - started
    built_now = not existed if expected is not None else seconds > _CACHE_HIT_S
    return SupervisorProbe(str(path), compiler=compiler, built_now=built_now, seconds=seconds)


def observe_host(facts: HostFacts, *, build_supervisor: bool = False) -> Observations:
    """Do the slow, real tries ``probe_host`` skips. Takes about a second on a healthy host."""
    from contain.host.kvm import check_kvm_guest

    root_override = os.environ.get(CGROUP_ROOT_ENV) or None
    trials = try_cgroup_children(facts, root_override=root_override, pid=os.getpid())
    kvm_present = os.path.exists(KVM_DEVICE)
    qemu = probe_tool(QEMU)
    return Observations(
        userns_trial=try_user_namespace(facts),
        bwrap_version=bwrap_version(facts.bwrap_path),
        seccomp_actions=tuple((_read("/proc/sys/kernel/seccomp/actions_avail") or "").split()),
        lsm=_read("/sys/kernel/security/lsm"),
        cgroup_trials=trials,
        memsw=_memsw(trials),
        swap_bytes=_swap_bytes(),
        cgroup_root_env=root_override,
        kvm_present=kvm_present,
        kvm_api=_kvm_api() if kvm_present else None,
        kvm_guest=check_kvm_guest(arch=facts.arch) if kvm_present else None,
        qemu=qemu,
        qemu_microvm=_qemu_microvm(qemu),
        kernel_images=tuple(sorted(p for g in KERNEL_IMAGE_GLOBS for p in glob.glob(g))),
        oci=tuple(probe_tool(name) for name, _ in OCI_RUNTIMES),
        supervisor=observe_supervisor(build=build_supervisor),
    )
