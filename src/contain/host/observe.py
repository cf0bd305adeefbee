"""What ``contain doctor`` observes on this host: the slow, real tries ``detect_host`` skips.

``detect_host`` (``host/facts.py``) runs on every sandbox start, so it only reads /proc and asks
one syscall. Doctor goes further, and this module is where it touches the host:

- it *tries* a user namespace (bwrap or unshare running /usr/bin/true, as nobody when we are
  root, 5 s timeout);
- it creates and removes a ``contain-doctor-<pid>`` cgroup in each hierarchy, in the directory the
  runtime's own plan puts its ``contain`` parent (``runtime/cgroup_plan.plan_base_dir``);
- it runs the KVM test guests (``host/kvm.py``, 3 s hard timeout), builds (or finds, cached) the
  microVM guest and boots its real kernel under KVM with a watchdog
  (``runtime/microvm/accel.check_kvm_boot``, cached per kernel, initramfs, QEMU version and host
  kernel), and asks QEMU and the OCI runtimes for their versions (3 s timeout each);
- it looks for the sandbox's supervisor binary (with ``build``, compiles it into its cache);
- for each OCI runtime the container backend drives (``backend_names.CONTAINER_RUNTIMES``) it
  asks the backend's own probe (``oci_runtime.probe_runtime``: path, version, runsc's platforms
  from ``runsc help platforms``) and lists the global flags the binary knows (``runc --help``,
  ``runsc flags``), so doctor can hold them against the flags the backend passes.

Everything it learns is returned as one frozen ``Observations`` value; judging it is pure and
lives in ``host/doctor.py``. What this module does not do: decide anything, or change the host
beyond the cgroup directory it removes at once and (only when asked) the supervisor cache.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from contain.host.facts import CgroupMount, HostFacts, bwrap_version, read_host_file
from contain.host.kvm import KVM_DEVICE, KvmGuestResult
from contain.runtime.backend_names import CONTAINER_RUNTIMES, RuntimeFacts
from contain.runtime.cgroup_plan import CONTROLLER_ROWS, plan_base_dir
from contain.runtime.microvm.accel import KvmBootVerdict
from contain.runtime.plan import NOBODY_UID

__all__ = [
    "OCI_RUNTIMES",
    "QEMU",
    "CgroupTrial",
    "DetectedSupervisor",
    "DetectedTool",
    "Observations",
    "ObservedRuntime",
    "Trial",
    "detect_tool",
    "observe_host",
    "observe_oci_runtime",
    "observe_supervisor",
    "parse_flag_names",
    "try_cgroup_children",
    "try_user_namespace",
]

# (executable, how to install it): the OCI runtimes doctor looks for.
OCI_RUNTIMES: tuple[tuple[str, str], ...] = (
    ("runc", "apt-get install runc"),
    ("crun", "apt-get install crun"),
    ("runsc", "install gVisor: https://gvisor.dev/docs/user_guide/install/"),
)
QEMU = "qemu-system-x86_64"
_COMPILERS = ("cc", "gcc", "clang")
_TRIAL_TIMEOUT_S = 5.0
_VERSION_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Trial:
    """The outcome of actually trying something (a command, an ioctl)."""

    ok: bool
    detail: str


@dataclass(frozen=True)
class DetectedTool:
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
class DetectedSupervisor:
    """The in-sandbox supervisor: built (path), buildable, or broken (error + fix)."""

    path: str | None
    error: str | None = None
    fix: str = ""
    compiler: str | None = None
    built_now: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class Observations:
    """Everything doctor observed beyond ``HostFacts``. Construct one by hand in tests."""

    userns_trial: Trial | None  # None: neither bwrap nor unshare to try with
    bwrap_version: str | None  # `bwrap --version`; None when absent or it failed
    seccomp_actions: tuple[str, ...]
    lsm: str | None  # /sys/kernel/security/lsm, e.g. "lockdown,capability,yama"
    cgroup_trials: tuple[CgroupTrial, ...]
    memsw: bool | None  # memory+swap accounting files exist; None without a memory controller
    swap_bytes: int
    kvm_present: bool
    kvm_api: Trial | None  # detail is the version number when ok
    kvm_guest: KvmGuestResult | None
    qemu: DetectedTool
    qemu_microvm: bool | None  # None: QEMU absent or `-machine help` failed
    guest_image: str | None  # the built microVM guest (kernel release, agent), None: not built
    oci: tuple[DetectedTool, ...]
    supervisor: DetectedSupervisor
    runtimes: tuple[ObservedRuntime, ...] = ()  # one per CONTAINER_RUNTIMES entry
    # The real guest kernel booted under KVM (runtime/microvm/accel.py); None: not tried, and
    # kvm_boot_skipped says why. Only this decides whether microvm sandboxes use KVM.
    kvm_boot: KvmBootVerdict | None = None
    kvm_boot_skipped: str = ""
    guest_image_error: str = ""  # why the guest could not be built (cause and fix)
    firecracker: DetectedTool | None = None  # found only to say it is not used; None: not looked for


@dataclass(frozen=True)
class ObservedRuntime:
    """What the container backend's own probe said about one OCI runtime, and its global flags."""

    name: str  # "runc" | "runsc"
    facts: RuntimeFacts | None  # probe_runtime's answer; None when it refused
    error: str | None = None  # probe_runtime's cause when it refused (not installed, no usable platform)
    fix: str = ""
    flags: frozenset[str] | None = None  # global flag names without dashes; None: could not be listed


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


