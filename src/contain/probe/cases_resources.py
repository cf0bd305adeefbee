"""RE cases: resource exhaustion (RE-01..RE-11, and contain's RE-52, RE-53).

Every attack stops at a fixed bound, so a breach never harms the host even under ``--wrap``
with a weak sandbox: a fork bomb at ``_FORKS`` processes, a memory fill at twice the probe's
memory budget, a disk fill at twice its disk budget, a flood at a fixed byte count, a busy
loop at a fixed time. The verdict is whether the limit held *before* the bound: reaching the
bound is the breach. Judges that stand outside: whether a sibling task started during the attack
still works, whether the harness's own memory stayed bounded, whether a process of the attack
is still alive in host ``/proc`` after the run, whether a canary reached a host log socket.

Positive controls that would be unsafe on the bare host (forks, memory, disk, fds, shared
per-uid limits) run in a relaxed but still bounded contain sandbox (``RELAXED_CONTROL_BOUNDARY``:
limits above the attack's bound); the others run on the bare host.

Why one file past 600 lines: one mechanism, the RE rows of the catalogue and contain's own RE
cases; each case keeps its bounded attack, its host-side judge and its control side by side.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path
from typing import Any

from contain.egress.log import EVENT_OVERHEAD_BYTES, MAX_LOG_BYTES, EgressEvent, event_cost
from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext, Verdict
from contain.probe.context import (
    RunContext,
    as_run_context,
    run_attack,
    run_evidence,
    succeeded,
    verdict,
)
from contain.probe.snapshot import kill_marked, marked_processes
from contain.probe.targets import DEFAULT_PROBE_BOUNDARY

__all__ = ["CASES"]

_HOOKS = "needs contain's own hooks"
_MIB = 1024**2
_RES = DEFAULT_PROBE_BOUNDARY["resources"]
_FORKS = 200  # > pids_max 32 of the probe's boundary, < 1024 of the relaxed control
_MEMORY_BOUND = 2 * _RES["memory_bytes"]
_DISK_BOUND = 2 * _RES["disk_bytes"]
_FILES_BOUND = 300_000  # ~300 MB of kernel inode memory if nothing stops it
_FD_BOUND = 8192
_THREAD_BOUND = 400
_FLOOD_BYTES = 48 * _MIB


def _bound_reached(report: dict[str, Any], key: str, bound: int) -> bool:
    value = (report.get(key) or {}).get("value")
    return isinstance(value, int) and value >= bound


_FORK_BOMB = r"""
import time
kids = []
for i in range(P["bound"]):
    try:
        pid = os.fork()
    except OSError as e:
        note("fork error", errno.errorcode.get(e.errno, str(e.errno)))
        break
    if pid == 0:
        time.sleep(P["hold_s"])
        os._exit(0)
    kids.append(pid)
note("forked", len(kids))
done()
for pid in kids:
    os.waitpid(pid, 0)
"""


# The limit under test is the process count; memory is RE-02's. Every backend runs the bomb with
# this much memory so that pids_max, not the OOM killer, is the limit the bomb meets first: under
# runsc each python3 child costs about 6 MiB (gVisor breaks copy-on-write in 2 MiB units,
# measured), so 128 MiB ended the whole sandbox after about 20 forks and the case showed nothing.
_FORK_BOMB_BOUNDARY = {"resources": {"memory_bytes": 512 * _MIB}}


def _fork_bomb_judgement(report: dict[str, Any], *, bound: int, pids_max: int) -> tuple[list[str], str | None]:
    """Breaches, and what is missing for a verdict, from the bomb's report.

    Contained means capped by the process limit: the forks stopped with EAGAIN at no more than
    ``pids_max`` processes. All forks passing, or more than ``pids_max`` of them, is a breach; a
    bomb stopped by anything else (no report: killed; another errno) shows nothing about the limit.
    """
    if not report:
        return [], "the attack did not report"
    forked = (report.get("forked") or {}).get("value")
    if not isinstance(forked, int):
        return [], "the attack reported no fork count"
    if forked >= bound:
        return [f"all {bound} forks succeeded: no process limit held"], None
    if forked > pids_max:
        return [f"{forked} forks passed the process limit of {pids_max}"], None
    error = (report.get("fork error") or {}).get("value")
    if error != "EAGAIN":
        return [], f"the forks stopped at {forked} with {error}, not with the process limit's EAGAIN"
    return [], None


def _sibling_alive(target: Any) -> tuple[bool, dict[str, Any]]:
    run = target.run_python("print('sibling alive')", timeout_s=20)
    return b"sibling alive" in run.stdout, run_evidence(run)


def re_01(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    box: dict[str, Any] = {}

    def bomb() -> None:
        box["run"], box["report"] = run_attack(
            rc.target, _FORK_BOMB, boundary=_FORK_BOMB_BOUNDARY, bound=_FORKS, hold_s=3, timeout_s=30
        )

    worker = threading.Thread(target=bomb)
    worker.start()
    worker.join(1.0)
    sibling_ok, sibling = _sibling_alive(rc.target)  # another task while the bomb holds its children
    worker.join()
    run, report = box["run"], box["report"]
    _control, control_report = run_attack(rc.sandboxed_control, _FORK_BOMB, bound=_FORKS, hold_s=1, timeout_s=30)
    breaches, missing = _fork_bomb_judgement(report, bound=_FORKS, pids_max=_RES["pids_max"])
    if not sibling_ok:
        breaches.append("a sibling task started during the fork bomb failed")
    forked = (report.get("forked") or {}).get("value")
    return verdict(
        "RE-01",
        breaches=breaches,
        control_shows_breach=_bound_reached(control_report, "forked", _FORKS),
        contained=f"forks stopped with EAGAIN at {forked} (limit {_RES['pids_max']}); a sibling task ran meanwhile",
        control=f"with pids_max 1024 the bomb forked {(control_report.get('forked') or {}).get('value')}",
        evidence={"attack": report, "run": run_evidence(run), "sibling": sibling},
        missing=missing,
    )


_MEMORY = r"""
chunks = []
filled = 0
while filled < P["bound"]:
    chunks.append(b"\x01" * (16 << 20))  # written, so every page is touched
    filled += 16 << 20
    sys.stderr.write(f"{filled >> 20} MiB\n")
