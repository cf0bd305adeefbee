"""PR and FD cases: processes, procfs, inherited descriptors and terminals.

Judges: a host *marker process* (a sleeper the probe starts, with a canary in its command line
and environment) must not be visible from inside: its canary must not reach a sink. The
posture (PR-06) is compared with ``EXPECTED_POSTURE``, a table of rows with reasons, and the
namespace inodes the attack reports are compared on the host with the host's own. ptrace (PR-03)
and TIOCSTI (FD-04) are judged by the kernel's answer and, for TIOCSTI, by reading the pty the
control injected into.

Controls run on the bare host. They are bounded: the ptrace control attaches only to the probe's
own marker process (never to "every visible pid" on the host) and detaches at once; the TIOCSTI
control injects into a pty the probe owns and reads back, so nothing reaches a real terminal.
"""

from __future__ import annotations

import os
import select
import termios
from dataclasses import dataclass
from typing import Any

from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext
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

__all__ = ["ALLOWED_ENV_KEYS", "CASES", "EXPECTED_POSTURE", "PostureRow"]


@dataclass(frozen=True)
class PostureRow:
    """One line of the expected posture of a sandboxed process, with the reason."""

    field: str
    expected: str
    why: str


EXPECTED_POSTURE: tuple[PostureRow, ...] = (
    PostureRow("CapInh", "0000000000000000", "no inheritable capability survives exec"),
    PostureRow("CapPrm", "0000000000000000", "no permitted capability, even in the user namespace"),
    PostureRow("CapEff", "0000000000000000", "no effective capability"),
    PostureRow("CapBnd", "0000000000000000", "the bounding set is empty, so none can be regained"),
    PostureRow("CapAmb", "0000000000000000", "no ambient capability"),
    PostureRow("NoNewPrivs", "1", "setuid binaries and file caps cannot raise privilege"),
    PostureRow("Seccomp", "2", "a seccomp filter is installed"),
    PostureRow("RLIMIT_CORE", "0 0", "no core dump can carry memory out"),
    PostureRow("umask", "022 or stricter", "new files are not group/world writable"),
    PostureRow("namespaces", "user mnt pid net ipc uts cgroup differ from the host", "every namespace is fresh"),
    PostureRow("env", "only allow-listed keys", "nothing of the caller's environment leaks in"),
)

# Keys a default sandbox's environment may hold (runtime/plan.py plan_base_env).
ALLOWED_ENV_KEYS = frozenset({"HOME", "LANG", "PATH", "TMPDIR", "USER"})
_NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")


_LIST_PROCS = r"""
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
note("visible pids", pids)
rec("/proc/1/comm", readf, "/proc/1/comm")
# Other processes' command lines and environments may hold the host's real secrets: only this
# run's canaries found in them are printed, and the byte count of what was readable.
def scan(path):
    data = readf(path, 1 << 20)
    return {"bytes": len(data), "canaries": canaries(data)}
for pid in pids:
    rec(f"cmdline {pid}", scan, f"/proc/{pid}/cmdline")
    if P.get("environ"):
        rec(f"environ {pid}", scan, f"/proc/{pid}/environ")
rec("environ of ppid", scan, f"/proc/{os.getppid()}/environ")
done()
"""


def _marker_case(ctx: ProbeContext, case_id: str, *, environ: bool, contained: str) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("marker")
    pid = rc.spawn_marker_process(canary)
    run, report = run_attack(rc.target, _LIST_PROCS, environ=environ, pattern=rc.canary_pattern)
    control, _ = run_attack(rc.control, _LIST_PROCS, environ=environ, pattern=rc.canary_pattern)
    shown = bool(canary_sinks(control, canary))
    breaches = [
        f"the host marker process (pid {pid}) was visible: its canary reached {s}" for s in canary_sinks(run, canary)
    ]
    visible = report.get("visible pids", {}).get("value") or []
    comm = str(report.get("/proc/1/comm", {}).get("value", "")).strip()
    host_init = _read("/proc/1/comm").strip()
    if case_id == "PR-01" and rc.target.has_contain_hooks and comm and comm == host_init and comm != "supervisor":
        breaches.append(f"pid 1 inside is the host's init ({comm})")
    return verdict(
        case_id,
        breaches=breaches,
        control_shows_breach=shown,
        contained=f"{contained} ({len(visible)} pids visible, pid 1 is {comm or 'unreadable'})",
        control=f"on the bare host the marker process {'was' if shown else 'was NOT'} found",
        evidence={"attack": report, "run": run_evidence(run), "host_init_comm": host_init},
        missing=None if report else "the attack did not report",
    )


