"""Running one QEMU process: the apply step for a ``VmPlan``, and its serial log.

``VmProcess.start`` is a checklist:

1. ``plan_vmm_launch`` (pure) wraps the planned QEMU argv so that QEMU dies with the thread
   that started it (``setpriv --pdeathsig KILL``: a killed contain leaves no running VM), starts
   in a network namespace of its own (``unshare --net``: its only interface is ``lo``, brought up
   so that contain's egress listeners can bind there; the VMM process itself reaches nothing
   else, and ``netns_path`` names this namespace) and in
   the sandbox's host cgroup from its first instruction (a shell writes its own pid into each
   ``cgroup.procs``, brings ``lo`` up, and then execs QEMU through ``setpriv`` as the sandbox's
   leased host uid with no capabilities and no_new_privs, so the VMM's memory, pids and CPU are
   counted and limited before the guest has a page, and QEMU never runs as host root);
2. spawns it with stdin on /dev/null (nobody types into the guest console), stdout and stderr on
   one pipe that ``SerialLog`` reads into a bounded ring (the last ``SERIAL_TAIL_BYTES``; the
   count of everything else is kept, the bytes are not), in a new session;
3. hands QEMU the guest end of the agent socket pair (``pass_fds``) and closes its own copy.

``kill`` sends SIGKILL to QEMU and reaps it; ``close`` does the same after closing the serial
pipe. No file is created on the host by this module: the agent channel is a socket pair, the
console a pipe, and every image QEMU opens is a cached artefact opened read-only. What this does
not do: talk to the guest (the agent's handle does), or remove the cgroup (``Sandbox`` does).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from contain.errors import SandboxStartError
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.microvm.vmm_plan import Accel, VmPlan, plan_qemu_argv

__all__ = ["SERIAL_TAIL_BYTES", "SerialLog", "VmProcess", "VmmFacts", "detect_vmm_facts", "plan_vmm_launch"]

SERIAL_TAIL_BYTES = 64 * 1024
CLOSE_GRACE_S = 1.0  # a guest that was asked to power off does so in ~0.1 s under TCG
UNSHARE = "/usr/bin/unshare"
SETPRIV = "/usr/bin/setpriv"
NOBODY = (65534, 65534)
_JOIN_AND_EXEC = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; '
    'ip link set lo up || exit 125; exec "$@"'
)


@dataclass(frozen=True)
class VmmFacts:
    """What the VMM plan needs to know about the host (probed once by ``detect_vmm_facts``)."""

    qemu: str | None  # absolute path of qemu-system-x86_64, or None
    qemu_version: str  # the first line of `qemu-system-x86_64 --version`, or ""
    tsc_khz: int | None  # the host's TSC rate (cpu MHz of a constant_tsc CPU), or None


def detect_vmm_facts() -> VmmFacts:
    """Find QEMU, ask its version (3 s timeout) and read the host's TSC rate from /proc/cpuinfo."""
    import shutil

    qemu = shutil.which("qemu-system-x86_64")
    version = ""
    if qemu:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=3, check=False)
            version = (done.stdout.splitlines() or [""])[0].strip()
    return VmmFacts(qemu=qemu, qemu_version=version, tsc_khz=parse_tsc_khz(_read_cpuinfo()))


def _read_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read(65536)
    except OSError:
        return ""


def parse_tsc_khz(cpuinfo: str) -> int | None:
    """The first CPU's ``cpu MHz`` in kHz, only when its flags say the TSC rate is constant."""
    flags = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    mhz = re.search(r"^cpu MHz\s*:\s*([0-9.]+)$", cpuinfo, re.MULTILINE)
    if not flags or not mhz or "constant_tsc" not in flags.group(1).split():
        return None
    return round(float(mhz.group(1)) * 1000)


def plan_vmm_launch(
    qemu_argv: Sequence[str],
    *,
    cgroup_procs: Sequence[str],
    run_as: tuple[int, int],
    extra_gids: Sequence[int] = (),
) -> list[str]:
    """The argv that starts QEMU in a new network namespace, inside ``cgroup_procs`` first, then
    as ``run_as`` (uid, gid) with no capabilities, no other groups than ``extra_gids`` (the kvm
    group, for ``/dev/kvm``) and no_new_privs: a QEMU escape lands in an unprivileged uid.

    ``setpriv --pdeathsig KILL`` first: QEMU runs in a session of its own, so without it a
    SIGKILLed contain left the VM running its workload (the escape battery's LF-08 on microvm);
    the signal survives the execs of unshare and sh (none is set-id), but the kernel clears it
    when the credentials change, so the setpriv that drops to ``run_as`` arms it again after
    the drop. As with bubblewrap's ``--die-with-parent``, the parent is the *thread* that started
    the VMM.

    Raises:
        ValueError: ``run_as`` is root.
    """
    uid, gid = run_as
    if uid == 0 or gid == 0:
        raise ValueError("the VMM never runs as root")
    groups = f"--groups={','.join(str(g) for g in extra_gids)}" if extra_gids else "--clear-groups"
    drop = [
        SETPRIV, f"--reuid={uid}", f"--regid={gid}", groups, "--inh-caps=-all", "--bounding-set=-all",
        "--no-new-privs", "--pdeathsig", "KILL", "--",
    ]  # fmt: skip
    return [
        SETPRIV, "--pdeathsig", "KILL", "--",
        UNSHARE, "--net", "--", "/bin/sh", "-c", _JOIN_AND_EXEC, "contain-vmm",
        str(len(cgroup_procs)), *cgroup_procs, *drop, *qemu_argv,
    ]  # fmt: skip