note("filled", filled)
done()
"""


def re_02(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    run, report = run_attack(rc.target, _MEMORY, bound=_MEMORY_BOUND, timeout_s=30)
    _control, control_report = run_attack(rc.sandboxed_control, _MEMORY, bound=_MEMORY_BOUND, timeout_s=30)
    breaches = []
    if _bound_reached(report, "filled", _MEMORY_BOUND):
        breaches.append(
            f"{_MEMORY_BOUND >> 20} MiB were touched: the {_RES['memory_bytes'] >> 20} MiB limit did not hold"
        )
    oom = bool(getattr(run.run_result, "oom_killed", False))
    how = "OOM-killed inside the sandbox's cgroup" if oom else f"stopped (signal {run.signal}, exit {run.exit_code})"
    return verdict(
        "RE-02",
        breaches=breaches,
        control_shows_breach=_bound_reached(control_report, "filled", _MEMORY_BOUND),
        contained=f"the fill {how} before {_MEMORY_BOUND >> 20} MiB",
        control=f"with a 1 GiB limit the fill reached {_MEMORY_BOUND >> 20} MiB: {bool(succeeded(control_report))}",
        evidence={"run": run_evidence(run), "attack": report},
    )


_DISK_FILL = r"""
for d in P["dirs"]:
    written = 0
    path = f"{d}/contain-probe-{P['canary']}"
    def fill():
        global written
        with open(path, "wb") as f:
            while written < P["bound"]:
                f.write(b"\0" * (1 << 20))
                f.flush()
                written += 1 << 20
        return written
    r = rec(f"fill {d}", fill)
    note(f"written {d}", written)
    try:
        os.unlink(path)
    except OSError:
        pass
done()
"""


def _fill_case(rc: RunContext, case_id: str, dirs: list[str], what: str) -> CaseResult:
    canary = rc.canary("fill")
    for directory in ("/tmp", "/var/tmp", "/dev/shm"):
        rc.remove_later(f"{directory}/contain-probe-{canary}")
    free_before = _free_bytes("/")
    run, report = run_attack(rc.target, _DISK_FILL, dirs=dirs, bound=_DISK_BOUND, canary=canary, timeout_s=30)
    free_after = _free_bytes("/")
    _control, control_report = run_attack(
        rc.sandboxed_control, _DISK_FILL, dirs=dirs[:1], bound=_DISK_BOUND, canary=canary, timeout_s=30
    )
    breaches = [
        f"{_DISK_BOUND >> 20} MiB were written to {d}"
        for d in dirs
        if _bound_reached(report, f"written {d}", _DISK_BOUND)
    ]
    written = {d: (report.get(f"written {d}") or {}).get("value") for d in dirs}
    return verdict(
        case_id,
        breaches=breaches,
        control_shows_breach=_bound_reached(control_report, f"written {dirs[0]}", _DISK_BOUND),
        contained=f"{what} stopped below the bound: "
        + ", ".join(f"{d}: {(w or 0) >> 20} MiB" for d, w in written.items()),
        control=f"with a 256 MiB budget {dirs[0]} took the full {_DISK_BOUND >> 20} MiB",
        evidence={
            "attack": report,
            "run": run_evidence(run),
            "host_free_bytes_before_after": [free_before, free_after],
        },
        missing=None if report else "the attack did not report",
    )


def re_03(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    dirs = ["/tmp", "/work"] if rc.target.has_contain_hooks else ["/tmp", "/var/tmp"]
    return _fill_case(rc, "RE-03", dirs, "filling")


def re_05(ctx: ProbeContext) -> CaseResult:
    return _fill_case(as_run_context(ctx), "RE-05", ["/dev/shm"], "filling /dev/shm")


_WRITABLE_DIR = r"""
def writable_dir(name):
    for base in ("/tmp", "/dev/shm", os.getcwd()):
        try:
            os.makedirs(f"{base}/{name}", exist_ok=True)
            return f"{base}/{name}"
        except OSError:
            continue
    return None
