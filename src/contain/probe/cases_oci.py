"""OC cases: attacks on what an OCI runtime adds (OC-01..OC-06 of the escape catalogue).

Each case attacks from inside and is judged from outside:

- OC-01 (CVE-2019-5736 shape): every visible process's ``/proc/<pid>/exe`` is opened for writing,
  directly and, after the process exits, again through an ``O_PATH`` descriptor taken while it
  ran. Judges: the kernel's answer (the attack never writes a byte, so a breach stays harmless)
  and the sha256 on the host of the runtime binary (bwrap, runc or runsc) and of every host
  executable that a process in the sandbox's pid namespace runs (the supervisor, python3).
  Control: a fresh pid+mount namespace as host root, where a writable host binary runs as a
  short-lived helper (started once the attack's shell exec'd python3); the same attack opens it
  for writing once it exited. On a container target the judge also has the runtime exec a short
  command into the container while the attack watches (the CVE's own step).
- OC-02 (CVE-2024-21626 shape): every directory descriptor in ``/proc/self/fd`` and
  ``/proc/1/fd``, and the cwd of ``self`` and pid 1, is climbed with ``openat("..")`` to read a
  host canary by its host path. Judge: the canary at a sink. Control: a host process given a
  directory descriptor of the host's root.
- OC-03: write-opens of kernel knobs (``core_pattern``, ``sysrq-trigger``, ``uevent_helper``,
  every ``release_agent``) and reads of ``/proc/kcore``, ``/proc/keys``, ``/sys/firmware``.
  Judges: the kernel's answer (nothing is ever written) and the host's knobs before and after.
  Control: the bare host as root.
- OC-04: capability sets, ``setns`` to every ``/proc/<n>/ns`` entry, ``mount -t proc``,
  ``mount -t tmpfs``, ``unshare(CLONE_NEWUSER|CLONE_NEWNS)`` then mount. Judges: the kernel's
  answer and the host's mount table. Control: root of a fresh user+mount namespace.
- OC-05: crafted images (``hostile_images.py``) through contain's unpacker
  (``runtime/container/image.py``): each hostile member alone, all of them in one OCI layout,
  and a set-uid file. Judges on the host: the image cache holds nothing of a refused image, the
  witness directory and ``/etc/shadow`` are unchanged, the accepted image's tree has no set-id
  bit, no device and nothing outside its root. The report lists what was refused. Control: a
  naive ``tarfile`` extraction of the same attacks (aimed at the witness only) shows each breach.
- OC-06: the runtime's state (``state.json``, ``exec.fifo``, sockets, runsc's ``*.state``) is
  searched from inside (a bounded walk of the tree and of other processes' root, cwd and fds)
  and every hit is opened for writing. Judges: the kernel's answer and a snapshot of the
  container's real state directory on the host before and after. Control: a sandbox with a
  decoy state directory bound in writable.

Where a case does not apply: OC-01..04 attack any sandbox (bwrap is the process backend's
runtime binary) and run on every target. OC-05 and OC-06 are NOT_APPLICABLE by construction on
the process backend (it unpacks no image and its runtime, bwrap, keeps no state directory) and on
--wrap targets (the probe knows neither the wrapped sandbox's image path nor its state).

Not enforced here: the attack stops at the first open that succeeds; it never writes to what it
opened, so a real breach is reported, not exploited.

Why one file past 600 lines: one mechanism, the OC rows of the catalogue; each case keeps its
attack, its host-side judge and its control side by side, as the other ``cases_*`` modules do.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import platform
import shutil
import stat
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext, Target
from contain.probe.context import (
    as_run_context,
    attack,
    attack_report,
    canary_sinks,
    run_attack,
    run_evidence,
    succeeded,
    verdict,
)
from contain.probe.hostile_images import (
    HOSTILE_MEMBERS,
    SETID_MEMBER,
    naive_members,
    oci_layout,
    rootfs_tar,
    tar_bytes,
)
from contain.probe.targets import ContainTarget, WrapTarget, kind_keys, target_kind
from contain.runtime.container.oci_runtime import OciRuntimeView

__all__ = ["CASES", "RUNTIME_BINARIES", "helper_launch", "runtime_binary", "runtime_state_dir"]

# backend kind -> the runtime binary that starts its sandboxes (what OC-01 must keep intact)
RUNTIME_BINARIES: Mapping[str, str] = {
    "process": "bwrap",
    "container": "runc",  # runtime.container.runtime's default
    "container:runc": "runc",
    "container:runsc": "runsc",
}


def runtime_binary(kind: str) -> str | None:
    """The host path of the runtime binary behind a target kind (None when unknown or absent)."""
    for key in kind_keys(kind):
        if key in RUNTIME_BINARIES:
            found = shutil.which(RUNTIME_BINARIES[key], path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin")
            return os.path.realpath(found) if found else None
    return None


def runtime_state_dir(sandbox: object) -> str | None:
    """The host directory where the sandbox's OCI runtime keeps this container's state, as the
    sandbox's public ``oci_runtime`` reports it (None on other backends or before start)."""
    view = getattr(sandbox, "oci_runtime", None)
    return view.state_dir if isinstance(view, OciRuntimeView) else None


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