def try_cgroup_children(facts: HostFacts, *, pid: int) -> tuple[CgroupTrial, ...]:
    """mkdir+rmdir ``contain-doctor-<pid>`` where the runtime would put its ``contain`` parent in
    each hierarchy (``cgroup_plan.plan_base_dir``: the delegated root, else our own cgroup on v1
    and its parent on v2), once per directory."""
    done: dict[str, str | None] = {}
    trials = []
    for row in CONTROLLER_ROWS:
        controller = row.controller
        mount = facts.cgroup_for(controller)
        if mount is None:
            trials.append(CgroupTrial(controller, None, None, None))
            continue
        directory = plan_base_dir(facts, mount)
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
    for line in (read_host_file("/proc/meminfo") or "").splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024
    return 0


def detect_tool(name: str, *args: str) -> DetectedTool:
    """``name --version`` (or ``args``): path and first line of output."""
    path = shutil.which(name)
    if path is None:
        return DetectedTool(name, None)
    trial = _run([path, *(args or ("--version",))], timeout_s=_VERSION_TIMEOUT_S)
    if not trial.ok:
        return DetectedTool(name, path, None, trial.detail)
    return DetectedTool(name, path, trial.detail or "(no version output)")


def _qemu_microvm(qemu: DetectedTool) -> bool | None:
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


def observe_supervisor(*, build: bool) -> DetectedSupervisor:
    """Find the sandbox supervisor; with ``build`` compile it when missing.

    Without ``build`` nothing is written: an existing binary for the current source is validated
    (owner, mode) through ``ensure_supervisor_binary``, a missing one is reported as not built.
    """
    try:
        from contain.runtime import supervisor_build
    except ImportError as exc:
        return DetectedSupervisor(
            None,
            f"not built: contain.runtime.supervisor_build unavailable ({exc})",
            "reinstall contain (pip install -e .)",
        )
    from contain.errors import ContainError

    compiler = _compiler()
    expected = supervisor_build.expected_supervisor_path()
    existed = os.path.lexists(expected)
    if not build and not existed:
        return DetectedSupervisor(None, compiler=compiler)
    started = time.monotonic()
    try:
        path = supervisor_build.ensure_supervisor_binary()
    except ContainError as exc:
        return DetectedSupervisor(None, exc.cause, exc.fix, compiler)
    return DetectedSupervisor(str(path), compiler=compiler, built_now=not existed, seconds=time.monotonic() - started)


# How each runtime lists its global flags: runc's --help ("   --root value  ..."), runsc's `flags`
# subcommand ("  -root string").
_FLAG_LISTINGS: dict[str, tuple[str, ...]] = {"runc": ("--help",), "runsc": ("flags",)}
_FLAG_LINE = re.compile(r"^\s+--?([a-z][a-z0-9-]*)")
# As long as the backend's own probe of the binary (oci_runtime._PROBE_TIMEOUT_S): runsc is a large
# Go binary, and 3 s (the version probes' bound) is tight for it on a loaded 2-vCPU host.
_RUNTIME_FLAGS_TIMEOUT_S = 10.0


