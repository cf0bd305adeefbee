"""`contain doctor`: what this host offers, each gap with its exact fix, and a verdict per backend.

Three steps, kept apart so the decisions can be tested without a host:

1. Observing: ``host/observe.py`` (``observe_host``) does the I/O ``detect_host`` deliberately
   skips (trying a user namespace, creating a cgroup child, running KVM guests, asking tools for
   their versions) and returns a frozen ``Observations`` value.
2. Judging, here: ``CHECKS`` is a table of small pure functions ``(facts, observations) ->
   Check``; each row gives one ``Check(name, status, detail, fix)``. ``VERDICTS`` is a second
   table of pure functions over the finished checks: one verdict per backend and layer.
3. Rendering, here: ``render_text`` / ``render_json`` turn a ``Report`` into output; no I/O.

What the exit code means (``Report.exit_code``): 0 when the process backend works here (bwrap,
user namespaces, seccomp, libseccomp, the supervisor), 1 otherwise. The other verdicts are advice.

Judging uses the runtime's own tables and decisions, never copies of them: the cgroup rows are
``runtime/cgroup_plan.CONTROLLER_ROWS``, the cgroups verdict is ``plan_cgroup_hierarchies`` (the
function ``plan_layers`` decides with), the sandbox's uid is ``runtime/plan.NOBODY_UID``. The
other verdicts restate ``plan_layers``' refusals (bwrap, user namespaces, seccomp, libseccomp,
Landlock); a unit test checks the cgroups verdict against ``plan_layers`` over a truth table.
The container backend gets one verdict per OCI runtime (``container:runc``, ``container:runsc``),
judged in ``host/doctor_runtimes.py`` from the backend's own probe, flag table and
``plan_layers`` itself.

What doctor does not do: decide anything for a sandbox, or prove a sandbox escape-proof (that
is ``contain probe``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum

from contain.errors import UnsupportedHost
from contain.host.doctor_runtimes import RuntimeVerdict, judge_runtime
from contain.host.facts import CGROUP_ROOT_ENV, CgroupMount, HostFacts
from contain.host.kvm import KVM_API_VERSION, KVM_DEVICE
from contain.host.observe import OCI_RUNTIMES, QEMU, DetectedTool, Observations
from contain.runtime.cgroup_plan import CONTROLLER_ROWS, ControllerRow, plan_cgroup_hierarchies
from contain.runtime.plan import NOBODY_UID
from contain.visible_text import for_terminal

__all__ = [
    "CHECKS",
    "PROCESS_NEEDS",
    "VERDICTS",
    "Check",
    "CheckRow",
    "Report",
    "Status",
    "build_report",
    "cgroup_layout",
    "render_json",
    "render_text",
    "run_checks",
]

QEMU_FIX = "apt-get install qemu-system-x86"
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
    verdicts: tuple[Check, ...]  # ends with one verdict per OCI runtime (``runtimes``, as Checks)
    runtimes: tuple[RuntimeVerdict, ...] = ()

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


def _cgroup_row(row: ControllerRow) -> CheckRow:
    controller, versions, why = row.controller, row.versions, row.why
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
    """OK only when the real guest kernel booted under KVM (runtime/microvm/accel.py).

    The real-mode test guests (``obs.kvm_guest``) are reported beside it but never make this OK:
    on hosts where QEMU aborts or the kernel hangs under KVM, they still reach HLT.
    """
    tcg = "microvm sandboxes use software emulation (TCG); fix KVM on this host to use it"
    boot = obs.kvm_boot
    if not obs.kvm_present:
        return Check("kvm-guest", Status.WARN, f"not tried: no {KVM_DEVICE}", tcg)
    if boot is None:
        return Check("kvm-guest", Status.WARN, f"not tried: {obs.kvm_boot_skipped or 'no verdict'}", tcg)
    tiny = f"; the real-mode test guest: {obs.kvm_guest.verdict}" if obs.kvm_guest is not None else ""
    if boot.boots:
        return Check("kvm-guest", Status.OK, f"the guest kernel boots under KVM: {boot.detail}{tiny}")
    return Check("kvm-guest", Status.WARN, f"the guest kernel does not boot under KVM: {boot.detail}{tiny}", tcg)


def _unusable_tool(name: str, tool: DetectedTool, *, missing: str, fix: str) -> Check | None:
    """WARN when ``tool`` is not installed (``missing``) or its ``--version`` failed; None when it answered."""
    if tool.path is None:
        return Check(name, Status.WARN, missing, fix)
    if tool.version is None:
        return Check(name, Status.WARN, f"{tool.path} --version failed: {tool.error}", fix)
    return None


def _check_qemu(facts: HostFacts, obs: Observations) -> Check:
    if (gap := _unusable_tool("qemu", obs.qemu, missing=f"{QEMU} is not installed", fix=QEMU_FIX)) is not None:
        return gap
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
        tool = next((p for p in obs.oci if p.name == runtime), DetectedTool(runtime, None))
        if (gap := _unusable_tool(runtime, tool, missing="not installed", fix=install)) is not None:
            return gap
        if runtime == "crun" and cgroup_layout(facts.cgroups) == "hybrid":
            return Check(
                runtime,
                Status.WARN,
                f"{tool.version}; crun refuses hybrid cgroup layouts like this host's",
                "use runc, or boot with systemd.unified_cgroup_hierarchy=1 (pure cgroup v2)",
            )
        return Check(runtime, Status.OK, f"{tool.path}, {tool.version}")

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


def _check_firecracker(facts: HostFacts, obs: Observations) -> Check:
    # Issue 14: no untested VMM path ships. Firecracker is not installable on the host this was
    # built on, so contain has no Firecracker path at all; doctor says so, found or not.
    found = obs.firecracker.path if obs.firecracker is not None else None
    where = f"{found} is on PATH but is not used" if found else "not installed"
    return Check(
        "firecracker",
        Status.WARN,
        f"{where}: contain's microvm backend drives QEMU only (no tested Firecracker path in this version)",
        "use runtime.backend: microvm, which runs the same guest under QEMU -M microvm",
    )


def _check_guest_image(facts: HostFacts, obs: Observations) -> Check:
    if obs.guest_image is None:
        return Check(
            "guest-image",
            Status.WARN,
            f"not built: {obs.guest_image_error or 'unknown reason'}",
            "run `contain doctor --build-guest` (needs qemu-system-x86, busybox-static, squashfs-tools and "
            "a linux-image-*-cloud-amd64 package, which is never installed on the host)",
        )
    return Check("guest-image", Status.OK, obs.guest_image)


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
    *(_cgroup_row(row) for row in CONTROLLER_ROWS),
    CheckRow("memory-swap-accounting", "memory limits must bound swap too", _check_memsw),
    CheckRow("root", "as root each sandbox gets its own host uid; cgroups need root or delegation", _check_root),
    CheckRow("kvm-device", "the microvm backend wants KVM", _check_kvm_device),
    CheckRow("kvm-api", "a KVM that answers the stable API", _check_kvm_api),
    CheckRow("kvm-guest", "a KVM that actually runs a guest", _check_kvm_guest),
    CheckRow("qemu", "the microvm backend's VMM", _check_qemu),
    CheckRow("guest-image", "the microvm backend boots a guest kernel, initramfs and userland", _check_guest_image),
    CheckRow("firecracker", "a second VMM contain does not drive (QEMU only)", _check_firecracker),
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
    names = [f"cgroup-{row.controller}" for row in CONTROLLER_ROWS]
    gaps = _gaps(checks, [*names, "memory-swap-accounting"])
    off = "hardening.cgroups: required (the default) is refused; set hardening.cgroups: off for "
    off += "rlimits only"
    try:  # the runtime's own decision (plan_layers calls the same function)
        hierarchies = plan_cgroup_hierarchies(facts)
    except UnsupportedHost as exc:
        return Check("cgroups", Status.FAIL, f"{exc.cause}; {off}", exc.fix)
    if gaps:
        return Check(
            "cgroups",
            Status.FAIL,
            "missing: " + ", ".join(g.name for g in gaps) + f"; {off}",
            _fixes(gaps),
        )
    return Check("cgroups", Status.OK, f"memory, pids and cpu limits on cgroup v{hierarchies[0].version}")


def _verdict_microvm(facts: HostFacts, checks: Mapping[str, Check]) -> Check:
    accel = "KVM" if checks["kvm-guest"].status is Status.OK else "TCG (software emulation)"
    needed = [checks["qemu"], checks["guest-image"]]
    missing = [c for c in needed if c.status is not Status.OK]
    if not facts.is_root:
        return Check("microvm backend", Status.WARN, "needs root (QEMU runs in a network namespace of its own)", "")
    if missing:
        return Check(
            "microvm backend",
            Status.WARN,
            "; ".join(f"{c.name}: {c.detail}" for c in missing) + f"; accelerator: {accel}",
            "; ".join(f"{c.name}: {c.fix}" for c in missing),
        )
    return Check("microvm backend", Status.OK, f"works (QEMU -M microvm; accelerator: {accel})")


VERDICTS: tuple[VerdictRow, ...] = (
    VerdictRow(PROCESS_BACKEND, _verdict_process),
    VerdictRow("landlock", _verdict_landlock),
    VerdictRow("cgroups", _verdict_cgroups),
    VerdictRow("microvm backend", _verdict_microvm),
)


def run_checks(facts: HostFacts, obs: Observations) -> tuple[Check, ...]:
    """Every row of ``CHECKS``, in order."""
    return tuple(row.judge(facts, obs) for row in CHECKS)


def build_report(facts: HostFacts, obs: Observations) -> Report:
    """Checks, then a verdict per backend and layer, then one per OCI runtime. Pure."""
    checks = run_checks(facts, obs)
    by_name = {c.name: c for c in checks}
    runtimes = tuple(judge_runtime(facts, observed) for observed in obs.runtimes)
    verdicts = tuple(row.judge(facts, by_name) for row in VERDICTS)
    as_checks = tuple(Check(r.name, Status(r.status), r.detail, r.fix) for r in runtimes)
    return Report(checks, verdicts + as_checks, runtimes)


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
    """The JSON shape: checks, verdicts, per-runtime details, process_backend status and the exit code."""
    return {
        "checks": [asdict(c) for c in report.checks],
        "verdicts": [asdict(v) for v in report.verdicts],
        "runtimes": [r.to_dict() for r in report.runtimes],
        "process_backend": report.process_backend.status.value,
        "exit_code": report.exit_code,
    }


def render_json(report: Report) -> str:
    """Exactly one JSON object, newline-terminated."""
    return json.dumps(report_to_dict(report), sort_keys=False) + "\n"