class _Binaries:
    """Host binaries held open by descriptor, so they are hashed again after their processes exit.

    A process's binary is opened through ``/proc/<host pid>/exe`` (which reaches the very file
    across mount namespaces; the name the sandbox sees means nothing on the host). Each file is
    kept once (by device and inode); a write into it shows in the second hash however its
    processes ended.
    """

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}
        self.before: dict[str, str | None] = {}
        self._inodes: set[tuple[int, int]] = set()

    def add(self, label: str, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) in self._inodes:
            os.close(fd)
            return
        self._inodes.add((info.st_dev, info.st_ino))
        self.fds[label] = fd
        self.before[label] = self.digest(label)

    def add_pid_namespace(self, pid: int) -> None:
        """Every binary that a process in ``pid``'s pid namespace runs; only ``pid``'s own when
        that namespace is the host's (runsc's host pid is a runsc process on the host: the
        workload's processes live in gVisor's kernel, not in any host pid namespace)."""
        namespace = _pid_namespace(pid)
        if namespace is None:
            return
        if namespace == _pid_namespace(os.getpid()):
            with contextlib.suppress(OSError):
                self.add(f"{os.readlink(f'/proc/{pid}/exe')} (pid {pid})", f"/proc/{pid}/exe")
            return
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _pid_namespace(int(entry)) == namespace:
                with contextlib.suppress(OSError):
                    self.add(f"{os.readlink(f'/proc/{entry}/exe')} (pid {entry})", f"/proc/{entry}/exe")

    def digest(self, label: str) -> str | None:
        with contextlib.suppress(OSError), os.fdopen(os.dup(self.fds[label]), "rb") as handle:
            handle.seek(0)
            return hashlib.file_digest(handle, "sha256").hexdigest()
        return None

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


# -- OC-01 ----------------------------------------------------------------------------------------

_EXE_WRITE = r"""
import time
me = os.getpid()
held = {}
def scan():
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me or int(d) in held:
            continue
        pid = int(d)
        try:
            name = os.readlink(f"/proc/{pid}/exe")
        except OSError as e:
            name = "?" + errno.errorcode.get(e.errno or 0, "")
        try:
            held[pid] = (os.open(f"/proc/{pid}/exe", os.O_PATH), name)
        except OSError:
            held[pid] = (None, name)
        rec(f"open /proc/{pid}/exe ({name}) for writing",
            lambda p=pid: os.close(os.open(f"/proc/{p}/exe", os.O_WRONLY)))
rec("open /proc/self/exe for writing", lambda: os.close(os.open("/proc/self/exe", os.O_WRONLY)))
deadline = time.monotonic() + P["watch_s"]
while time.monotonic() < deadline:  # a process the runtime execs in may appear, then exit
    scan()
    time.sleep(0.01)
# The CVE's step: once the binary no longer runs, ETXTBSY no longer protects it; reopen each
# held descriptor for writing, retrying until the settle time ends (its process may still run).
settle = time.monotonic() + P["settle_s"]
pending = {pid: v for pid, v in held.items() if v[0] is not None}
while pending:
    for pid, (fd, name) in sorted(pending.items()):
        label = f"reopen exe of {pid} ({name}) via O_PATH fd for writing"
        r = rec(label, lambda fd=fd: os.close(os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)))
        if r["ok"] or r.get("errno") != "ETXTBSY" or time.monotonic() > settle:
            del pending[pid]
    time.sleep(0.02)
note("visible", {str(k): v[1] for k, v in held.items()})
done()
"""
_WATCH_S = 2.0
_SETTLE_S = 1.5  # how long a reopen is retried while the binary still runs (ETXTBSY)
_HELPER_S = 1.2  # the control's helper: runs from the attack's exec, seen inside the watch window


def helper_launch(helper: str) -> str:
    """Shell that starts ``helper`` (a writable binary) once this shell has exec'd python3, then
    execs the command in ``"$@"``: the helper then runs while the attack's watch window is open
    however slowly python3 starts, and exits before the window and the settle time end."""
    wait_for_exec = "while ! grep -q python3 /proc/$pid/cmdline 2>/dev/null; do sleep 0.01; done"
    return f'pid=$$; ({wait_for_exec}; exec {helper} {_HELPER_S}) & exec "$@"'


def _write_opens(report: Mapping[str, Any]) -> list[str]:
    return [n for n in succeeded(report) if n.startswith(("open ", "reopen ")) and "for writing" in n]