"""

_MANY_FILES = (
    _WRITABLE_DIR
    + r"""
d = writable_dir(f"contain-probe-{P['canary']}")
note("dir", d)
n = 0
def create():
    global n
    while n < P["bound"]:
        os.close(os.open(f"{d}/{n}", os.O_CREAT | os.O_WRONLY, 0o600))
        n += 1
        if n % 5000 == 0:
            sys.stderr.write(f"created {n}\n")
rec("create", create)
note("created", n)
done()
"""
)


def re_04(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("inodes")
    for base in ("/tmp", "/dev/shm"):
        rc.remove_later(f"{base}/contain-probe-{canary}")
    boundary = {"resources": {"disk_bytes": 4 * _MIB}}  # a small budget: its inode cap is disk_bytes / 4 KiB
    run, report = run_attack(rc.target, _MANY_FILES, boundary=boundary, bound=_FILES_BOUND, canary=canary, timeout_s=60)
    # Control: a budget whose inode cap (disk_bytes / 4 KiB) is above the bound; empty files use
    # no pages, so only the inode count and the relaxed memory limit stand in the way.
    control_boundary = {"resources": {"disk_bytes": 2 * _FILES_BOUND * 4096}}
    _control, control_report = run_attack(
        rc.sandboxed_control, _MANY_FILES, boundary=control_boundary, bound=_FILES_BOUND, canary=canary, timeout_s=60
    )
    created = (report.get("created") or {}).get("value")
    if created is None:  # killed before reporting: the last progress line says how far it got
        progress = [line for line in run.stderr.decode(errors="replace").splitlines() if line.startswith("created ")]
        created = f"about {progress[-1].split()[1]}" if progress else "fewer than 5000"
    error = (report.get("create") or {}).get("errno")
    return verdict(
        "RE-04",
        breaches=[f"all {_FILES_BOUND} files were created: no inode quota or memory limit held"]
        if _bound_reached(report, "created", _FILES_BOUND)
        else [],
        control_shows_breach=_bound_reached(control_report, "created", _FILES_BOUND),
        contained=f"file creation stopped at {created} files ({error or 'killed'}) inside the sandbox",
        control=f"with an inode cap above {_FILES_BOUND} all {_FILES_BOUND} files were created",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None
        if run.signal or (report.get("dir") or {}).get("value")
        else "the attack found no writable directory or did not report",
    )


_FDS_THREADS = r"""
import threading, time
fds = []
def fd_fill():
    while len(fds) < P["fd_bound"]:
        fds.append(os.open("/dev/null", os.O_RDONLY))
rec("fds", fd_fill)
note("fds opened", len(fds))
for fd in fds:
    os.close(fd)
stop = threading.Event()
threads = []
def thread_fill():
    while len(threads) < P["thread_bound"]:
        t = threading.Thread(target=stop.wait, args=(5,), daemon=True)
        t.start()
        threads.append(t)
rec("threads", thread_fill)
note("threads started", len(threads))
stop.set()
done()
"""


def re_06(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    params: dict[str, Any] = {"fd_bound": _FD_BOUND, "thread_bound": _THREAD_BOUND}
    run, report = run_attack(rc.target, _FDS_THREADS, timeout_s=30, **params)
    _control, control_report = run_attack(rc.sandboxed_control, _FDS_THREADS, timeout_s=30, **params)
    breaches = []
    if _bound_reached(report, "fds opened", _FD_BOUND):
        breaches.append(f"{_FD_BOUND} fds were opened: no descriptor limit held")
    if _bound_reached(report, "threads started", _THREAD_BOUND):
        breaches.append(f"{_THREAD_BOUND} threads started: no thread limit held")
    shown = _bound_reached(control_report, "fds opened", _FD_BOUND) and _bound_reached(
        control_report, "threads started", _THREAD_BOUND
    )
    return verdict(
        "RE-06",
        breaches=breaches,
        control_shows_breach=shown,
        contained=(
            f"fds stopped at {(report.get('fds opened') or {}).get('value')}, threads at "
            f"{(report.get('threads started') or {}).get('value')}, inside the sandbox"
        ),
        control="with relaxed limits both bounds were reached",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_BUSY = r"""
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
end = time.monotonic() + P["bound_s"]
while time.monotonic() < end:  # bounded: gives up by itself after bound_s
    pass