def parse_flag_names(text: str) -> frozenset[str]:
    """Flag names (no dashes) from an indented flag listing; ``-h``/``--help`` style aliases too. Pure."""
    names = set()
    for line in text.splitlines():
        for part in line.strip().split(","):
            match = _FLAG_LINE.match(" " + part.strip())
            if match:
                names.add(match.group(1))
    return frozenset(names)


def observe_oci_runtime(name: str) -> ObservedRuntime:
    """Probe ``name`` with the container backend's own ``probe_runtime`` and list its global flags."""
    from contain.errors import ContainError
    from contain.runtime.container.oci_runtime import probe_runtime

    try:
        runtime = probe_runtime(name)
    except ContainError as exc:
        return ObservedRuntime(name, None, exc.cause, exc.fix)
    try:
        done = subprocess.run(
            [runtime.path, *_FLAG_LISTINGS[name]],
            capture_output=True,
            text=True,
            timeout=_RUNTIME_FLAGS_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ObservedRuntime(name, runtime)
    flags = parse_flag_names(done.stdout + done.stderr)  # runsc prints `flags` to stderr
    return ObservedRuntime(name, runtime, flags=flags or None)


def observe_host(facts: HostFacts, *, build_supervisor: bool = False) -> Observations:
    """Do the slow, real tries ``detect_host`` skips. Takes about a second on a healthy host."""
    from contain.host.kvm import check_kvm_guest

    trials = try_cgroup_children(facts, pid=os.getpid())
    kvm_present = os.path.exists(KVM_DEVICE)
    qemu = detect_tool(QEMU)
    guest = _microvm_guest(kvm_present)
    return Observations(
        userns_trial=try_user_namespace(facts),
        bwrap_version=bwrap_version(facts.bwrap_path),
        seccomp_actions=tuple((read_host_file("/proc/sys/kernel/seccomp/actions_avail") or "").split()),
        lsm=read_host_file("/sys/kernel/security/lsm"),
        cgroup_trials=trials,
        memsw=_memsw(trials),
        swap_bytes=_swap_bytes(),
        kvm_present=kvm_present,
        kvm_api=_kvm_api() if kvm_present else None,
        kvm_guest=check_kvm_guest(arch=facts.arch) if kvm_present else None,
        qemu=qemu,
        qemu_microvm=_qemu_microvm(qemu),
        guest_image=guest.description if guest.description else None,
        oci=tuple(detect_tool(name) for name, _ in OCI_RUNTIMES),
        firecracker=DetectedTool("firecracker", shutil.which("firecracker")),
        supervisor=observe_supervisor(build=build_supervisor),
        runtimes=tuple(observe_oci_runtime(name) for name in CONTAINER_RUNTIMES),
        kvm_boot=guest.kvm_boot,
        kvm_boot_skipped=guest.kvm_boot_skipped,
        guest_image_error=guest.error,
    )


@dataclass(frozen=True)
class _Guest:
    description: str = ""
    error: str = ""
    kvm_boot: KvmBootVerdict | None = None
    kvm_boot_skipped: str = ""


def _microvm_guest(kvm_present: bool) -> _Guest:
    """Build (or find, cached) the microVM guest, then boot it under KVM (``accel.check_kvm_boot``)."""
    from contain.errors import ContainError
    from contain.runtime.microvm.accel import check_kvm_boot
    from contain.runtime.microvm.guest_build import ensure_guest_image
    from contain.runtime.microvm.vmm import detect_vmm_facts

    try:
        image = ensure_guest_image()
    except ContainError as exc:
        why = f"the microVM guest could not be built: {exc.cause}"
        return _Guest(error=f"{exc.cause} (fix: {exc.fix})", kvm_boot_skipped=why)
    agent = "with the guest agent" if image.initramfs.has_agent else "without a guest agent"
    description = f"Debian cloud kernel {image.kernel.release}, initramfs {agent}, squashfs userland (cached)"
    if not kvm_present:
        return _Guest(description=description, kvm_boot_skipped=f"no {KVM_DEVICE}")
    try:
        verdict = check_kvm_boot(image, detect_vmm_facts())
    except ContainError as exc:
        return _Guest(description=description, kvm_boot_skipped=f"the boot check failed: {exc.cause}")
    return _Guest(description=description, kvm_boot=verdict)