def oc_01(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    kind = target_kind(rc.target)
    binaries = _Binaries()
    binary = runtime_binary(kind)
    if binary is not None:
        binaries.add(binary, binary)
    after: dict[str, str | None] = {}
    exec_in: dict[str, Any] = {}

    def observe(sandbox: Any) -> Callable[[], None]:
        view = getattr(sandbox, "oci_runtime", None)
        if isinstance(view, OciRuntimeView):  # the binary this container really runs under
            binaries.add(view.binary, view.binary)
        pid = sandbox.supervisor_pid
        if pid:
            binaries.add_pid_namespace(pid)
        # Make the runtime exec a process into the container while the attack watches.
        worker = threading.Thread(target=_runtime_exec, args=(sandbox, exec_in), daemon=True)
        worker.start()

        def finish() -> None:
            worker.join(_EXEC_TIMEOUT_S + 1.0)
            after.update({label: binaries.digest(label) for label in binaries.fds})

        return finish

    code = attack(_EXE_WRITE, watch_s=_WATCH_S, settle_s=_SETTLE_S)
    try:
        if isinstance(rc.target, ContainTarget):
            run = rc.target.run_observed(["python3", "-c", code], observer=observe)
        else:
            run = rc.target.run_argv(["python3", "-c", code])
        after.update({label: binaries.digest(label) for label in binaries.fds if label not in after})
    finally:
        binaries.close()
    watched = binaries.before
    report = attack_report(run) or {}
    breaches = [f"{name} succeeded" for name in _write_opens(report)]
    breaches += [f"{path} changed on the host" for path, digest in watched.items() if after.get(path) != digest]
    # Control: a writable host binary runs as a helper in a fresh pid namespace and exits.
    helper = rc.plant_dir("exe-helper") / "runtime-copy"
    shutil.copy2("/usr/bin/sleep", helper)
    helper.chmod(0o755)
    control = WrapTarget(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", helper_launch(str(helper)), "sh"])
    control_run = control.run_argv(["python3", "-c", code])
    control_opens = [n for n in _write_opens(attack_report(control_run) or {}) if str(helper) in n]
    return verdict(
        "OC-01",
        breaches=breaches,
        control_shows_breach=bool(control_opens),
        contained=(
            f"no visible process's exe opened for writing; {len(watched)} host binaries byte-identical "
            f"({', '.join(sorted(watched))})"
        ),
        control=(
            "in a fresh pid namespace as host root the exited helper's binary "
            f"{'was' if control_opens else 'was NOT'} reopened for writing through its O_PATH descriptor"
        ),
        evidence={
            "attack": report,
            "run": run_evidence(run),
            "hashed": {p: {"before": d, "after": after.get(p)} for p, d in watched.items()},
            "runtime_exec": exec_in or "not attempted: the target runs no OCI runtime",
            "judged_by": "the kernel's answer to open(O_WRONLY) (nothing is written) and sha256 on the host",
        },
        missing=(
            "the attack did not report"
            if not report
            else None
            if binary is not None or kind not in ("process", *RUNTIME_BINARIES)
            else f"the runtime binary of {kind} is not installed"
        ),
    )


_EXEC_DELAY_S = 0.5  # after the attack started watching (python3 startup included)
_EXEC_TIMEOUT_S = 5.0


def _runtime_exec(sandbox: Any, out: dict[str, Any]) -> None:
    """``<runtime> exec`` a short command into the container as the sandbox user (the step of
    CVE-2019-5736 where the runtime's own binary enters the container), when the handle says which
    runtime and state it runs with; records what happened in ``out``."""
    from contain.runtime.bwrap import SANDBOX_GID, SANDBOX_UID

    view = getattr(sandbox, "oci_runtime", None)
    if not isinstance(view, OciRuntimeView):
        return
    name = view.container_name
    argv = [*view.argv_prefix, "exec", "--user", f"{SANDBOX_UID}:{SANDBOX_GID}", name, "/bin/sleep", "0.3"]
    time.sleep(_EXEC_DELAY_S)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_EXEC_TIMEOUT_S, check=False)
        out.update(argv=argv, exit_code=done.returncode, stderr=done.stderr[-500:].decode("utf-8", "replace"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        out.update(argv=argv, error=f"{type(exc).__name__}: {exc}")


# -- OC-02 ----------------------------------------------------------------------------------------

_LEAKED_FDS = r"""
import stat
target = P["path"].lstrip("/")
starts = {}
for base in ("/proc/self/fd", "/proc/1/fd"):
    try:
        names = os.listdir(base)
    except OSError as e:
        note(f"list {base}", errno.errorcode.get(e.errno or 0, str(e)))
        continue
    for name in names:
        path = f"{base}/{name}"
        try:
            if stat.S_ISDIR(os.stat(path).st_mode):
                starts[path] = os.readlink(path)
        except OSError:
            pass
for path in ("/proc/self/cwd", "/proc/1/cwd"):
    with_link = rec(f"readlink {path}", os.readlink, path)
    starts[path] = with_link.get("value")
note("starts", starts)
for path in sorted(starts):
    def climb(path=path):
        cur = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(64):
            nxt = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
            os.close(cur)
            cur = nxt
        f = os.open(target, os.O_RDONLY, dir_fd=cur)
        return os.read(f, 4096)
    rec(f"openat('..' x64) from {path}", climb)
done()
"""
_SH_INHERIT = 'exec 7</ 8</etc/hostname; exec python3 -c "$0"'


def oc_02(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("leakedfd")
    planted = rc.plant_file(rc.plant_dir("leaked") / "canary", canary, mode=0o644)
    run, report = run_attack(rc.target, _LEAKED_FDS, path=str(planted))
    control = rc.control.run_argv(["sh", "-c", _SH_INHERIT, attack(_LEAKED_FDS, path=str(planted))])
    shown = bool(canary_sinks(control, canary))
    starts = (report.get("starts") or {}).get("value") or {}
    return verdict(
        "OC-02",
        breaches=[f"a host canary reached {s} through a leaked descriptor or cwd" for s in canary_sinks(run, canary)],
        control_shows_breach=shown,
        contained=f"no descriptor or cwd resolved outside the root ({len(starts)} starting points climbed)",
        control=f"a host process given a directory fd of / {'reached' if shown else 'did NOT reach'} the canary",
        evidence={"attack": report, "run": run_evidence(run), "judged_by": "the canary at a sink"},
        missing=None if report else "the attack did not report",
    )


# -- OC-03 ----------------------------------------------------------------------------------------

_KNOBS = r"""
import glob
writes = ["/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/sys/kernel/uevent_helper"]
writes += sorted(glob.glob("/sys/fs/cgroup/*/release_agent") + glob.glob("/sys/fs/cgroup/release_agent"))[:20]
for p in writes:  # the open is the breach; nothing is ever written
    rec(f"open {p} for writing", lambda p=p: os.close(os.open(p, os.O_WRONLY)))
for p in ("/proc/kcore", "/proc/keys"):
    rec(f"read {p}", lambda p=p: len(readf(p, 4096)))
rec("list /sys/firmware", lambda: sorted(os.listdir("/sys/firmware")))
done()
"""
_HOST_KNOBS = ("/proc/sys/kernel/core_pattern", "/sys/kernel/uevent_helper")


def _knob_values() -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for path in _HOST_KNOBS:
        try:
            values[path] = Path(path).read_text()
        except OSError:
            values[path] = None
    return values


def _knob_breaches(report: Mapping[str, Any]) -> list[str]:
    found = [f"{name} succeeded" for name in succeeded(report) if name.startswith("open ")]
    for name in succeeded(report):
        value = report[name].get("value")
        if name.startswith("read ") and isinstance(value, int) and value > 0:
            found.append(f"{name} returned {value} bytes")
        if name.startswith("list ") and value:
            found.append(f"{name} shows {len(value)} entries")
    return found


def oc_03(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    before = _knob_values()
    run, report = run_attack(rc.target, _KNOBS)
    after = _knob_values()
    _control, control_report = run_attack(rc.control, _KNOBS)
    breaches = _knob_breaches(report)
    breaches += [f"{path} changed on the host" for path in before if before[path] != after[path]]
    shown = _knob_breaches(control_report)
    return verdict(
        "OC-03",
        breaches=breaches,
        control_shows_breach=bool(shown),
        contained="every knob refused writing; /proc/kcore, /proc/keys empty or refused; /sys/firmware empty",
        control=f"on the bare host (root): {'; '.join(shown) or 'nothing opened or read'}",
        evidence={
            "attack": report,
            "run": run_evidence(run),
            "host_knobs": {"before": before, "after": after},
            "judged_by": "the kernel's answer (nothing is written) and the host's knobs before and after",
        },
        missing=None if report else "the attack did not report",
    )


# -- OC-04 ----------------------------------------------------------------------------------------

_PRIVILEGE = r"""
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
def mount(src, dst, fstype):
    if libc.mount(src.encode(), dst.encode(), fstype.encode(), 0, None) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def unshare(flags):
    if libc.unshare(flags) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def setns(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, 0) != 0:
            e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)
def in_child(name, fn):
    # run fn in a forked child so the attacker's own process keeps its namespaces
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            fn(); msg = "ok"
        except OSError as e:
            msg = errno.errorcode.get(e.errno or 0, str(e.errno))
        except Exception as e:
            msg = "!" + type(e).__name__
        os.write(w, msg.encode()); os._exit(0)
    os.close(w)
    msg = os.read(r, 200).decode() or "!no answer"
    os.close(r); os.waitpid(pid, 0)
    _R[name] = {"ok": True, "value": "ok"} if msg == "ok" else {"ok": False, "errno": msg}
caps = {}
for line in readf("/proc/self/status").decode().splitlines():
    if line.startswith("Cap"):
        key, value = line.split(":", 1)
        caps[key] = value.strip()
for key, value in caps.items():
    if int(value, 16):
        note(f"{key} is not empty", value)
note("caps", caps)
d = P["dir"]
rec("mkdir", lambda: [os.makedirs(d + m, exist_ok=True) for m in ("/proc", "/tmpfs", "/userns")])
in_child("mount -t proc", lambda: mount("proc", d + "/proc", "proc"))
in_child("mount -t tmpfs", lambda: mount("tmpfs", d + "/tmpfs", "tmpfs"))
in_child("unshare -U -m", lambda: unshare(0x10000000 | 0x00020000))  # CLONE_NEWUSER | CLONE_NEWNS
in_child("unshare -U -m then mount -t tmpfs",
         lambda: (unshare(0x10000000 | 0x00020000), mount("tmpfs", d + "/userns", "tmpfs")))
for pid in ("1", "self"):
    try:
        kinds = sorted(os.listdir(f"/proc/{pid}/ns"))
    except OSError:
        kinds = []
    for kind in kinds:
        in_child(f"setns /proc/{pid}/ns/{kind}", lambda p=f"/proc/{pid}/ns/{kind}": setns(p))
done()
"""


def _privilege_breaches(report: Mapping[str, Any]) -> list[str]:
    found = [name for name in succeeded(report) if name.startswith("Cap")]
    found += [f"{name} succeeded" for name in succeeded(report) if name.startswith(("mount ", "unshare ", "setns "))]
    return found


def oc_04(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("privs")
    run, report = run_attack(rc.target, _PRIVILEGE, dir=f"/tmp/{canary}")
    leaked = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if canary in line]
    # Control: root of a fresh user+mount namespace holds every capability there; mounts vanish with it.
    _control, control_report = run_attack(rc.userns_control, _PRIVILEGE, dir=str(rc.plant_dir("privs")))
    rc.remove_later(f"/tmp/{canary}")
    breaches = _privilege_breaches(report) + [f"a mount leaked into the host's table: {line}" for line in leaked]
    shown = _privilege_breaches(control_report)
    return verdict(
        "OC-04",
        breaches=breaches,
        control_shows_breach=bool(shown),
        contained="no capability in any set; setns, mount proc/tmpfs and unshare -U (then mount) all refused",
        control=f"as root of a fresh user namespace: {'; '.join(shown[:6]) or 'nothing succeeded'}",
        evidence={"attack": report, "run": run_evidence(run), "judged_by": "the kernel's answer and the host mounts"},
        missing=None if succeeded(report, "mkdir") else "no writable directory to mount on",
    )


# -- OC-05 ----------------------------------------------------------------------------------------


class _Witness:
    """What an escaping member would change: a witness directory and the host's /etc/shadow."""

    def __init__(self, path: Path) -> None:
        self.path = path
        (path / "keep").write_text("witness\n")
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, Any]:
        seen: dict[str, Any] = {"entries": sorted(os.listdir(self.path)), "keep": (self.path / "keep").read_bytes()}
        seen["keep_links"] = os.lstat(self.path / "keep").st_nlink
        with contextlib.suppress(OSError):
            info = os.lstat("/etc/shadow")
            seen["/etc/shadow"] = (_sha256("/etc/shadow"), info.st_mtime_ns, info.st_nlink)
        return seen

    def changes(self) -> list[str]:
        now = self.snapshot()
        return [
            f"{key}: {self.before.get(key)!r} -> {now.get(key)!r}" for key in now if now[key] != self.before.get(key)
        ]


def _tree_findings(root: Path) -> list[str]:
    """Set-id bits, device nodes, FIFOs or sockets anywhere in an unpacked tree (never following links)."""
    findings = []
    for current, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(current, name)
            mode = os.lstat(path).st_mode
            if mode & (stat.S_ISUID | stat.S_ISGID):
                findings.append(f"{path} keeps a set-id bit ({oct(mode)})")
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                findings.append(f"{path} is a special file ({oct(mode)})")
    return findings


def _unpack(image: Path, cache: Path) -> tuple[str, Any]:
    from contain.errors import ImageError
    from contain.runtime.container import unpack_image

    try:
        return "accepted", unpack_image(image, cache_root=cache)
    except ImageError as exc:
        return "refused", exc


def _outside_cache(run_root: Path, allowed: tuple[Path, ...]) -> list[str]:
    """Entries of the run's directory that are neither the images, the cache nor the witness."""
    return sorted(str(p) for p in run_root.iterdir() if p not in allowed)


def oc_05(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    work = rc.plant_dir("images")
    witness = _Witness(rc.plant_dir("witness"))
    images, cache = work / "in", work / "cache"
    images.mkdir()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    attempts: list[tuple[str, Path, tuple[str, ...], str]] = []  # label, image, offenders to name, must
    for row in HOSTILE_MEMBERS:
        slug = row.name.replace(" ", "-").replace("/", "").replace(".", "")
        image = rootfs_tar(images / f"{slug}.tar", row.members(witness.path))
        attempts.append((row.name, image, (row.offender(witness.path),), "refuse"))
    every = [m for row in HOSTILE_MEMBERS for m in row.members(witness.path)]
    every_offender = tuple(row.offender(witness.path) for row in HOSTILE_MEMBERS)
    layout = oci_layout(images / "oci-all", [every], arch=arch)
    attempts.append(("every member in one OCI layout", layout, every_offender, "refuse"))
    setid = rootfs_tar(images / "setid.tar", SETID_MEMBER.members(witness.path))
    attempts.append((SETID_MEMBER.name, setid, (SETID_MEMBER.offender(witness.path),), "confine"))
    breaches: list[str] = []
    refused: dict[str, list[str]] = {}
    for label, image, offenders, must in attempts:
        outcome, value = _unpack(image, cache)
        if outcome == "refused":
            report = value.report
            listed = [f"{e.member} [{e.rule_id}]" for e in (report.refused() if report is not None else ())]
            refused[label] = listed or [value.cause]
            if must == "confine":
                breaches.append(f"{label}: refused, but it should be unpacked with its set-id bits removed")
            unnamed = [o for o in offenders if not any(line.startswith(o + " [") for line in listed)]
            if must == "refuse" and unnamed:
                breaches.append(f"{label}: refused without naming the offending members {unnamed}")
        elif must == "refuse":
            breaches.append(f"{label}: the image was accepted ({value.rootfs})")
        else:
            breaches += [f"{label}: {finding}" for finding in _tree_findings(value.rootfs)]
            stripped = [e for e in value.report.entries if e.member in offenders]
            if not stripped:
                breaches.append(f"{label}: the report does not list the set-id bits it removed")
    entries = sorted(os.listdir(cache)) if cache.exists() else []
    kept = [name for name in entries if not name.startswith(".lock-")]
    if len(kept) > 1:  # only the set-id image may be cached
        breaches.append(f"the cache holds entries of refused images: {kept}")
    started: dict[str, Any] = {}
    if isinstance(rc.target, ContainTarget) and rc.target.kind.split(":", 1)[0] == "container":
        through = [(label, image) for label, image, _o, must in attempts if must == "refuse"][-2:]
        breaches += _through_backend(rc.target, through, setid, started)
    breaches += [f"outside the cache: {change}" for change in witness.changes()]
    breaches += [f"outside the cache: {path}" for path in _outside_cache(work, (images, cache))]
    control = _naive_control(rc.plant_dir("naive"))
    return verdict(
        "OC-05",
        breaches=breaches,
        control_shows_breach=not control["missed"],
        contained=(
            f"{len(refused)} hostile images refused, the set-id file unpacked without its bits; "
            "nothing outside the cache"
        ),
        control=(
            "a naive tarfile extraction of the same attacks "
            + (
                f"did NOT show: {control['missed']}"
                if control["missed"]
                else "wrote outside its target, kept a device, a set-id bit and 1 TiB"
            )
        ),
        evidence={
            "refused": refused,
            "cache_entries": entries,
            "through_the_backend": started or "not run: the target starts no container",
            "naive_control": control,
        },
    )


def _through_backend(
    target: ContainTarget, hostile: list[tuple[str, Path]], setid: Path, seen: dict[str, Any]
) -> list[str]:
    """Start the target's backend with ``runtime.container.image`` set: each hostile image must
    stop the start with ImageError (no container), and the set-id image must give a root whose
    file has no set-id bit, read on the host from the container's root (never followed)."""
    from contain.boundary import Boundary
    from contain.errors import ImageError
    from contain.runtime import Sandbox

    breaches = []
    for label, image in hostile:
        manifest = Boundary.model_validate(target.boundary_for({"runtime": {"container": {"image": str(image)}}}))
        try:
            with Sandbox(manifest, backend=target.backend):
                breaches.append(f"{label}: a container started from the image")
        except ImageError as exc:
            seen[label] = f"refused before any container existed: {exc.cause[:300]}"
    manifest = Boundary.model_validate(target.boundary_for({"runtime": {"container": {"image": str(setid)}}}))
    with Sandbox(manifest, backend=target.backend) as sandbox:
        root = _container_root(sandbox)
        try:
            mode = os.lstat(os.path.join(root, "usr/bin/su-copy")).st_mode
        except OSError as exc:
            breaches.append(f"set-id image: its file is not in the container's root {root} ({exc})")
        else:
            seen["setuid binary"] = f"{root}/usr/bin/su-copy has mode {oct(mode)}"
            if mode & (stat.S_ISUID | stat.S_ISGID):
                breaches.append(f"set-id image: the container's root has a set-id file ({oct(mode)})")
    return breaches


def _container_root(sandbox: Any) -> str:
    """The host path of the container's root: the backend's overlay mount (runc and runsc both
    run from it), else the init's ``/proc/<pid>/root``."""
    view = getattr(sandbox, "oci_runtime", None)
    if isinstance(view, OciRuntimeView) and os.path.isdir(view.rootfs):
        return view.rootfs
    return f"/proc/{sandbox.supervisor_pid}/root"


def _naive_control(base: Path) -> dict[str, Any]:
    """Extract the control members with ``tarfile`` and no filter, as root; report what escaped."""
    base.chmod(0o700)  # the control makes a device node: nobody else may reach it
    (base / "witness").mkdir()
    witness = _Witness(base / "witness")
    target = base / "a" / "b" / "target"
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes(naive_members(witness.path)))) as tar:
        errors = []
        for member in tar.getmembers():
            try:
                tar.extract(member, target, filter="fully_trusted")
            except (OSError, tarfile.TarError) as exc:
                errors.append(f"{member.name}: {exc}")
    seen = {
        "outside the target": witness.changes(),
        "device node": [p for p in _tree_findings(target) if "special file" in p],
        "set-id bit": [p for p in _tree_findings(target) if "set-id" in p],
        "1 TiB apparent size": [str(p) for p in target.rglob("huge") if p.lstat().st_size >= 1 << 40],
    }
    return {"seen": seen, "errors": errors, "missed": [k for k, v in seen.items() if not v]}


# -- OC-06 ----------------------------------------------------------------------------------------

_STATE_HUNT = r"""
import time
NAMES = {"state.json", "exec.fifo", "console.sock", "notify.sock", "init.pid"}
def is_state(name):
    return name in NAMES or name.endswith(".state") or name.startswith("runsc")
found = {}
deadline = time.monotonic() + P["walk_s"]
walked = 0
me = os.getpid()
tops = ["/"]
for d in os.listdir("/proc"):
    if d.isdigit() and int(d) != me:
        tops += [f"/proc/{d}/root", f"/proc/{d}/cwd"]
        try:
            for fd in os.listdir(f"/proc/{d}/fd"):
                link = os.readlink(f"/proc/{d}/fd/{fd}")
                if is_state(os.path.basename(link)) or "/runc" in link or "/runsc" in link:
                    found[f"/proc/{d}/fd/{fd}"] = link
        except OSError:
            pass
own_root = os.stat("/")
for top in tops:
    try:
        st = os.stat(top)
    except OSError:
        continue
    if top != "/" and (st.st_dev, st.st_ino) == (own_root.st_dev, own_root.st_ino):
        continue  # the same root as ours: already walked
    for current, dirs, files in os.walk(top):
        if top == "/" and current == "/":
            # /proc and /sys are walked through the visible pids above; /usr is the host's /usr or
            # the image's cache, both read-only and never a runtime's state
            dirs[:] = [x for x in dirs if x not in ("proc", "sys", "dev", "usr")]
        walked += len(dirs) + len(files)
        for name in dirs + files:
            if is_state(name):
                found[os.path.join(current, name)] = name
        if time.monotonic() > deadline or walked > P["max_entries"]:
            break
note("walked", walked)
note("found", found)
for path in sorted(found):
    # O_NONBLOCK: a FIFO without a reader answers ENXIO, which still means write permission passed
    r = rec(f"open {path} for writing", lambda p=path: os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK)))
    if not r["ok"] and r.get("errno") == "ENXIO":
        _R[f"open {path} for writing"] = {"ok": True, "value": "ENXIO: a FIFO without a reader (writable)"}
    parent = os.path.dirname(path)
    def create(p=parent):
        os.close(os.open(os.path.join(p, P["marker"]), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    rec(f"create a file beside {path}", create)
done()
"""
_WALK_S = 8.0
_MAX_ENTRIES = 400_000


def _state_snapshot(state_dir: str | None) -> dict[str, Any] | None:
    if state_dir is None:
        return None
    seen: dict[str, Any] = {}
    for current, dirs, files in os.walk(state_dir):
        for name in dirs + files:
            path = os.path.join(current, name)
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                digest = _sha256(path) if stat.S_ISREG(info.st_mode) else None
                seen[os.path.relpath(path, state_dir)] = (
                    stat.filemode(info.st_mode),
                    info.st_size,
                    info.st_mtime_ns,
                    digest,
                )
    return seen


def _state_breaches(report: Mapping[str, Any]) -> list[str]:
    return [f"{name} succeeded" for name in succeeded(report) if name.startswith(("open ", "create "))]


def oc_06(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    marker = rc.canary("statemark")
    found: dict[str, Any] = {}

    def observe(sandbox: Any) -> Callable[[], None]:
        found["dir"] = runtime_state_dir(sandbox)
        found["before"] = _state_snapshot(found["dir"])
        return lambda: found.update(after=_state_snapshot(found["dir"]))

    code = attack(_STATE_HUNT, walk_s=_WALK_S, max_entries=_MAX_ENTRIES, marker=marker)
    target = rc.target
    if not isinstance(target, ContainTarget):
        raise TypeError(f"OC-06 needs a contain target to locate the runtime state, got {target.name}")
    run = target.run_observed(["python3", "-c", code], observer=observe, timeout_s=30.0)
    report = attack_report(run) or {}
    breaches = _state_breaches(report)
    if found.get("before") is not None and found.get("before") != found.get("after"):
        breaches.append(f"the runtime's state directory {found['dir']} changed while the attack ran")
    control_target, decoy = _decoy_state(rc)
    control = control_target.run_python(code, timeout_s=30.0, boundary=decoy.boundary())
    shown = [b for b in _state_breaches(attack_report(control) or {}) if decoy.sandbox_path in b]
    rc.remove_later(decoy.host / "runc" / marker)
    return verdict(
        "OC-06",
        breaches=breaches,
        control_shows_breach=bool(shown),
        contained=(
            f"no runtime state visible and writable from inside ({len((report.get('found') or {}).get('value') or {})} "
            f"candidates); {found.get('dir')} unchanged"
        ),
        control=f"with a state directory bound in, the same hunt opened: {'; '.join(shown[:3]) or 'nothing'}",
        evidence={
            "attack": report,
            "run": run_evidence(run),
            "state_dir": found.get("dir"),
            "state_before": found.get("before"),
            "state_after": found.get("after"),
            "judged_by": "the kernel's answer and the state directory's files before and after, on the host",
        },
        missing=(
            "the attack did not report"
            if not report
            else None
            if found.get("before") is not None
            else "the backend did not say where its runtime keeps this container's state"
        ),
    )


def _decoy_state(rc: Any) -> tuple[Target, Any]:
    """A relaxed target with a runtime-shaped state directory bound in writable."""
    workspace = rc.workspace("state")
    container = workspace.host / "runc" / "contain-probe-decoy"
    container.mkdir(parents=True)
    (container / "state.json").write_text('{"id": "contain-probe-decoy"}\n')
    os.mkfifo(container / "exec.fifo", 0o600)
    rc.give_to_sandbox(workspace.host)
    return rc.sandboxed_control, workspace


# -- the table ------------------------------------------------------------------------------------

_NO_IMAGE = (
    "not applicable by construction: the {kind} target unpacks no image (its root is the host's /usr, read-only), "
    "so contain's image unpacker never runs for it"
)
_NO_STATE = (
    "not applicable by construction: the {kind} target's runtime (bwrap) keeps no state directory, exec FIFO or "
    "console socket on the host"
)
_NO_OCI_STATE_IN_VMM = (
    "not applicable by construction: the microvm target runs no OCI runtime; QEMU keeps no state directory, "
    "exec FIFO or console socket (its agent channel is an anonymous socket pair, its console a pipe)"
)
_WRAP_UNKNOWN = (
    "not applicable: a --wrap target's image and runtime state are unknown to the probe, so no outside judge "
    "exists; test an OCI runtime through --backend container:runc or container:runsc"
)


def _case(case_id: str, title: str, expected: str, check: Any, **na: str) -> ProbeCase:
    return ProbeCase(case_id, Category.OC, title, expected, check, dict(na))


CASES: tuple[ProbeCase, ...] = (
    _case(
        "OC-01",
        "overwrite the runtime binary via /proc/<pid>/exe",
        "open for writing fails; binaries byte-identical",
        oc_01,
    ),
    _case("OC-02", "leaked host directory descriptors or cwd", "no descriptor or cwd resolves outside the root", oc_02),
    _case("OC-03", "write kernel knobs, read masked /proc and /sys paths", "writes refused; masked paths empty", oc_03),
    _case(
        "OC-04", "capabilities, setns, mount proc, unshare -U and mount", "no capability; every attempt refused", oc_04
    ),
    _case(
        "OC-05",
        "crafted image or rootfs tarball",
        "refused or confined; no device, no set-id, size bounded",
        oc_05,
        process=_NO_IMAGE.format(kind="process"),
        wrap=_WRAP_UNKNOWN,
        host=_NO_IMAGE.format(kind="host"),
    ),
    _case(
        "OC-06",
        "find and write the runtime's state directory",
        "not visible or not writable from inside",
        oc_06,
        process=_NO_STATE.format(kind="process"),
        microvm=_NO_OCI_STATE_IN_VMM,
        wrap=_WRAP_UNKNOWN,
        host=_NO_STATE.format(kind="host"),
    ),
)