note("ran to the bound", True)
done()
"""

_DEADLINE_S = 2.0
_GRACE_S = 6.0
_BUSY_BOUND_S = 12.0


def re_07(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("busy")
    run, report = run_attack(rc.target, _BUSY, bound_s=_BUSY_BOUND_S, marker=canary, timeout_s=_DEADLINE_S)
    survivors = [p.describe() for p in marked_processes([canary])]
    kill_marked([canary])
    breaches = [f"still running after the run returned: {s}" for s in survivors]
    if run.duration_s > _DEADLINE_S + _GRACE_S:
        breaches.append(f"the run took {run.duration_s:.1f}s for a {_DEADLINE_S:g}s deadline")
    if report.get("ran to the bound"):
        breaches.append("the busy loop ran to its own bound")
    # Control: the same loop with no deadline enforced runs to its bound, and the judge sees it.
    control, control_report = run_attack(rc.control, _BUSY, bound_s=_BUSY_BOUND_S, marker=canary, timeout_s=60)
    shown = control.duration_s > _DEADLINE_S + _GRACE_S and bool(control_report.get("ran to the bound"))
    timed_out = run.timed_out
    return verdict(
        "RE-07",
        breaches=breaches,
        control_shows_breach=shown,
        contained=f"killed at the deadline after {run.duration_s:.1f}s (timeout reported: {timed_out})",
        control=f"with no deadline the loop ran {control.duration_s:.1f}s to its bound",
        evidence={"run": run_evidence(run)},
        missing=None if timed_out or not rc.target.has_contain_hooks else "contain did not report the timeout",
    )


_FLOOD = r"""
chunk = b"A" * (1 << 20)
sent = 0
try:
    while sent < P["bound"]:
        os.write(1, chunk)
        sent += len(chunk)
except OSError:
    pass
os.write(2, f"sent {sent}".encode())
"""


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def re_08(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    before = _rss_bytes()
    run = rc.target.run_python(_FLOOD_CODE(), timeout_s=30)
    grown = _rss_bytes() - before
    cap = _RES["output_bytes"]
    breaches = []
    if len(run.stdout) > 2 * cap:
        breaches.append(f"{len(run.stdout)} bytes of stdout were captured for a {cap}-byte cap")
    if grown > _FLOOD_BYTES // 2:
        breaches.append(f"the harness grew by {grown >> 20} MiB while capturing")
    captured = len(run.stdout)
    del run
    control = rc.control.run_python(_FLOOD_CODE(), timeout_s=30)
    shown = len(control.stdout) > 2 * cap
    truncated = ""
    return verdict(
        "RE-08",
        breaches=breaches,
        control_shows_breach=shown,
        contained=f"capture capped at {captured} bytes; harness RSS grew {max(grown, 0) >> 20} MiB{truncated}",
        control=f"with no cap the probe's own runner captured {len(control.stdout) >> 20} MiB",
        evidence={"captured_bytes": captured, "harness_rss_growth_bytes": grown},
    )


def _FLOOD_CODE() -> str:
    return f"import os\nP = {{'bound': {_FLOOD_BYTES}}}\n" + _FLOOD


_SHARED_LIMITS = r"""
import time, ctypes.util
# glibc 2.34+ has mq_* in libc itself; an image without librt.so.1 (a microVM's userland) still has them
rt = ctypes.CDLL(ctypes.util.find_library("rt") or ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
rt.mq_open.restype = ctypes.c_int
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("cur", ctypes.c_long), ("pad", ctypes.c_long * 4)]
def inotify():
    r = libc.inotify_init()
    if r < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return r
def add_key(i):
    return sysc(248, b"user", f"{P['marker']}-{i}".encode(), b"x" * 64, 64, -4)  # KEY_SPEC_USER_KEYRING
def mq(i):
    a = Attr(0, 10, 8192, 0)
    r = rt.mq_open(f"/{P['marker']}-{i}".encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(a))
    if r < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return r
def exhaust(fn, bound):
    n = 0
    try:
        while n < bound:
            fn(n) if fn is not inotify else fn()
            n += 1
    except OSError as e:
        return {"count": n, "errno": errno.errorcode.get(e.errno, str(e.errno))}
    return {"count": n}
if P["role"] in ("hog", "both"):
    note("inotify held", exhaust(inotify, 200))
    note("keys held", exhaust(add_key, 250))
    note("mqueues held", exhaust(mq, 120))