def _kvm_group() -> int | None:
    """The group owning /dev/kvm (QEMU needs it to open the device as an unprivileged uid)."""
    try:
        return os.stat("/dev/kvm").st_gid
    except OSError:
        return None


@dataclass
class SerialLog:
    """The guest console, bounded: the last ``cap`` bytes and a count of all of them."""

    cap: int = SERIAL_TAIL_BYTES
    total_bytes: int = 0
    _tail: bytearray = field(default_factory=bytearray)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self._lock)

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self.total_bytes += len(chunk)
            self._tail += chunk
            if len(self._tail) > self.cap:
                del self._tail[: len(self._tail) - self.cap]
            self._changed.notify_all()

    def text(self) -> str:
        with self._lock:
            return self._tail.decode("utf-8", "replace")

    def tail_lines(self, count: int = 20) -> str:
        """The last ``count`` lines (raw guest text: render it with ``for_terminal`` before display)."""
        return "\n".join(self.text().splitlines()[-count:])

    def wait_for(self, marker: str, *, timeout_s: float) -> bool:
        """Whether ``marker`` appeared in the kept tail within ``timeout_s`` (or was already there)."""
        needle = marker.encode()
        with self._changed:
            return self._changed.wait_for(lambda: needle in self._tail, timeout=timeout_s)

    def close(self) -> None:
        with self._lock:
            self._changed.notify_all()


class VmProcess:
    """One QEMU process for one ``VmPlan``; see the module docstring."""

    def __init__(
        self,
        plan: VmPlan,
        *,
        cgroup: SandboxCgroup | None = None,
        guest_fd: int | None = None,
        extra_argv: Sequence[str] = (),
        extra_fds: Sequence[int] = (),
        console_input: bool = False,
        run_as: tuple[int, int] = NOBODY,
    ) -> None:
        """``extra_argv``/``extra_fds``: QEMU words after the plan's and the descriptors they name
        (snapshot_plan.py: the template's monitor, a restore's ``-incoming``); the caller keeps
        and closes its copies of ``extra_fds``. ``console_input``: keep a pipe to the guest
        console (``type_on_console``), for the shell mode only (initramfs.py); every other VM gets
        /dev/null. ``run_as``: the host uid and gid QEMU runs as (the sandbox's leased ids; never
        root)."""
        self.plan = plan
        self._extra_argv = tuple(extra_argv)
        self._extra_fds = tuple(extra_fds)
        self._run_as = run_as
        self._console_input = console_input
        self.serial = SerialLog()
        self.cgroup = cgroup
        self._cgroup_procs = tuple(f"{path}/cgroup.procs" for path in cgroup.paths) if cgroup is not None else ()
        self._guest_fd = guest_fd
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def netns_path(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    def start(self) -> None:
        """Spawn QEMU (see the module docstring); returns at once, before the guest is up.

        Raises:
            SandboxStartError: QEMU or unshare could not be executed.
        """
        kvm_gid = _kvm_group() if self.plan.accel is Accel.KVM else None
        argv = plan_vmm_launch(
            [*plan_qemu_argv(self.plan), *self._extra_argv],
            cgroup_procs=self._cgroup_procs,
            run_as=self._run_as,
            extra_gids=(kvm_gid,) if kvm_gid is not None else (),
        )
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if self._console_input else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=((self._guest_fd,) if self._guest_fd is not None else ()) + self._extra_fds,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxStartError(
                f"cannot start the VMM ({argv[0]}): {exc.strerror}", "install util-linux and qemu-system-x86"
            ) from exc
        finally:
            if self._guest_fd is not None:
                os.close(self._guest_fd)
                self._guest_fd = None
        self._reader = threading.Thread(target=self._read_serial, name="contain-vm-serial", daemon=True)
        self._reader.start()

    def _read_serial(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stream = self._proc.stdout
        while chunk := os.read(stream.fileno(), 65536):
            self.serial.feed(chunk)
        self.serial.close()

    def type_on_console(self, data: bytes) -> None:
        """Write ``data`` to the guest console (a VM started with ``console_input`` only)."""
        if self._proc is None or self._proc.stdin is None:
            raise ValueError("this VM's console takes no input")
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def exit_code(self) -> int | None:
        """QEMU's exit status once it ended (negative: the signal), else None."""
        return self._proc.poll() if self._proc is not None else None

    def wait(self, timeout_s: float) -> int | None:
        """QEMU's exit status, or None when it is still running after ``timeout_s``."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL QEMU and reap it; idempotent."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    def close(self, *, grace_s: float = CLOSE_GRACE_S) -> None:
        """Give QEMU ``grace_s`` to end by itself (the guest powering off), then kill it; reap it
        and close the serial pipe. Idempotent."""
        if self._proc is not None and self._proc.poll() is None and grace_s > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=grace_s)
        self.kill()
        if self._reader is not None:
            self._reader.join(timeout=5.0)
            self._reader = None
        if self._proc is not None:
            for stream in (self._proc.stdout, self._proc.stdin):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
