"""LF and XT cases: cancellation, persistence, and residue left for the next task.

Judges stand on the host. Every attack process carries the case's canary in its command line
(the attack's parameters are part of ``python3 -c``), so "no process survived" is checked by
scanning host ``/proc`` for the canary after the run returned, whatever namespaces the attacker
made. Files, IPC objects and cgroups left behind are read with ``snapshot``. Cross-task cases
(XT) run task N and then task N+1 in two fresh sandboxes, as contain runs two tasks; N+1 looks
for what N left, and what it finds must reach a sink (its output) to count.

Controls run on the bare host unless that would be unsafe: every leftover process is bounded
(it exits by itself after a fixed time) and killed by the probe afterwards; IPC objects and keys
the control creates on the host are removed by a cleanup run; the zombie control runs in a
relaxed but bounded sandbox. XT-07 (microVM snapshots) is in cases_vm.py.

Why one file past 600 lines: one mechanism, the LF and XT rows of the catalogue; each case keeps
its attack, its host-side judge and its control side by side.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext, Target
from contain.probe.context import (
    RunContext,
    as_run_context,
    canary_sinks,
    run_attack,
    run_evidence,
    succeeded,
    verdict,
)
from contain.probe.snapshot import ProcessEntry, diff, ipc_key, kill_marked, marked_processes, take_snapshot
from contain.probe.targets import DEFAULT_PROBE_BOUNDARY, ContainTarget, WrapTarget, _BoundedHostRunner, target_kind

__all__ = ["CASES"]

_HOOKS = "needs contain's own hooks"
_LEFTOVER_S = 20  # every process an attack leaves behind exits by itself after this
_LAUNCHER_GRACE_S = 5.0  # LF-08: how long the sandbox may take to die after its launcher


def _survivors(marker: str, *, settle_s: float = 0.5) -> list[str]:
    """Marked processes alive on the host after a short settle; they are then killed."""
    time.sleep(settle_s)
    found: dict[int, str] = {}
    for _ in range(10):  # a fork chain hops pids: one scan of /proc can miss it
        found.update((p.pid, p.describe()) for p in marked_processes([marker]))
        time.sleep(0.05)
    _reap(marker)
    return list(found.values())


def _reap(marker: str) -> None:
    """Kill marked processes until none is seen three times in a row (a fork chain can race)."""
    quiet = 0
    for _ in range(200):
        if kill_marked([marker]):
            quiet = 0
        else:
            quiet += 1
            if quiet >= 10:
                return
        time.sleep(0.02)


_DETACH = r"""
import subprocess
sleeper = ["python3", "-c", f"import time; time.sleep({P['life_s']})", P["marker"]]
q = " ".join("'" + a + "'" for a in sleeper)
rec("background (sleep &)", subprocess.Popen, ["sh", "-c", f"({q} &)"])
rec("nohup", subprocess.Popen, ["nohup"] + sleeper, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
rec("setsid (disown)", subprocess.Popen, ["setsid"] + sleeper)
import time; time.sleep(0.3)
done()
"""


def _detach_case(rc: RunContext, case_id: str, body: str, contained: str, timeout_s: float = 10) -> CaseResult:
    canary = rc.canary("leftover")
    run, report = run_attack(rc.target, body, marker=canary, life_s=_LEFTOVER_S, timeout_s=timeout_s)
    left = _survivors(canary)
    _control, _ = run_attack(rc.control, body, marker=canary, life_s=_LEFTOVER_S, timeout_s=timeout_s)
    shown = bool(_survivors(canary))
    return verdict(
        case_id,
        breaches=[f"still alive after the run: {p}" for p in left],
        control_shows_breach=shown,
        contained=contained,
        control=f"on the bare host a detached process {'survived' if shown else 'did NOT survive'} the run",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report or run.timed_out else "the attack did not report",
    )


def lf_01(ctx: ProbeContext) -> CaseResult:
    return _detach_case(
        as_run_context(ctx), "LF-01", _DETACH, "no background, nohup or setsid process outlived the run"
    )


_DOUBLE_FORK = r"""
import signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        time.sleep(P["life_s"])
        os._exit(0)
    os._exit(0)
time.sleep(0.3)
note("double-forked", True)
done()
"""


def lf_02(ctx: ProbeContext) -> CaseResult:
    return _detach_case(
        as_run_context(ctx),
        "LF-02",
        _DOUBLE_FORK,
        "the setsid + double-fork daemon ignoring SIGTERM/SIGHUP died at teardown",
    )


_TREE = r"""
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for i in range(5):
    if os.fork() == 0:
        if P.get("setsid"):
            os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(P["life_s"])
        os._exit(0)
note("tree", 5)
done()
time.sleep(P["life_s"])
"""


def lf_03(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("cancel")
    before = take_snapshot()
    run, report = run_attack(rc.target, _TREE, marker=canary, life_s=_LEFTOVER_S, timeout_s=2)
    cancelled_at = time.monotonic()
    left = _survivors(canary, settle_s=0.2)
    gone_within = time.monotonic() - cancelled_at
    cgroups = diff(before, take_snapshot()).appeared.get("cgroups", ())
    _control, _ = run_attack(rc.control, _TREE, marker=canary, life_s=_LEFTOVER_S, timeout_s=2, setsid=True)
    shown = bool(_survivors(canary))
    breaches = [f"still alive after the cancel: {p}" for p in left]
    breaches += [f"the sandbox's cgroup was not removed: {c}" for c in cgroups]
    return verdict(
        "LF-03",
        breaches=breaches,
        control_shows_breach=shown,
        contained=f"cancelled at the 2s deadline; the whole tree was gone within {gone_within:.1f}s; no cgroup left",
        control=f"on the bare host a tree in its own session {'survived' if shown else 'did NOT survive'} the cancel",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if run.timed_out else "the run was not cancelled by its deadline",
    )


_CGROUP_MOVE = r"""
import glob
own = {}
for line in open("/proc/self/cgroup"):
    _, ctrls, path = line.rstrip("\n").split(":", 2)
    own[ctrls] = path
note("own cgroups", own)
procs = sorted(glob.glob("/sys/fs/cgroup/*/cgroup.procs") + glob.glob("/sys/fs/cgroup/cgroup.procs"))
for path in procs:
    hierarchy = path.split("/")[4] if path.count("/") > 4 else ""
    if P.get("only_noop") and own.get(hierarchy) != "/":
        continue  # the control never moves itself out of a cgroup it is really in
    def move(path=path):
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    rec(f"write {path}", move)
done()
"""


def lf_05(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("cgmove")
    run, report = run_attack(rc.target, _CGROUP_MOVE, marker=canary)
    left = _survivors(canary)
    _control, control_report = run_attack(rc.control, _CGROUP_MOVE, marker=canary, only_noop=True)
    moved = [n for n in succeeded(report) if n.startswith("write ")]
    return verdict(
        "LF-05",
        breaches=[f"{n} succeeded" for n in moved] + [f"still alive after the run: {p}" for p in left],
        control_shows_breach=any(n.startswith("write ") for n in succeeded(control_report)),
        contained="no cgroup.procs was writable (cgroupfs absent or read-only); nothing survived",
        control="on the bare host (root) writing cgroup.procs of a cgroup it is already in worked",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_FORK_RACE = r"""
import time
start = time.monotonic()
end = start + P["life_s"]
note("racing", True)
done()
sys.stdout.flush()
while time.monotonic() < end:  # bounded: the chain gives up by itself
    pid = os.fork()
    if pid:
        os._exit(0)
    os.setsid()
    # Hop fast while the kill is racing it; a survivor then hops slowly, so that the judge's
    # /proc scans (which take longer than a fast hop) cannot miss it every time.
    time.sleep(0.01 if time.monotonic() - start < P["race_s"] else 0.25)
"""


def lf_06(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("forkrace")
    run, report = run_attack(rc.target, _FORK_RACE, marker=canary, life_s=8, race_s=1.0, timeout_s=3)
    left = _survivors(canary, settle_s=1.0)
    _control, _ = run_attack(rc.control, _FORK_RACE, marker=canary, life_s=8, race_s=1.0, timeout_s=3)
    shown = bool(_survivors(canary, settle_s=1.0))
    return verdict(
        "LF-06",
        breaches=[f"a racing fork survived teardown: {p}" for p in left],
        control_shows_breach=shown,
        contained="the fork chain died with the sandbox (pid namespace / cgroup teardown)",
        control=f"on the bare host the chain {'outran' if shown else 'did NOT outrun'} a process-group kill",
        evidence={"attack": report, "run": run_evidence(run)},
    )


_SCHEDULE = r"""
import subprocess
m = P["marker_file"]
def run(argv, stdin=None):
    r = subprocess.run(argv, input=stdin, capture_output=True, timeout=10)
    if r.returncode:
        raise OSError(errno.EPERM, (r.stderr or r.stdout).decode()[-200:])
    return r.stdout
if not P.get("only_autostart"):
    rec("systemd-run --user", run, ["systemd-run", "--user", "--on-active=30", "touch", m])
    rec("crontab", run, ["crontab", "-"], f"* * * * * touch {m}\n".encode())
    rec("at now+1min", run, ["at", "now", "+", "1", "minute"], f"touch {m}\n".encode())
def autostart(home):
    d = f"{home}/.config/autostart"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/contain-probe-{P['canary']}.desktop", "w") as f:
        f.write(f"[Desktop Entry]\nType=Application\nExec=touch {m}\n")
rec("autostart in the host $HOME", autostart, P["host_home"])
done()
"""

_SPOOLS = ("/var/spool/cron", "/var/spool/at", "/var/spool/cron/atjobs", "/var/spool/anacron")


def _scheduled(canary: str, home: Path, marker_file: str) -> list[str]:
    found = []
    autostart = home / ".config" / "autostart" / f"contain-probe-{canary}.desktop"
    if autostart.exists():
        found.append(f"autostart entry {autostart}")
    if os.path.exists(marker_file):
        found.append(f"{marker_file} was created")
    for spool in _SPOOLS:
        for path in Path(spool).rglob("*") if os.path.isdir(spool) else ():
            try:
                if path.is_file() and canary.encode() in path.read_bytes():
                    found.append(f"{path} mentions the canary")
            except OSError:
                continue
    units = home / ".config" / "systemd" / "user"
    if units.is_dir():
        found += [f"user unit {p}" for p in units.rglob("*") if canary in p.read_text(errors="ignore")]
    return found


def lf_07(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("sched")
    home = Path(os.environ.get("HOME") or os.path.expanduser("~"))
    marker_file = f"/tmp/contain-probe-{canary}"
    autostart = home / ".config" / "autostart" / f"contain-probe-{canary}.desktop"
    rc.remove_later(autostart)
    rc.remove_later(marker_file)
    params: dict[str, Any] = {"marker_file": marker_file, "canary": canary, "host_home": str(home)}
    run, report = run_attack(rc.target, _SCHEDULE, **params)
    found = _scheduled(canary, home, marker_file)
    autostart.unlink(missing_ok=True)
    _control, _ = run_attack(rc.control, _SCHEDULE, only_autostart=True, **params)
    shown = bool(_scheduled(canary, home, marker_file))
    return verdict(
        "LF-07",
        breaches=found,
        control_shows_breach=shown,
        contained="nothing was scheduled on the host (systemd-run, crontab, at, autostart)",
        control=f"on the bare host an autostart entry {'appeared' if shown else 'did NOT appear'}",
        evidence={"attack": report, "run": run_evidence(run), "spools_checked": list(_SPOOLS)},
        missing=None if report else "the attack did not report",
    )


_LAUNCHER = r"""
import json, sys
from contain.boundary import Boundary
from contain.runtime import Sandbox
spec = json.loads(sys.argv[1])
with Sandbox(Boundary.model_validate(spec["boundary"]), backend=spec["backend"]) as sb:
    print(sb.supervisor_pid, flush=True)
    print("run", flush=True)
    sb.run(["python3", "-c", "import time; time.sleep(%d)" % spec["life_s"], spec["marker"]], timeout=spec["life_s"])
"""


def _launch(target: Target, marker: str) -> tuple[subprocess.Popen[bytes], int | None]:
    """Start a launcher for ``target`` whose workload carries ``marker``; returns it and the
    host pid of the sandbox's init when known."""
    sleeper = ["python3", "-c", f"import time; time.sleep({_LEFTOVER_S})", marker]
    if isinstance(target, ContainTarget):
        spec = {
            "boundary": target.boundary_for(None),
            "backend": target.backend,
            "marker": marker,
            "life_s": _LEFTOVER_S,
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, json.dumps(spec)], stdout=subprocess.PIPE, start_new_session=True
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        proc.stdout.readline()  # "run": the launcher is about to start the workload
        return proc, int(line) if line.isdigit() else None
    if isinstance(target, _BoundedHostRunner):
        prefix = target.prefix if isinstance(target, WrapTarget) else []
        if not prefix:  # the bare-host control: a launcher whose workload detaches itself
            sleeper = [
                "python3",
                "-c",
                "import subprocess, sys, time; subprocess.Popen(['setsid', *sys.argv[1:]]); time.sleep(30)",
                *sleeper,
            ]
        return subprocess.Popen([*prefix, *sleeper], stdout=subprocess.DEVNULL, start_new_session=True), None
    raise TypeError(f"LF-08 does not know how to launch {type(target).__name__}")


def workload_processes(
    entries: list[ProcessEntry], *, launcher_pid: int, launcher_cmdline: str | None
) -> list[ProcessEntry]:
    """The marked processes that are the launched workload: not the launcher itself, and not a
    copy of it between fork and exec (it has the launcher's command line and vanishes at exec; a
    scan on a loaded host catches it, and taking it for the workload made LF-08's control see a
    workload that never was, then no survivor)."""
    return [p for p in entries if p.pid != launcher_pid and p.cmdline != launcher_cmdline]


# Target kinds whose workload has no host process: it runs in a guest kernel, so the host sees
# only the VMM (the sandbox's init pid), and "started" means the VMM is up and running the task.
_WORKLOAD_IN_A_GUEST = ("microvm",)


def _kill_launcher(target: Target, marker: str) -> dict[str, Any]:
    proc, init_pid = _launch(target, marker)
    in_guest = target_kind(target) in _WORKLOAD_IN_A_GUEST

    def others() -> list[Any]:  # the launcher's own command line carries the marker too
        found = marked_processes([marker])
        launcher = next((p.cmdline for p in found if p.pid == proc.pid), None)
        return workload_processes(found, launcher_pid=proc.pid, launcher_cmdline=launcher)

    deadline = time.monotonic() + 10
    while not others() and time.monotonic() < deadline:
        if in_guest and init_pid and _alive(init_pid):
            break  # a guest kernel runs the workload: on the host the sandbox is its VMM
        if init_pid and _alive(init_pid) and not _workload_visible(init_pid) and time.monotonic() > deadline - 8:
            break  # a user-space kernel (gVisor) runs the workload: no host process carries the marker
        time.sleep(0.05)
    visible = bool(others())
    started = visible or bool(init_pid and _alive(init_pid))
    os.kill(proc.pid, signal.SIGKILL)  # the launcher only, never its group
    proc.wait()
    killed_at = time.monotonic()
    deadline = killed_at + _LAUNCHER_GRACE_S
    while time.monotonic() < deadline and (marked_processes([marker]) or (init_pid and _alive(init_pid))):
        time.sleep(0.05)
    gone_after = time.monotonic() - killed_at
    left = [p.describe() for p in marked_processes([marker])]
    init_alive = bool(init_pid and _alive(init_pid))
    _reap(marker)
    if init_alive and init_pid:  # a breach must not leave a sandbox (a VM) running after the case
        with contextlib.suppress(ProcessLookupError):
            os.kill(init_pid, signal.SIGKILL)
    return {
        "workload_started": started,
        "workload_visible_on_host": visible,
        "survivors": left,
        "init_pid": init_pid,
        "init_alive": init_alive,
        "seconds_until_gone": None if left or init_alive else round(gone_after, 3),
    }


def _workload_visible(init_pid: int) -> bool:
    """Whether the sandbox's workload runs as host processes in the init's pid namespace (bwrap,
    runc); under runsc the host pid is gVisor's own process and the workload lives in its kernel."""
    try:
        return os.readlink(f"/proc/{init_pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    except OSError:
        return True


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def lf_08(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("launcher")
    outcome = _kill_launcher(rc.target, canary)
    control = _kill_launcher(rc.control, canary)
    breaches = [f"the workload outlived its killed launcher: {p}" for p in outcome["survivors"]]
    if outcome["init_alive"]:
        breaches.append(f"the sandbox's init (host pid {outcome['init_pid']}) outlived its killed launcher")
    return verdict(
        "LF-08",
        breaches=breaches,
        control_shows_breach=bool(control["survivors"]),
        contained=f"kill -9 of the launcher took the whole sandbox with it in {outcome['seconds_until_gone']}s",
        control=(
            f"on the bare host a detached workload {'survived' if control['survivors'] else 'did NOT survive'} "
            "its launcher"
        ),
        evidence={"attack": outcome, "control": control},
        missing=None if outcome["workload_started"] else "the workload never started, so the case shows nothing",
    )


_ORPHANS = r"""
import time
ok = failed = 0
deadline = time.monotonic() + P["spawn_s"]
for i in range(P["bound"]):
    if time.monotonic() > deadline:
        break
    try:
        pid = os.fork()
    except OSError as e:
        failed += 1
        note("first fork error", errno.errorcode.get(e.errno, str(e.errno)))
        break
    if pid == 0:
        if P["orphan"]:
            try:
                if os.fork() == 0:
                    os._exit(0)  # the grandchild: an orphan only init can reap
            except OSError:
                pass
        os._exit(0)
    ok += 1
    if P["orphan"]:
        os.waitpid(pid, 0)
time.sleep(0.3)
zombies = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            if open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                zombies += 1
        except OSError:
            pass
note("spawned", ok)
note("zombies", zombies)
done()
"""


# LF-09 spawns orphans until _ORPHAN_BOUND or for _ORPHAN_SPAWN_S, whichever comes first, on every
# backend alike: under runsc's ptrace platform one python3 fork with its orphan costs about 45-60 ms
# in the sentry (the supervisor's reaping about 1 ms of it, measured), so 2,000 of them outran the
# CPU and wall budgets. What proves reaping is making more orphans than the process limit could
# hold as zombies: at least _ORPHANS_TO_PROVE, twice pids_max, without a refused fork or zombies.
_ORPHAN_BOUND = 2000
_ORPHAN_SPAWN_S = 12.0
_ORPHANS_TO_PROVE = 2 * DEFAULT_PROBE_BOUNDARY["resources"]["pids_max"]


def _orphan_breaches(report: dict[str, Any], bound: int) -> list[str]:
    """What the orphan run shows escaping: a refused fork (pid exhaustion) or zombies left."""
    out = []
    spawned = (report.get("spawned") or {}).get("value")
    zombies = (report.get("zombies") or {}).get("value") or 0
    error = (report.get("first fork error") or {}).get("value")
    if error is not None:  # the loop stops early only on a refused fork, or at the bound or the deadline
        out.append(f"pid exhaustion: fork failed ({error}) after {spawned} of at most {bound} short-lived children")
    if zombies > 5:
        out.append(f"{zombies} zombies were left unreaped")
    return out


def _orphans_missing(report: dict[str, Any], *, least: int) -> str | None:
    """Why the orphan run cannot show reaping (None when it can): no report, or too few orphans."""
    if not report:
        return "the attack did not report"
    spawned = (report.get("spawned") or {}).get("value")
    if not isinstance(spawned, int) or spawned < least:
        return (
            f"only {spawned} orphans were made in {_ORPHAN_SPAWN_S:g} s: fewer than {least} (twice pids_max), "
            "too few to show that init reaps them"
        )
    return None


def lf_09(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    params: dict[str, Any] = {"bound": _ORPHAN_BOUND, "spawn_s": _ORPHAN_SPAWN_S}
    # 120: capped by the target's wall_s; a TCG guest's python starts slowly
    run, report = run_attack(rc.target, _ORPHANS, orphan=True, timeout_s=120, **params)
    # Control: a parent that never reaps its own children: zombies pile up to the pids limit.
    _control, control_report = run_attack(rc.sandboxed_control, _ORPHANS, orphan=False, timeout_s=60, **params)
    spawned = (report.get("spawned") or {}).get("value")
    return verdict(
        "LF-09",
        breaches=_orphan_breaches(report, _ORPHAN_BOUND),
        control_shows_breach=bool(_orphan_breaches(control_report, _ORPHAN_BOUND)),
        contained=f"{spawned} orphaned children (at most {_ORPHAN_BOUND} in {_ORPHAN_SPAWN_S:g} s) were reaped by "
        "the sandbox's init; no zombies, no pid exhaustion",
        control="a parent that never waits showed the judge zombies and pid exhaustion",
        evidence={"attack": report, "control": control_report, "run": run_evidence(run)},
        missing=_orphans_missing(report, least=_ORPHANS_TO_PROVE),
    )


# -- XT: task N, then task N+1 ---------------------------------------------------------------


def _two_tasks(
    rc: RunContext, target: Target, first: str, second: str, **params: Any
) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    _, first_report = run_attack(target, first, **params)
    run, second_report = run_attack(target, second, **params)
    return first_report, run, second_report


_XT_WRITE = r"""
dirs = ["/tmp", "/var/tmp", "/dev/shm", os.environ.get("HOME", "/"), os.getcwd()]
for d in dirs:
    def w(d=d):
        with open(f"{d}/contain-probe-xt-{P['marker']}", "w") as f:
            f.write(P["canary"])
    rec(f"write {d}", w)
done()
"""

_XT_SEARCH = r"""
dirs = ["/tmp", "/var/tmp", "/dev/shm", os.environ.get("HOME", "/"), os.getcwd()]
for d in dirs:
    def find(d=d):
        return {n: readf(f"{d}/{n}", 256) for n in os.listdir(d) if n.startswith("contain-probe-xt-")}
    rec(f"search {d}", find)
done()
"""


def xt_01(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    marker, canary = rc.canary("xt"), rc.canary("residue")
    home = os.environ.get("HOME") or os.path.expanduser("~")
    for d in ("/tmp", "/var/tmp", "/dev/shm", home, "/"):
        rc.remove_later(f"{d}/contain-probe-xt-{marker}")
    before = take_snapshot()
    first, run, second = _two_tasks(rc, rc.target, _XT_WRITE, _XT_SEARCH, marker=marker, canary=canary)
    on_host = diff(before, take_snapshot()).marked([marker]).get("files", [])
    _control_first, control_run, _ = _two_tasks(rc, rc.control, _XT_WRITE, _XT_SEARCH, marker=marker, canary=canary)
    shown = bool(canary_sinks(control_run, canary))
    return verdict(
        "XT-01",
        breaches=[f"task N+1 found task N's canary ({s})" for s in canary_sinks(run, canary)]
        + [f"left on the host: {f}" for f in on_host],
        control_shows_breach=shown,
        contained="task N+1 found nothing of task N in /tmp, /var/tmp, /dev/shm, $HOME or its cwd",
        control=f"on the bare host task N+1 {'found' if shown else 'did NOT find'} the canary",
        evidence={"task N": first, "task N+1": second, "run": run_evidence(run)},
        missing=None if succeeded(first) else "task N could write nowhere, so the case shows nothing",
    )


_IPC_COMMON = r"""
import ctypes.util
# glibc 2.34+ has mq_* in libc itself; an image without librt.so.1 (a microVM's userland) still has them
rt = ctypes.CDLL(ctypes.util.find_library("rt") or ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
rt.mq_open.restype = ctypes.c_int
libc.shmat.restype = ctypes.c_void_p
IPC_CREAT, IPC_NOWAIT, IPC_RMID = 0o1000, 0o4000, 0
key, name, canary = P["key"], f"/contain-probe-{P['marker']}".encode(), P["canary"].encode()
def chk(r):
    if r == -1 or r is None:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return r
class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("text", ctypes.c_char * 128)]
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("cur", ctypes.c_long), ("pad", ctypes.c_long * 4)]
"""

_IPC_CREATE = (
    _IPC_COMMON
    + r"""
def shm():
    i = chk(libc.shmget(key, 4096, IPC_CREAT | 0o666))
    addr = libc.shmat(i, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    ctypes.memmove(addr, canary, len(canary))
    return i
rec("shm", shm)
rec("sem", lambda: chk(libc.semget(key, 1, IPC_CREAT | 0o666)))
def msg():
    i = chk(libc.msgget(key, IPC_CREAT | 0o666))
    m = Msg(1, canary)
    chk(libc.msgsnd(i, ctypes.byref(m), len(canary), IPC_NOWAIT))
    return i
rec("msg", msg)
def mq():
    a = Attr(0, 4, 128, 0)
    q = chk(rt.mq_open(name, os.O_CREAT | os.O_RDWR, 0o666, ctypes.byref(a)))
    chk(rt.mq_send(q, canary, len(canary), 0))
    return q
rec("mq", mq)
done()
"""
)

_IPC_FIND = (
    _IPC_COMMON
    + r"""
def shm():
    i = chk(libc.shmget(key, 0, 0))
    addr = libc.shmat(i, None, 0o10000)  # SHM_RDONLY
    if addr in (None, ctypes.c_void_p(-1).value):
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return ctypes.string_at(addr, 64)
rec("shm", shm)
rec("sem", lambda: chk(libc.semget(key, 0, 0)))
def msg():
    i = chk(libc.msgget(key, 0))
    m = Msg()
    chk(libc.msgrcv(i, ctypes.byref(m), 128, 0, IPC_NOWAIT))
    return m.text
rec("msg", msg)
def mq():
    q = chk(rt.mq_open(name, os.O_RDONLY | os.O_NONBLOCK))
    buf = ctypes.create_string_buffer(128)
    chk(rt.mq_receive(q, buf, 128, None))
    return buf.raw
rec("mq", mq)
done()
"""
)

_IPC_REMOVE = (
    _IPC_COMMON
    + r"""
for get in (lambda: libc.shmget(key, 0, 0), lambda: libc.semget(key, 0, 0), lambda: libc.msgget(key, 0)):
    pass
i = libc.shmget(key, 0, 0)
if i >= 0: libc.shmctl(i, IPC_RMID, None)
i = libc.semget(key, 0, 0)
if i >= 0: libc.semctl(i, 0, IPC_RMID)
i = libc.msgget(key, 0)
if i >= 0: libc.msgctl(i, IPC_RMID, None)
rt.mq_unlink(name)
done()
"""
)


def xt_02(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    marker, canary = rc.canary("ipc"), rc.canary("ipcval")
    params: dict[str, Any] = {"key": ipc_key(marker), "marker": marker, "canary": canary}
    rc.defer(lambda: run_attack(rc.control, _IPC_REMOVE, **params) and None)
    before = take_snapshot()
    first, run, second = _two_tasks(rc, rc.target, _IPC_CREATE, _IPC_FIND, **params)
    after = diff(before, take_snapshot())
    on_host = [e for e in after.appeared.get("sysvipc", ()) if f"key={params['key']} " in e + " "]
    on_host += [e for e in after.appeared.get("mqueues", ()) if marker in e]
    found = [n for n in succeeded(second)]
    _, control_run, _control_second = _two_tasks(rc, rc.control, _IPC_CREATE, _IPC_FIND, **params)
    run_attack(rc.control, _IPC_REMOVE, **params)
    shown = bool(canary_sinks(control_run, canary))
    return verdict(
        "XT-02",
        breaches=[f"task N+1 opened task N's {n}" for n in found] + [f"left on the host: {e}" for e in on_host],
        control_shows_breach=shown,
        contained="no SysV shm/sem/msg or POSIX mqueue of task N was visible to task N+1 or left on the host",
        control=f"on the bare host task N+1 {'read' if shown else 'did NOT read'} the canary from task N's IPC objects",
        evidence={"task N": first, "task N+1": second, "run": run_evidence(run)},
        missing=None if succeeded(first) else "task N could create no IPC object, so the case shows nothing",
    )


_KEY_ADD = r"""
rec("add_key", sysc, 248, b"user", P["desc"].encode(), P["canary"].encode(), len(P["canary"]), -4)
done()
"""

_KEY_FIND = r"""
buf = ctypes.create_string_buffer(256)
def find():
    kid = sysc(250, 10, -4, b"user", P["desc"].encode(), 0)  # KEYCTL_SEARCH in @u
    n = sysc(250, 11, kid, buf, 256)  # KEYCTL_READ
    return buf.raw[:n]
rec("search and read", find)
if P.get("remove"):
    try:
        kid = sysc(250, 10, -4, b"user", P["desc"].encode(), 0)
        rec("invalidate", sysc, 250, 21, kid)  # KEYCTL_INVALIDATE
    except OSError:
        pass
done()
"""


def xt_03(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    desc, canary = rc.canary("keydesc"), rc.canary("keyval")
    first, run, second = _two_tasks(rc, rc.target, _KEY_ADD, _KEY_FIND, desc=desc, canary=canary)
    _, control_run, _ = _two_tasks(rc, rc.control, _KEY_ADD, _KEY_FIND, desc=desc, canary=canary, remove=True)
    shown = bool(canary_sinks(control_run, canary))
    added = bool(succeeded(first))
    # When keyctl is denied to task N the kernel's refusal is the contained outcome, and a host
    # that itself denies keyctl (e.g. under a container runtime's seccomp) cannot run the control.
    control_needed = added or shown
    return verdict(
        "XT-03",
        breaches=[f"task N+1 read task N's key ({s})" for s in canary_sinks(run, canary)],
        control_shows_breach=shown if control_needed else None,
        contained="task N+1 found no key of task N" + ("" if added else " (keyctl is denied)"),
        control=f"on the bare host task N+1 {'read' if shown else 'did NOT read'} task N's key",
        evidence={"task N": first, "task N+1": second, "run": run_evidence(run)},
    )


_ABSTRACT_LISTEN = r"""
import socket, time
name = "\0contain-probe-" + P["marker"]
if os.fork() == 0:
    os.setsid()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(name)
    s.listen(4)
    s.settimeout(P["life_s"])
    end = time.monotonic() + P["life_s"]
    while time.monotonic() < end:
        try:
            c, _ = s.accept()
            c.sendall(P["canary"].encode())
            c.close()
        except OSError:
            break
    os._exit(0)
time.sleep(0.3)
note("listener forked", True)
done()
"""

_ABSTRACT_CONNECT = r"""
import socket
def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect("\0contain-probe-" + P["marker"])
    return s.recv(256)
rec("connect", connect)
done()
"""


def xt_04(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    marker, canary = rc.canary("abstract"), rc.canary("abval")
    params: dict[str, Any] = {"marker": marker, "canary": canary, "life_s": _LEFTOVER_S}
    first, run, second = _two_tasks(rc, rc.target, _ABSTRACT_LISTEN, _ABSTRACT_CONNECT, **params)
    left = _survivors(marker, settle_s=0.0)
    _, control_run, _ = _two_tasks(rc, rc.control, _ABSTRACT_LISTEN, _ABSTRACT_CONNECT, **params)
    _reap(marker)
    shown = bool(canary_sinks(control_run, canary))
    return verdict(
        "XT-04",
        breaches=[f"task N+1 reached task N's abstract listener ({s})" for s in canary_sinks(run, canary)]
        + [f"task N's listener outlived it: {p}" for p in left],
        control_shows_breach=shown,
        contained="task N's abstract socket listener was gone; task N+1 could not connect",
        control=f"on the bare host task N+1 {'reached' if shown else 'did NOT reach'} the listener",
        evidence={"task N": first, "task N+1": second, "run": run_evidence(run)},
        missing=None if first else "task N did not report",
    )


_LEAVE_PROCESS = r"""
import time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(P["life_s"])
        os._exit(0)
    os._exit(0)
time.sleep(0.3)
note("left a process", True)
done()
"""

_FIND_PROCESS = r"""
import signal
found = {}
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try:
            if P["marker"].encode() in readf(f"/proc/{p}/cmdline") and int(p) != os.getppid():
                found[p] = readf(f"/proc/{p}/cmdline").decode(errors="replace")
        except OSError:
            pass
note("found", found)
for p in found:
    rec(f"signal 0 to {p}", os.kill, int(p), 0)
done()
"""


def xt_06(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    marker = rc.canary("xtproc")
    first, run, second = _two_tasks(rc, rc.target, _LEAVE_PROCESS, _FIND_PROCESS, marker=marker, life_s=_LEFTOVER_S)
    left = _survivors(marker, settle_s=0.0)
    _, _, control_second = _two_tasks(rc, rc.control, _LEAVE_PROCESS, _FIND_PROCESS, marker=marker, life_s=_LEFTOVER_S)
    _reap(marker)
    # Task N+1's own command line carries the marker too; only other processes count.
    seen = [n for n in succeeded(second) if n.startswith("signal 0 to ")]
    shown = any(n.startswith("signal 0 to ") for n in succeeded(control_second))
    return verdict(
        "XT-06",
        breaches=[f"task N+1 could {n}" for n in seen] + [f"task N's process outlived it: {p}" for p in left],
        control_shows_breach=shown,
        contained="no process of task N was visible or signalable from task N+1",
        control=f"on the bare host task N+1 {'could' if shown else 'could NOT'} signal task N's leftover",
        evidence={"task N": first, "task N+1": second, "run": run_evidence(run)},
        missing=None if first else "task N did not report",
    )


def _case(case_id: str, category: Category, title: str, expected: str, check: Any, **na: str) -> ProbeCase:
    return ProbeCase(case_id, category, title, expected, check, dict(na))


CASES: tuple[ProbeCase, ...] = (
    _case("LF-01", Category.LF, "(sleep &), nohup, setsid with a marker", "no marker process after exit", lf_01),
    _case("LF-02", Category.LF, "setsid + double fork + ignore SIGTERM/SIGHUP", "killed at teardown", lf_02),
    _case("LF-03", Category.LF, "harness cancel mid-run", "whole tree gone within N s; cgroup removed", lf_03),
    _case(
        "LF-05", Category.LF, "write own pid into another cgroup's cgroup.procs", "cgroupfs read-only; killed", lf_05
    ),
    _case("LF-06", Category.LF, "fork racing a kill loop", "atomic teardown", lf_06),
    _case("LF-07", Category.LF, "systemd-run --user, crontab, at, autostart", "nothing scheduled on the host", lf_07),
    _case("LF-08", Category.LF, "kill -9 the launcher", "sandbox dies with its launcher", lf_08),
    _case("LF-09", Category.LF, "spawn short-lived orphans without waiting", "reaped by init; no zombies", lf_09),
    _case("XT-01", Category.XT, "task N leaves files in /tmp, /dev/shm, $HOME, cwd", "absent in task N+1", xt_01),
    _case("XT-02", Category.XT, "SysV shm/sem/msg and POSIX mqueue canaries", "absent in task N+1", xt_02),
    _case("XT-03", Category.XT, "keyctl add user canary @u; read in task N+1", "absent (or keyctl denied)", xt_03),
    _case("XT-04", Category.XT, "abstract socket listener left behind", "task N+1 cannot connect", xt_04),
    _case("XT-06", Category.XT, "leftover process visible/signalable from task N+1", "none", xt_06),
)