if P["role"] in ("sibling", "both"):
    rec("sibling inotify", inotify)
    rec("sibling mq", mq, 999999)
    rec("sibling add_key", add_key, 999999)
done()
if P["role"] == "hog":
    time.sleep(P["hold_s"])
for i in range(120):
    rt.mq_unlink(f"/{P['marker']}-{i}".encode())
rt.mq_unlink(f"/{P['marker']}-999999".encode())
"""

_SIBLING_OPS = ("sibling inotify", "sibling mq", "sibling add_key")


def _sibling_failures(report: dict[str, Any], hog: dict[str, Any]) -> list[str]:
    """Sibling operations that failed although the sibling itself is allowed them, i.e. those
    whose resource the hog managed to exhaust (a layer that denies the call to everyone is not
    sharing a limit)."""
    pairs = {"sibling inotify": "inotify held", "sibling mq": "mqueues held", "sibling add_key": "keys held"}
    out = []
    for op, held in pairs.items():
        hog_value = (hog.get(held) or {}).get("value") or {}
        if not (report.get(op) or {}).get("ok") and hog_value.get("count", 0) > 0:
            out.append(f"{op} failed ({(report.get(op) or {}).get('errno')}) while another task held {hog_value}")
    return out


def _shared_limits(case_id: str, ctx: ProbeContext, *, with_write_binds: bool) -> CaseResult:
    """Hog and sibling tasks run side by side; the sibling must keep its per-uid counts.

    With ``with_write_binds`` each task also binds a workspace writable, which used to put every
    such sandbox on the shared uid nobody (issue 18, item 6).
    """
    rc = as_run_context(ctx)
    marker = rc.canary("ucount")
    box: dict[str, Any] = {}

    def boundary_for(name: str) -> dict[str, Any] | None:
        return rc.workspace(name).boundary() if with_write_binds else None

    def hog() -> None:
        # The hold is short: under a weak --wrap the hog exhausts the *host* user's counts.
        try:
            box["run"], box["report"] = run_attack(
                rc.target, _SHARED_LIMITS, role="hog", marker=marker, hold_s=2, timeout_s=30,
                boundary=boundary_for("hog"),
            )
        except BaseException as exc:  # raised in the case's thread below: a hog that failed judges nothing
            box["error"] = exc

    worker = threading.Thread(target=hog)
    worker.start()
    worker.join(1.0)
    _sibling, sibling_report = run_attack(
        rc.target, _SHARED_LIMITS, role="sibling", marker=marker + "-s", hold_s=0, boundary=boundary_for("sibling")
    )
    harness_ok = _harness_inotify_works()
    worker.join()
    if "error" in box:
        raise box["error"]
    hog_report = box.get("report") or {}
    breaches = _sibling_failures(sibling_report, hog_report)
    if not harness_ok:
        breaches.append("the harness itself could not create an inotify instance during the attack")
    # Control: hog and sibling in the same (relaxed) sandbox share every per-user count.
    _control, control_report = run_attack(
        rc.sandboxed_control, _SHARED_LIMITS, role="both", marker=marker + "-c", hold_s=0, boundary=boundary_for("ctl")
    )
    shown = bool(_sibling_failures(control_report, control_report))
    return verdict(
        case_id,
        breaches=breaches,
        control_shows_breach=shown,
        contained="a sibling task kept its inotify, mqueue and key quota while another task exhausted its own",
        control=f"within one task the exhausted limits {'were' if shown else 'were NOT'} visible to the next call",
        evidence={"hog": hog_report, "sibling": sibling_report, "control": control_report},
        missing=None if hog_report else "the hog task did not report",
    )


def _harness_inotify_works() -> bool:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.inotify_init())
    if fd < 0:
        return False
    os.close(fd)
    return True


_FUSE = (
    _WRITABLE_DIR
    + r"""
import ctypes
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
r = rec("open /dev/fuse", os.open, "/dev/fuse", os.O_RDWR)
d = P["dir"] if P.get("dir") else writable_dir(f"contain-probe-{P['canary']}")
note("dir", d)
if r["ok"] and d:
    fd = r["value"]
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    def mount():
        if libc.mount(b"probe", d.encode(), b"fuse", 0, opts) != 0:
            e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
        libc.umount2(d.encode(), 2)  # never served: detach at once
    rec("mount fuse", mount)