def pr_01(ctx: ProbeContext) -> CaseResult:
    return _marker_case(ctx, "PR-01", environ=False, contained="only sandbox pids are visible")


def pr_02(ctx: ProbeContext) -> CaseResult:
    return _marker_case(ctx, "PR-02", environ=True, contained="no host process environ or cmdline was readable")


_PTRACE = r"""
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
import time
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid())
def marked(pid):
    try:
        return P["marker"].encode() in readf(f"/proc/{pid}/cmdline")
    except OSError:  # exited since the listing (a busy host): not the marker process
        return False
if P.get("only_marked"):
    pids = [p for p in pids if marked(p)]
else:  # pid 1 and the parent exist even where /proc hides them (hidepid=2: a microVM guest's agent)
    pids = sorted(set(pids) | {1, os.getppid()})
note("targets", pids)
for pid in pids[:64]:
    r = rec(f"attach {pid}", sysc, 101, PTRACE_ATTACH, pid, 0, 0)
    if r["ok"]:
        time.sleep(0.05)
        rec(f"detach {pid}", sysc, 101, PTRACE_DETACH, pid, 0, 0)
done()
"""


def pr_03(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("ptrace")
    rc.spawn_marker_process(canary)
    run, report = run_attack(rc.target, _PTRACE, marker=canary)
    # Control: attach only to the probe's own marker process, never to the host's others.
    _control, control_report = run_attack(rc.control, _PTRACE, marker=canary, only_marked=True)
    attached = [n for n in succeeded(report) if n.startswith("attach ")]
    shown = any(n.startswith("attach ") for n in succeeded(control_report))
    targets = report.get("targets", {}).get("value") or []
    return verdict(
        "PR-03",
        breaches=[f"ptrace {n} succeeded" for n in attached],
        control_shows_breach=shown,
        contained=f"PTRACE_ATTACH failed for every visible pid ({len(targets)} tried)",
        control=f"on the bare host, attaching to the probe's marker process {'worked' if shown else 'did NOT work'}",
        evidence={"attack": report, "run": run_evidence(run), "judged_by": "the kernel's answer to ptrace"},
        missing=None if targets else "the attack saw no pid to attach to (pid 1 should always be there)",
    )


_KERNEL_INFO = r"""
def kallsyms():
    lines = open("/proc/kallsyms").read().splitlines()
    nonzero = [l for l in lines[:2000] if not l.startswith("0000000000000000")]
    return {"lines": len(lines), "nonzero": len(nonzero)}  # counts only: addresses defeat KASLR
rec("kallsyms", kallsyms)
def dmesg():
    buf = ctypes.create_string_buffer(65536)
    n = sysc(103, 3, buf, 65536)  # syslog(SYSLOG_ACTION_READ_ALL)
    return {"bytes": n}
rec("dmesg", dmesg)
rec("debugfs", os.listdir, "/sys/kernel/debug")
done()
"""


def _kernel_leaks(report: dict[str, Any]) -> list[str]:
    out = []
    kallsyms = report.get("kallsyms", {})
    if kallsyms.get("ok") and (kallsyms.get("value") or {}).get("nonzero"):
        out.append("/proc/kallsyms shows real kernel addresses")
    dmesg = report.get("dmesg", {})
    if dmesg.get("ok") and (dmesg.get("value") or {}).get("bytes", 0) > 0:
        out.append("the kernel log (syslog READ_ALL) was readable")
    debugfs = report.get("debugfs", {})
    if debugfs.get("ok") and debugfs.get("value"):
        out.append("/sys/kernel/debug is listable")
    return out


def pr_05(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    run, report = run_attack(rc.target, _KERNEL_INFO)
    _control, control_report = run_attack(rc.control, _KERNEL_INFO)
    shown = bool(_kernel_leaks(control_report))
    return verdict(
        "PR-05",
        breaches=_kernel_leaks(report),
        control_shows_breach=shown,
        contained="kallsyms addresses are zeroed or absent, dmesg refused, debugfs absent",
        control=f"on the bare host (root) the judge saw: {', '.join(_kernel_leaks(control_report)) or 'nothing'}",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_POSTURE = r"""
import resource, glob
def prctl(*args):
    r = libc.prctl(*[ctypes.c_ulong(a) for a in args], *[ctypes.c_ulong(0)] * (5 - len(args)))
    if r < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return r
def ambient_mask():
    # PR_CAP_AMBIENT(47), PR_CAP_AMBIENT_IS_SET(1) for each capability until EINVAL
    mask = 0
    for cap in range(64):
        try:
            if prctl(47, 1, cap):
                mask |= 1 << cap
        except OSError:
            break
    return f"{mask:016x}"
# A kernel whose status file lacks a line (gVisor has no NoNewPrivs and no CapAmb line) is asked
# through prctl instead, for the calling thread; the source of each reading is recorded.
FALLBACK = {"NoNewPrivs": lambda: str(prctl(39)), "CapAmb": ambient_mask}  # PR_GET_NO_NEW_PRIVS
status = {}
sources = {}
for task in sorted(glob.glob("/proc/self/task/*")):
    fields = {}
    for line in open(task + "/status"):
        k, _, v = line.partition(":")
        if k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Uid"):
            fields[k] = v.strip()
    for k, ask in FALLBACK.items():
        if k not in fields and os.path.basename(task) == str(os.getpid()):
            try:
                fields[k] = ask()
                sources[k] = "prctl"
            except OSError as e:
                sources[k] = "prctl failed: " + errno.errorcode.get(e.errno or 0, str(e.errno))
    status[os.path.basename(task)] = fields
note("threads", status)
note("sources", sources)
ns = {}
for n in P["namespaces"]:
    try:
        ns[n] = os.readlink(f"/proc/self/ns/{n}")
    except OSError as e:
        ns[n] = "absent: " + errno.errorcode.get(e.errno or 0, str(e.errno))
note("ns", ns)
note("RLIMIT_CORE", " ".join(str(x) for x in resource.getrlimit(resource.RLIMIT_CORE)))
old = os.umask(0); os.umask(old)
note("umask", f"{old:03o}")
note("env", sorted(os.environ))
done()
"""


def _posture_mismatches(report: dict[str, Any], *, host_ns: dict[str, str], allowed_env: frozenset[str]) -> list[str]:
    out: list[str] = []
    threads = (report.get("threads") or {}).get("value") or {}
    if not threads:
        return ["no thread status was reported"]
    for row in EXPECTED_POSTURE:
        if row.field.startswith("Cap") or row.field in ("NoNewPrivs", "Seccomp"):
            for tid, fields in threads.items():
                if fields.get(row.field) != row.expected:
                    out.append(
                        f"thread {tid}: {row.field} is {fields.get(row.field)}, expected {row.expected} ({row.why})"
                    )
        elif row.field == "RLIMIT_CORE":
            value = (report.get("RLIMIT_CORE") or {}).get("value")
            if value != row.expected:
                out.append(f"RLIMIT_CORE is {value}, expected {row.expected} ({row.why})")
        elif row.field == "umask":
            value = int((report.get("umask") or {}).get("value") or "0", 8)
            if value & 0o022 != 0o022:
                out.append(f"umask is {value:03o}, expected 022 or stricter ({row.why})")
        elif row.field == "namespaces":
            ns = (report.get("ns") or {}).get("value") or {}
            same = [n for n in _NAMESPACES if ns.get(n) == host_ns.get(n)]
            if same:
                out.append(f"namespaces shared with the host: {', '.join(same)} ({row.why})")
        elif row.field == "env":
            keys = set((report.get("env") or {}).get("value") or [])
            extra = sorted(keys - allowed_env)
            if extra:
                out.append(f"environment keys beyond the allow-list: {', '.join(extra[:20])} ({row.why})")
    return out


def pr_06(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    host_ns = {n: os.readlink(f"/proc/self/ns/{n}") for n in _NAMESPACES}
    run, report = run_attack(rc.target, _POSTURE, namespaces=list(_NAMESPACES))
    _control, control_report = run_attack(rc.control, _POSTURE, namespaces=list(_NAMESPACES))
    mismatches = _posture_mismatches(report, host_ns=host_ns, allowed_env=ALLOWED_ENV_KEYS)
    control_mismatches = _posture_mismatches(control_report, host_ns=host_ns, allowed_env=ALLOWED_ENV_KEYS)
    return verdict(
        "PR-06",
        breaches=mismatches,
        control_shows_breach=bool(control_mismatches),
        contained=f"every thread matches the expected posture ({len(EXPECTED_POSTURE)} rows)",
        control=f"on the bare host {len(control_mismatches)} posture rows differ",
        evidence={
            "attack": report,
            "expected": [row.__dict__ for row in EXPECTED_POSTURE],
            "host_namespaces": host_ns,
            "run": run_evidence(run),
        },
        missing=None if report else "the attack did not report",
    )


_FDS = r"""
import stat
fds = {}
for name in os.listdir("/proc/self/fd"):  # the fd listdir itself used is closed by now: EBADF
    fd = int(name)
    try:
        st = os.fstat(fd)
    except OSError:
        continue
    kind = ("dir" if stat.S_ISDIR(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode)
            else "file" if stat.S_ISREG(st.st_mode) else "pipe" if stat.S_ISFIFO(st.st_mode)
            else "char" if stat.S_ISCHR(st.st_mode) else "other")
    try:
        link = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        link = "?"
    fds[str(fd)] = {"kind": kind, "link": link}
note("fds", fds)
done()
"""

_FD_ALLOWED_KINDS = {"0": {"char", "pipe", "file"}, "1": {"pipe", "char", "file"}, "2": {"pipe", "char", "file"}}


def _fd_findings(report: dict[str, Any]) -> list[str]:
    fds = (report.get("fds") or {}).get("value") or {}
    out = []
    for fd, info in sorted(fds.items(), key=lambda kv: int(kv[0])):
        if fd not in _FD_ALLOWED_KINDS:
            out.append(f"fd {fd} is inherited: {info['kind']} {info['link']}")
        elif info["kind"] not in _FD_ALLOWED_KINDS[fd]:
            out.append(f"fd {fd} is a {info['kind']} ({info['link']})")
    return out


# The control inherits a directory fd (7, the host root) and a file fd (8) through sh.
_SH_INHERIT = 'exec 7</ 8</etc/hostname; exec python3 -c "$0"'


def fd_01(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    run, report = run_attack(rc.target, _FDS)
    control = rc.control.run_argv(["sh", "-c", _SH_INHERIT, attack(_FDS)])
    control_findings = _fd_findings(attack_report(control) or {})
    return verdict(
        "FD-01",
        breaches=_fd_findings(report),
        control_shows_breach=bool(control_findings),
        contained="only fds 0, 1 and 2 are open at start (pipes or /dev/null)",
        control=f"a host process given extra fds was flagged: {'; '.join(control_findings) or 'nothing'}",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_FD_CLIMB = r"""
import stat
target = P["path"].lstrip("/")
dirfds = []
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            dirfds.append(fd)
    except OSError:
        pass
note("dir fds", dirfds)
for fd in dirfds:
    def climb(fd=fd):
        cur = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        for _ in range(64):
            nxt = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
            os.close(cur)
            cur = nxt
        f = os.open(target, os.O_RDONLY, dir_fd=cur)
        return os.read(f, 4096)
    rec(f"openat chain from fd {fd}", climb)
    def cd(fd=fd):
        os.chdir(f"/proc/self/fd/{fd}")
        os.chdir("/".join([".."] * 64))
        return readf(target)
    rec(f"cd /proc/self/fd/{fd}", cd)
done()
"""


def fd_03(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("fdclimb")
    home_file = rc.plant_home_file(canary)
    run, report = run_attack(rc.target, _FD_CLIMB, path=str(home_file))
    control = rc.control.run_argv(["sh", "-c", _SH_INHERIT, attack(_FD_CLIMB, path=str(home_file))])
    shown = bool(canary_sinks(control, canary))
    dirfds = (report.get("dir fds") or {}).get("value") or []
    return verdict(
        "FD-03",
        breaches=[f"the $HOME canary reached {s} through an inherited directory fd" for s in canary_sinks(run, canary)],
        control_shows_breach=shown,
        contained=f"no path outside the sandbox was reachable ({len(dirfds)} inherited directory fds)",
        control=f"a host process given a directory fd {'reached' if shown else 'did NOT reach'} the canary",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_TIOCSTI = r"""
import fcntl, termios
payload = P["payload"].encode()
def sti(fd):
    for ch in payload:
        fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
    return len(payload)
rec("TIOCSTI fd 0", sti, 0)
def linux(fd):
    fcntl.ioctl(fd, 0x541C, bytes([2]))  # TIOCLINUX subcode 2: set selection
rec("TIOCLINUX fd 0", linux, 0)
def tty():
    fd = os.open("/dev/tty", os.O_RDWR)
    try:
        return sti(fd)
    finally:
        os.close(fd)
rec("TIOCSTI /dev/tty", tty)
note("isatty 0", os.isatty(0))
done()
"""


def _read_pty(fd: int) -> bytes:
    data = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def fd_04(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("tiocsti")
    marker = f"/tmp/contain-probe-{canary}"
    rc.remove_later(marker)
    payload = f"echo pwned > {marker}\n"
    run, report = run_attack(rc.target, _TIOCSTI, payload=payload)
    injected = [n for n in succeeded(report, "TIOCSTI fd 0", "TIOCSTI /dev/tty")]
    breaches = [f"{n} injected input" for n in injected]
    if os.path.exists(marker):
        breaches.append(f"{marker} exists on the host")
    # Control: stdin is a pty the probe owns; what the attack injects shows up on its input side.
    master, slave = os.openpty()
    try:
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        code = attack(_TIOCSTI, payload=payload)
        rc.control.run_argv(["sh", "-c", 'exec python3 -c "$0" <"$1"', code, os.ttyname(slave)])
        os.set_blocking(slave, False)
        seen = _read_pty(slave)
    finally:
        os.close(master)
        os.close(slave)
    shown = canary.encode() in seen
    return verdict(
        "FD-04",
        breaches=breaches,
        control_shows_breach=shown,
        contained="TIOCSTI/TIOCLINUX failed on fd 0 and /dev/tty; no marker on the host",
        control=f"on the bare host with a pty as stdin the injected line {'arrived' if shown else 'did NOT arrive'}",
        evidence={"attack": report, "run": run_evidence(run), "judged_by": "the kernel's answer and the host marker"},
        missing=None if report else "the attack did not report",
    )


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _case(case_id: str, category: Category, title: str, expected: str, check: Any, **na: str) -> ProbeCase:
    return ProbeCase(case_id, category, title, expected, check, dict(na))


CASES: tuple[ProbeCase, ...] = (
    _case(
        "PR-01", Category.PR, "count /proc pids; read /proc/1/comm", "only sandbox pids; pid 1 = sandbox init", pr_01
    ),
    _case("PR-02", Category.PR, "read environ/cmdline of visible pids for canaries", "no host process visible", pr_02),
    _case("PR-03", Category.PR, "PTRACE_ATTACH pid 1 and every visible pid", "EPERM/EACCES", pr_03),
    _case("PR-05", Category.PR, "read /proc/kallsyms, dmesg, /sys/kernel/debug", "zeroed / EPERM / absent", pr_05),
    _case(
        "PR-06",
        Category.PR,
        "posture: caps, NoNewPrivs, seccomp, threads, namespaces, rlimits, umask, env",
        "exact match with the expected posture",
        pr_06,
    ),
    _case("FD-01", Category.FD, "list and classify /proc/self/fd at start", "only 0/1/2", fd_01),
    _case("FD-03", Category.FD, "openat('..') chains from inherited dir fds", "nothing outside reachable", fd_03),
    _case("FD-04", Category.FD, "TIOCSTI/TIOCLINUX on fd 0 and /dev/tty", "EPERM/EIO/ENOTTY; marker absent", fd_04),
)