done()
"""
)


def re_09(ctx: ProbeContext) -> CaseResult:
    return _shared_limits("RE-09", ctx, with_write_binds=False)


def re_54(ctx: ProbeContext) -> CaseResult:
    return _shared_limits("RE-54", ctx, with_write_binds=True)


def re_10(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("fuse")
    run, report = run_attack(rc.target, _FUSE, canary=canary, timeout_s=10)
    rc.remove_later(f"/tmp/contain-probe-{canary}")
    _control, control_report = run_attack(
        rc.userns_control, _FUSE, canary=canary, dir=str(rc.plant_dir("fuse")), timeout_s=10
    )
    mounted = succeeded(report, "mount fuse")
    return verdict(
        "RE-10",
        breaches=["a FUSE file system was mounted"] if mounted else [],
        control_shows_breach=bool(succeeded(control_report, "mount fuse")),
        contained=(
            f"no FUSE mount ({(report.get('open /dev/fuse') or {}).get('errno') or 'mount refused'}); "
            f"run ended in {run.duration_s:.1f}s"
        ),
        control="as root of a fresh user+mount namespace a FUSE mount worked (and was detached at once)",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_LOG_FLOOD = r"""
import socket
for path in P["paths"]:
    def send(path=path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.settimeout(1)
        try:
            s.connect(path)
            for _ in range(P["count"]):
                s.send(f"<13>contain-probe: {P['canary']}".encode())
        finally:
            s.close()
    rec(f"send to {path}", send)
done()
"""

_LOG_SOCKETS = (
    "/dev/log",
    "/run/systemd/journal/socket",
    "/run/systemd/journal/dev-log",
    "/run/systemd/journal/stdout",
)


class _DatagramSink:
    """A host Unix datagram socket that records what reaches it (bounded)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o666)
        self.sock.setblocking(False)

    def drain(self, limit: int = 1000) -> bytes:
        data = b""
        for _ in range(limit):
            try:
                data += self.sock.recv(4096)
            except BlockingIOError:
                break
        return data

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


def re_11(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("log")
    sink = _DatagramSink(rc.plant_dir("log") / "dev-log")
    rc.defer(sink.close)
    paths = [*_LOG_SOCKETS, str(sink.path)]
    run, report = run_attack(rc.target, _LOG_FLOOD, paths=paths, canary=canary, count=100)
    received = sink.drain()
    breaches = [f"{n} worked" for n in succeeded(report) if n != f"send to {sink.path}"]
    if canary.encode() in received:
        breaches.append("the canary reached the probe's host log socket")
    _control, _ = run_attack(rc.control, _LOG_FLOOD, paths=[str(sink.path)], canary=canary, count=3)
    shown = canary.encode() in sink.drain()
    return verdict(
        "RE-11",
        breaches=breaches,
        control_shows_breach=shown,
        contained="no log socket (/dev/log, journald, the probe's own) was reachable",
        control=f"on the bare host the probe's log socket {'received' if shown else 'did NOT receive'} the canary",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_ONE_BUDGET = r"""
out = {}
for d in P["dirs"]:
    written = 0
    def fill(d=d):
        global written
        with open(f"{d}/contain-probe-{P['canary']}", "wb") as f:
            while written < P["each"]:
                written += f.write(b"\0" * min(1 << 20, P["each"] - written))
                f.flush()
    rec(f"fill {d}", fill)
    note(f"written {d}", written)
done()
"""

# RE-52: each place gets just under the budget; four places hold four times it if each is sized
# alone, the budget if they share it. /dev must take nothing.
_RE52_PLACES = ["/tmp", "/dev/shm", "/work", "/dev"]
_RE52_EACH = _RES["disk_bytes"] - 2 * _MIB


def re_52(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("budget")
    params: dict[str, Any] = {"dirs": _RE52_PLACES, "each": _RE52_EACH, "canary": canary}
    run, report = run_attack(rc.target, _ONE_BUDGET, timeout_s=30, **params)
    written = {d: int((report.get(f"written {d}") or {}).get("value") or 0) for d in _RE52_PLACES}
    total = sum(written.values())
    breaches = []
    if total > _RES["disk_bytes"]:
        breaches.append(f"{total >> 20} MiB were written in all for a {_RES['disk_bytes'] >> 20} MiB disk budget")
    if written["/dev"] or succeeded(report, "fill /dev"):
        breaches.append(f"/dev accepted a file ({written['/dev']} bytes)")
    # Control: a budget above the sum (the relaxed boundary's 256 MiB) takes every place in full.
    _control, control_report = run_attack(rc.sandboxed_control, _ONE_BUDGET, timeout_s=30, **params)
    control_total = sum(int((control_report.get(f"written {d}") or {}).get("value") or 0) for d in _RE52_PLACES)
    return verdict(
        "RE-52",
        breaches=breaches,
        control_shows_breach=control_total > _RES["disk_bytes"],
        contained=f"{total >> 20} MiB in all ({', '.join(f'{d}: {w >> 20} MiB' for d, w in written.items())}) "
        f"for a {_RES['disk_bytes'] >> 20} MiB budget; /dev refused "
        f"({(report.get('fill /dev') or {}).get('errno')})",
        control=f"with a budget above the sum the same fills took {control_total >> 20} MiB",
        evidence={"attack": report, "control": control_report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_PROXY_FLOOD = r"""
import socket, time
host, port = proxy_endpoint()  # where the sandbox was told its proxy is
sent = answered = 0
end = time.monotonic() + P["seconds"]
# bounded in count and in time; done once the refusals offered the host the goal's bytes
while sent < P["count"] and time.monotonic() < end and answered * P["offered_per_refusal"] < P["goal_bytes"]:
    name = f"{sent}-" + "a" * P["name_chars"] + ".test"
    try:
        s = socket.create_connection((host, port), timeout=2)
        # the name once (no Host header): twice would pass the proxy's 16 KiB head limit whenever
        # the head arrives in one piece (a microVM's forward), refused then without the name
        s.sendall(f"CONNECT {name}:443 HTTP/1.1\r\n\r\n".encode())
        sent += 1
        if s.recv(64).startswith(b"HTTP/1.1 4"):
            answered += 1
        s.close()
    except OSError as e:
        note("last error", errno.errorcode.get(e.errno or 0, str(e)))
        break
note("sent", sent)
note("refused by the proxy", answered)
done()
sys.stdout.flush()
chunk = b"B" * (1 << 20)
try:
    for _ in range(P["output_mib"]):  # stderr flood after the report: the cap closes the pipe
        os.write(2, chunk)
except OSError:
    pass
"""

_FLOOD_COUNT = 3000
_FLOOD_NAME_CHARS = 16_000
# The flood stops once its refusals offered the host this much: past MAX_LOG_BYTES with a margin,
# so the control can show an unbounded log.
# A microVM's guest reaches it at ~15 CONNECTs/s under TCG (each guest connection is a connector
# process on the host), a process sandbox at ~150/s; the time cap follows the target's wall budget.
_FLOOD_GOAL_BYTES = MAX_LOG_BYTES + MAX_LOG_BYTES // 4
_FLOOD_MIN_S = 6.0
_FLOOD_WALL_MARGIN_S = 20.0  # python's start, the stderr flood and the teardown, inside wall_s
_FLOOD_OUTPUT_MIB = 32
# The host may keep at most the event log's byte bound and both capped streams; the rest of the
# allowance is the Python process's own noise (allocator, the RunResult's dicts).
_HOST_GROWTH_BOUND = 2 * MAX_LOG_BYTES + 2 * _RES["output_bytes"] + 8 * _MIB
_CLIPPED = re.compile(r"\.\.\.\[(\d+) more chars\]$")


def _offered_bytes(event: dict[str, Any]) -> int:
    """What the sandbox offered the host to keep for one event: its cost with clipped text restored."""
    cost = event_cost(EgressEvent(**event))
    for value in event.values():
        if isinstance(value, str) and (match := _CLIPPED.search(value)):
            cost += int(match.group(1)) - len(match.group(0))
    return cost


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (proc(5))
        return True
    except OSError:
        return False


def _status_bytes(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def re_53(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    if not rc.target.has_contain_hooks:
        return CaseResult("RE-53", Verdict.NOT_APPLICABLE, f"{_HOOKS}: the host-side egress log is contain's")
    import gc

    gc.collect()
    resettable = _reset_peak_rss()
    rss_before = _status_bytes("VmRSS")
    boundary = {"network": {"allow": [{"host": "allowed.test", "ports": [9]}], "hosts": {"allowed.test": "127.0.0.1"}}}
    wall_s = float(getattr(rc.target, "boundary_for")(boundary)["resources"]["wall_s"])  # noqa: B009 - contain hooks
    seconds = max(_FLOOD_MIN_S, wall_s - _FLOOD_WALL_MARGIN_S)
    params: dict[str, Any] = {
        "count": _FLOOD_COUNT,
        "seconds": seconds,
        "goal_bytes": _FLOOD_GOAL_BYTES,
        # the event carries the name twice (its host, and the reason quotes it); if that changes the
        # flood stops short and the control below says so (INCONCLUSIVE), never a pass
        "offered_per_refusal": 2 * _FLOOD_NAME_CHARS + EVENT_OVERHEAD_BYTES,
        "name_chars": _FLOOD_NAME_CHARS,
        "output_mib": _FLOOD_OUTPUT_MIB,
    }
    run, report = run_attack(rc.target, _PROXY_FLOOD, boundary=boundary, timeout_s=seconds + 15, **params)
    growth = _status_bytes("VmHWM") - rss_before
    result = run.run_result
    kept = [dict(e) for e in run.egress_events]
    kept_bytes = sum(event_cost(EgressEvent(**e)) for e in kept)
    dropped = dict(getattr(result, "egress_dropped", None) or {})
    refused_kept = sum(1 for e in kept if e.get("verdict") == "deny")
    refused_seen = refused_kept + int(dropped.get("denied", 0))
    answered = int((report.get("refused by the proxy") or {}).get("value") or 0)
    offered_bytes = sum(_offered_bytes(e) for e in kept) + int(dropped.get("bytes", 0))
    breaches = []
    if kept_bytes > MAX_LOG_BYTES:
        breaches.append(f"the host kept {kept_bytes >> 20} MiB of egress events (bound {MAX_LOG_BYTES >> 20} MiB)")
    if resettable and growth > _HOST_GROWTH_BOUND:
        breaches.append(f"the host process grew by {growth >> 20} MiB (bound {_HOST_GROWTH_BOUND >> 20} MiB)")
    if refused_seen < answered:
        breaches.append(f"{answered} refusals were answered but only {refused_seen} are in the RunResult")
    if answered and not any(v.kind == "egress" for v in getattr(result, "violations", ())):
        breaches.append("refused attempts left no egress violation")
    captured = len(run.stderr)
    if captured > 2 * _RES["output_bytes"]:
        breaches.append(f"{captured} bytes of stderr were captured for a {_RES['output_bytes']}-byte cap")
    # Positive control: the flood reached the proxy (it answered), and what it offered the host
    # to keep is more than the bound, so an unbounded log would have shown the breach.
    shown = answered > 0 and offered_bytes > MAX_LOG_BYTES
    return verdict(
        "RE-53",
        breaches=breaches,
        control_shows_breach=shown,
        contained=f"{answered} refused CONNECTs with {_FLOOD_NAME_CHARS}-char names: the host kept "
        f"{len(kept)} events ({kept_bytes >> 10} KiB), counted {dropped.get('events', 0)} more; "
        f"host peak RSS grew {max(growth, 0) >> 20} MiB"
        + ("" if resettable else " (VmHWM not resettable here: judged on the kept bytes only)"),
        control=f"the flood offered {offered_bytes >> 20} MiB of events to the host log "
        f"({answered} answered by the proxy)",
        evidence={
            "attack": report,
            "kept_events": len(kept),
            "kept_bytes": kept_bytes,
            "dropped": dropped,
            "host_peak_growth_bytes": growth,
            "stderr_captured_bytes": captured,
        },
        missing=None if report else "the attack did not report",
    )


def _free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _case(case_id: str, title: str, expected: str, check: Any, **na: str) -> ProbeCase:
    return ProbeCase(case_id, Category.RE, title, expected, check, dict(na))


CASES: tuple[ProbeCase, ...] = (
    _case("RE-01", f"fork bomb (bounded at {_FORKS})", "capped by pids.max; other sandboxes unaffected", re_01),
    _case("RE-02", "allocate and touch 2x the memory limit", "OOM kill inside the sandbox only", re_02),
    _case("RE-03", "fill workspace and /tmp (bounded at 2x the disk budget)", "ENOSPC/EDQUOT at quota", re_03),
    _case("RE-04", f"create {_FILES_BOUND} empty files", "inode quota hit; host unaffected", re_04),
    _case("RE-05", "fill /dev/shm", "capped; charged to the sandbox", re_05),
    _case("RE-06", "exhaust fds and threads", "RLIMIT/pids errors inside only", re_06),
    _case("RE-07", "busy loop ignoring SIGTERM", "SIGKILL at the deadline; timeout reported", re_07),
    _case(
        "RE-08",
        f"{_FLOOD_BYTES >> 20} MiB of stdout without newlines",
        "capture capped; harness RSS bounded",
        re_08,
        wrap=f"{_HOOKS}: with --wrap the output is captured by the probe's own runner, not by the sandbox",
    ),
    _case("RE-09", "exhaust per-uid limits (inotify, mqueue, keys)", "other tasks unaffected", re_09),
    _case(
        "RE-54",
        "exhaust per-uid limits from sandboxes that hold write binds",
        "other tasks with write binds unaffected (a host uid per sandbox through idmapped binds)",
        re_54,
    ),
    _case("RE-10", "mount a self-served FUSE file system", "cannot mount FUSE; teardown in time", re_10),
    _case("RE-11", "flood /dev/log and journald", "not exposed", re_11),
    _case(
        "RE-52",
        "fill /tmp, /dev/shm, scratch and /dev, each just under the disk budget",
        "one budget for all of them together; /dev read-only",
        re_52,
        wrap=f"{_HOOKS}: the disk budget is contain's boundary",
    ),
    _case(
        "RE-53",
        f"{_FLOOD_COUNT} CONNECTs with {_FLOOD_NAME_CHARS}-char hostnames, then an output flood",
        "host-side event log and captures bounded by bytes; every refusal still counted",
        re_53,
        wrap=f"{_HOOKS}: the host-side egress log is contain's",
    ),
)
