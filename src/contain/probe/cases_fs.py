"""FS cases: filesystem and paths (FS-01..FS-17 of the escape catalogue).

Judges stand on the host: a canary planted in a host file must not reach a sink (the run's
output or the proxy log); a marker the attack tries to create must not exist on the host
afterwards; a planted file the attack tries to change must stay byte-identical. Where an action
leaves no trace the probe dares to leave (opening ``/proc/sysrq-trigger`` for writing, a mount
inside the sandbox's own namespace), the verdict rests on the kernel's answer as the attack
recorded it, and the evidence says so.

Positive controls run the same attack on the bare host (bounded: attacks only read planted
canaries, write into the run's own temp directories, and open sysctl files without writing) or,
for mounts, as root of a fresh user+mount namespace (``unshare -rm``), never against the real
mount table.

Targets without contain hooks (``--wrap``) get the host paths of the planted workspaces; whether
their sandbox shows them decides whether the in-sandbox control (e.g. "a sibling file is
writable") holds, and a failed control makes the case INCONCLUSIVE, never CONTAINED.

FS-08 and FS-09 (protected names in a writable workspace) share one shape and are rows of
``PROTECTED_NAMES_CASES``, judged by ``ProtectedNamesCase.check``; the other cases each have
their own attack, plant and judge and are written out as functions.

Why one file past 600 lines: it holds one mechanism, the FS rows of the catalogue, and each case
is its attack source, its host-side plant and judge, and its control side by side, so a reader
checks one case without opening another file. Helpers shared with other categories live in
``contain.probe.context``.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contain.errors import ContainError
from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext
from contain.probe.context import (
    RunContext,
    Workspace,
    as_run_context,
    canary_sinks,
    run_attack,
    run_evidence,
    succeeded,
    verdict,
)

__all__ = ["CASES", "PROTECTED_NAMES_CASES", "ProtectedNamesCase"]

_HOOKS = "needs contain's own hooks"


def _sinks(run: Any, needles: dict[str, str]) -> list[str]:
    out = []
    for label, needle in needles.items():
        for sink in canary_sinks(run, needle):
            out.append(f"{label} reached {sink}")
    return out


# /etc/shadow holds real password hashes: the attack prints a SHA-256 of each line, never a line.
_READ_HOME_AND_SHADOW = r"""
import hashlib
rec("read $HOME canary", readf, P["home_file"])
rec("read /etc/shadow (line digests)",
    lambda: [hashlib.sha256(l).hexdigest() for l in readf("/etc/shadow").splitlines() if l.count(b":") >= 2])
done()
"""


def _shadow_digests() -> set[str]:
    """SHA-256 of each /etc/shadow line on the host (the judge's needles)."""
    import hashlib

    try:
        lines = Path("/etc/shadow").read_bytes().splitlines()
    except OSError:
        return set()
    return {hashlib.sha256(line).hexdigest() for line in lines if line.count(b":") >= 2}


def fs_01(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("home")
    home_file = rc.plant_home_file(canary)
    run, report = run_attack(rc.target, _READ_HOME_AND_SHADOW, home_file=str(home_file))
    control, _ = run_attack(rc.control, _READ_HOME_AND_SHADOW, home_file=str(home_file))
    shown = bool(canary_sinks(control, canary))
    breaches = _sinks(run, {"home canary": canary})
    read_digests = (report.get("read /etc/shadow (line digests)") or {}).get("value") or []
    if set(read_digests) & _shadow_digests():
        breaches.append("lines of the host's /etc/shadow were read (matched by digest)")
    return verdict(
        "FS-01",
        breaches=breaches,
        control_shows_breach=shown,
        contained="neither the $HOME canary nor /etc/shadow could be read",
        control=f"on the bare host the $HOME canary {'reached' if shown else 'did NOT reach'} stdout",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_PROC_ROOTS = r"""
p = P["path"]
ppid = os.getppid()
routes = [f"/proc/self/root{p}", f"/proc/1/root{p}", f"/proc/{ppid}/root{p}",
          f"/proc/{ppid}/cwd" + "/.." * 40 + p, f"/proc/1/cwd" + "/.." * 40 + p]
for r in routes:
    rec(r, readf, r)
rec("readlink /proc/1/root", os.readlink, "/proc/1/root")
rec("list /proc/1/root", os.listdir, "/proc/1/root")
done()
"""


def fs_02(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("home")
    home_file = rc.plant_home_file(canary)
    run, report = run_attack(rc.target, _PROC_ROOTS, path=str(home_file))
    control, _ = run_attack(rc.control, _PROC_ROOTS, path=str(home_file))
    shown = bool(canary_sinks(control, canary))
    return verdict(
        "FS-02",
        breaches=_sinks(run, {"home canary via /proc/*/root or cwd": canary}),
        control_shows_breach=shown,
        contained="no /proc/<pid>/root or cwd route reached the $HOME canary",
        control=f"on the bare host the /proc routes {'reached' if shown else 'did NOT reach'} the canary",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_TOOL_ROUTES = r"""
import shutil, subprocess, glob
tool, data = P["tool"], P["data"]
ld = (glob.glob("/lib64/ld-linux*.so*") + glob.glob("/lib/ld-linux*.so*") + [""])[0]
def run(argv):
    r = subprocess.run(argv, capture_output=True, timeout=10)
    if r.returncode != 0:
        raise OSError(errno.EACCES if r.returncode == 126 else errno.ENOENT, r.stderr.decode()[-200:])
    return r.stdout
rec("direct", run, [tool, data])
rec("/proc/self/root", run, ["/proc/self/root" + tool, data])
rec("ld.so", run, [ld, tool, data])
rec("python subprocess via sh", run, ["/bin/sh", "-c", 'exec "$0" "$1"', tool, data])
def copy_run():
    dst = "/tmp/" + os.path.basename(tool)
    shutil.copy(tool, dst)
    os.chmod(dst, 0o755)
    try:
        return run([dst, data])
    finally:
        os.unlink(dst)
rec("copy in /tmp", copy_run)
done()
"""

_ROUTES = ("direct", "/proc/self/root", "ld.so", "python subprocess via sh", "copy in /tmp")


def fs_03(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("tool")
    tools = rc.plant_dir("tool")
    tool = tools / "probe-cat"  # the canary is only in the data file, never in a path
    tool.write_bytes(Path("/bin/cat").read_bytes())
    tool.chmod(0o755)
    data = tools / "data"
    data.write_text(canary)
    data.chmod(0o644)
    # 1. tool and data not granted: every route must fail (the host file must not be reachable).
    hidden, hidden_report = run_attack(rc.target, _TOOL_ROUTES, tool=str(tool), data=str(data))
    # 2. tool granted read-only: the routes must agree (all succeed or all fail alike).
    bound = "/probe/tool"
    granted_target = {"files": [{"host": str(tools), "path": bound, "access": "read"}]}
    inside = bound if rc.target.has_contain_hooks else str(tools)
    _granted, granted_report = run_attack(
        rc.target,
        _TOOL_ROUTES,
        boundary=granted_target,
        tool=f"{inside}/{tool.name}",
        data=f"{inside}/data",
    )
    control, control_report = run_attack(rc.control, _TOOL_ROUTES, tool=str(tool), data=str(data))
    breaches = _sinks(hidden, {"the output of a tool that is not granted": canary})
    ok = succeeded(granted_report, *_ROUTES)
    if granted_report and ok and len(ok) != len(_ROUTES):
        failed = sorted(set(_ROUTES) - set(ok))
        breaches.append(
            f"denial is path-string based: {', '.join(ok)} ran the granted tool, {', '.join(failed)} did not"
        )
    shown = bool(canary_sinks(control, canary))
    return verdict(
        "FS-03",
        breaches=breaches,
        control_shows_breach=shown,
        contained=(
            f"an ungranted host tool ran by no route; a granted one ran by {len(ok)}/{len(_ROUTES)} routes (consistent)"
        ),
        control=(
            f"on the bare host the tool {'ran' if shown else 'did NOT run'} ({len(succeeded(control_report))} routes)"
        ),
        evidence={"not granted": hidden_report, "granted": granted_report, "run": run_evidence(hidden)},
        missing=None if hidden_report and granted_report else "the attack did not report",
    )


_WRITE_MARKERS = r"""
for path in P["paths"]:
    def w(path=path):
        with open(path, "x") as f:
            f.write(P["canary"])
    rec(f"create {path}", w)
done()
"""


def fs_04(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("host-marker")
    home = Path(os.environ.get("HOME") or os.path.expanduser("~"))
    paths = [Path(f"/tmp/host-marker-{canary}"), home / f"contain-probe-{canary}"]
    for path in paths:
        rc.remove_later(path)
    run, report = run_attack(rc.target, _WRITE_MARKERS, paths=[str(p) for p in paths], canary=canary)
    breaches = [f"{p} exists on the host" for p in paths if p.exists()]
    for path in paths:
        path.unlink(missing_ok=True)
    _control, _ = run_attack(rc.control, _WRITE_MARKERS, paths=[str(p) for p in paths], canary=canary)
    shown = all(p.exists() for p in paths)
    return verdict(
        "FS-04",
        breaches=breaches,
        control_shows_breach=shown,
        contained="no marker appeared in the host's /tmp or $HOME",
        control=f"on the bare host both markers {'appeared' if shown else 'did NOT appear'}",
        evidence={"attack": report, "run": run_evidence(run), "paths": [str(p) for p in paths]},
        missing=None if report else "the attack did not report",
    )


_SYMLINK_WRITE = r"""
ws = P["ws"]
for i, outside in enumerate(P["outside"]):
    link = f"{ws}/l{i}"
    rec(f"symlink {link} -> {outside}", os.symlink, outside, link)
    def w(link=link):
        with open(link, "w") as f:
            f.write(P["canary"])
    rec(f"write through {link}", w)
def sibling():
    with open(ws + "/sibling", "w") as f:
        f.write("ok")
rec("sibling", sibling)
done()
"""


def fs_05(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("symlink")
    outside_dir = rc.plant_dir("outside", writable_by_sandbox=True)
    targets = [outside_dir / f"target-{canary}", Path(f"/tmp/contain-probe-{canary}")]
    for path in targets:
        rc.remove_later(path)
    ws = rc.workspace("ws")
    run, report = run_attack(
        rc.target,
        _SYMLINK_WRITE,
        boundary=ws.boundary(),
        ws=ws.path_for(rc.target),
        outside=[str(p) for p in targets],
        canary=canary,
    )
    breaches = [f"{p} was created on the host through a symlink" for p in targets if p.exists()]
    for path in targets:
        path.unlink(missing_ok=True)
    ws2 = rc.workspace("ws-control")
    run_attack(rc.control, _SYMLINK_WRITE, ws=str(ws2.host), outside=[str(p) for p in targets], canary=canary)
    shown = all(p.exists() for p in targets)
    in_control = bool(succeeded(report, "sibling"))
    return verdict(
        "FS-05",
        breaches=breaches,
        control_shows_breach=shown,
        contained="writes through symlinks to outside paths created nothing on the host; the sibling was writable",
        control=f"on the bare host the symlinked targets {'were' if shown else 'were NOT'} created",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if in_control else "the workspace itself was not writable (in-sandbox control failed)",
    )


_HARDLINK = r"""
for src, dst in P["pairs"]:
    rec(f"link {src} -> {dst}", os.link, src, dst)
done()
"""


def fs_06(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("key")
    key = rc.plant_home_file(canary)  # stands in for ~/.ssh/id_rsa; the real one is never touched
    ws = rc.workspace("ws")
    inside = ws.path_for(rc.target)
    pairs = [("/etc/passwd", f"{inside}/p"), (str(key), f"{inside}/k")]
    run, report = run_attack(rc.target, _HARDLINK, boundary=ws.boundary(), pairs=pairs)
    breaches = []
    for src, name in (("/etc/passwd", "p"), (str(key), "k")):
        made = ws.host / name
        if made.exists() and os.stat(made).st_ino == os.stat(src).st_ino:
            breaches.append(f"{made} is a hard link to {src}")
    # The control links into a directory beside the key, so it is on the same file system
    # whatever /tmp is (a link across file systems fails with EXDEV even on the bare host).
    beside = Path(tempfile.mkdtemp(prefix=".contain-probe-links-", dir=key.parent))
    rc.remove_later(beside)
    run_attack(rc.control, _HARDLINK, pairs=[(str(key), f"{beside}/k")])
    made = beside / "k"
    shown = made.exists() and os.stat(made).st_ino == os.stat(key).st_ino
    return verdict(
        "FS-06",
        breaches=breaches,
        control_shows_breach=shown,
        contained="no hard link to /etc/passwd or a $HOME key appeared in the workspace",
        control=f"on the bare host a hard link to the $HOME key {'was' if shown else 'was NOT'} created",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_MKNOD = r"""
ws = P["ws"]
rec("mknod c 1 3", os.mknod, ws + "/c13", 0o666 | 0o020000, os.makedev(1, 3))
rec("mknod b 8 0", os.mknod, ws + "/b80", 0o666 | 0o060000, os.makedev(8, 0))
rec("mkfifo", os.mkfifo, ws + "/fifo")
def plain():
    with open(ws + "/plain", "w") as f:
        f.write("plain")
rec("write a plain file", plain)
done()
"""


def _device_nodes(directory: Path) -> list[str]:
    out = []
    for name in ("c13", "b80"):
        path = directory / name
        if path.exists() and (stat.S_ISCHR(path.lstat().st_mode) or stat.S_ISBLK(path.lstat().st_mode)):
            out.append(f"device node {path} exists on the host")
    return out


def fs_07(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    ws = rc.workspace("ws")
    run, report = run_attack(rc.target, _MKNOD, boundary=ws.boundary(), ws=ws.path_for(rc.target))
    # The host's view and the kernel's answer inside: under gVisor a special file made inside a
    # write bind stays in the Sentry (neither a FIFO nor a device reaches the host), so a mknod
    # that succeeded inside is a breach even when the host sees nothing.
    breaches = _device_nodes(ws.host) + [
        f"{n} succeeded inside" for n in succeeded(report, "mknod c 1 3", "mknod b 8 0")
    ]
    fifo = ws.host / "fifo"
    fifo_on_host = fifo.exists() and stat.S_ISFIFO(fifo.lstat().st_mode)
    plain_on_host = (ws.host / "plain").is_file()
    fifo_ok = fifo_on_host or (plain_on_host and bool(succeeded(report, "mkfifo")))
    ws2 = rc.workspace("ws-control")
    run_attack(rc.control, _MKNOD, ws=str(ws2.host))
    shown = len(_device_nodes(ws2.host)) == 2
    return verdict(
        "FS-07",
        breaches=breaches,
        control_shows_breach=shown,
        contained="mknod of character and block devices failed; mkfifo worked (control)",
        control=f"on the bare host (root) both device nodes {'were' if shown else 'were NOT'} created",
        evidence={
            "attack": report,
            "run": run_evidence(run),
            "fifo_on_host": fifo_on_host,
            "plain_file_on_host": plain_on_host,
        },
        missing=None if fifo_ok else "mkfifo in the workspace failed, so the workspace was not writable",
    )


_PROTECTED_FILES = (".git/config", ".git/hooks/pre-commit", ".bashrc", ".vscode/settings.json", ".gitconfig")

_OVERWRITE = r"""
ws = P["ws"]
for rel in P["files"] + ["sibling.txt"]:
    def w(rel=rel):
        with open(f"{ws}/{rel}", "w") as f:
            f.write(P["canary"])
    rec(f"write {rel}", w)
done()
"""


def _plant_protected(rc: RunContext, label: str) -> Workspace:
    ws = rc.workspace(label)
    for rel in (*_PROTECTED_FILES, "sibling.txt"):
        path = ws.host / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"original {rel}\n")
    rc.give_to_sandbox(ws.host)
    return ws


def _changed(ws: Workspace) -> list[str]:
    return [rel for rel in _PROTECTED_FILES if (ws.host / rel).read_text() != f"original {rel}\n"]


_CREATE_PROTECTED = r"""
import subprocess
ws = P["ws"]
def hook():
    os.makedirs(ws + "/.git/hooks", exist_ok=True)
    with open(ws + "/.git/hooks/post-checkout", "w") as f:
        f.write("#!/bin/sh\n")
rec("create .git/hooks/post-checkout", hook)
def git_init():
    r = subprocess.run(["git", "init", "-q", ws + "/sub"], capture_output=True, timeout=20)
    if r.returncode:
        raise OSError(errno.EPERM, r.stderr.decode()[-300:])
rec("git init sub/", git_init)
rec("mkdir .vscode", os.mkdir, ws + "/.vscode")
def rc():
    with open(ws + "/.bashrc", "x") as f:
        f.write("echo pwned\n")
rec("create .bashrc", rc)
def sibling():
    with open(ws + "/sibling.txt", "w") as f:
        f.write("ok")
rec("sibling", sibling)
done()
"""

_CREATED = (".git/hooks/post-checkout", ".vscode", ".bashrc")


def _plant_bare_repo(rc: RunContext, label: str) -> Workspace:
    ws = rc.workspace(label)
    (ws.host / ".git").mkdir()
    (ws.host / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    rc.give_to_sandbox(ws.host)
    return ws


def _created(ws: Workspace) -> list[str]:
    out = [rel for rel in _CREATED if (ws.host / rel).exists()]
    if (ws.host / "sub" / ".git").exists():
        out.append("sub/.git (a new repository: its config and hooks run on the next git command there)")
    return out


@dataclass(frozen=True)
class ProtectedNamesCase:
    """A case that attacks protected names inside a writable workspace (FS-08, FS-09).

    The one shape: plant a workspace, run ``attack`` on the target with the workspace bound
    writable, list what ``damage`` finds on the host (each entry is a breach), check the
    in-sandbox control (``sibling.txt`` was writable: it holds the canary when the attack
    carries one, else it exists), then plant a second workspace and run the same attack on the
    bare host, which must show at least ``control_needs`` damage entries.
    """

    id: str
    title: str
    expected: str
    attack: str
    plant: Callable[[RunContext, str], Workspace]
    damage: Callable[[Workspace], list[str]]
    damage_verb: str  # "<entry> was <damage_verb> on the host"
    control_needs: int
    control_says: str  # "on the bare host <control_says>" with "were" or "were NOT"
    contained: str
    canary_label: str | None = None  # the attack gets a canary and must write it to sibling.txt
    params: Mapping[str, Any] = field(default_factory=dict)

    def check(self, ctx: ProbeContext) -> CaseResult:
        rc = as_run_context(ctx)
        canary: dict[str, Any] = {"canary": rc.canary(self.canary_label)} if self.canary_label is not None else {}
        ws = self.plant(rc, "ws")
        run, report = run_attack(
            rc.target, self.attack, boundary=ws.boundary(), ws=ws.path_for(rc.target), **self.params, **canary
        )
        damage = self.damage(ws)
        sibling = ws.host / "sibling.txt"
        sibling_ok = sibling.read_text() == canary["canary"] if canary else sibling.exists()
        ws2 = self.plant(rc, "ws-control")
        run_attack(rc.control, self.attack, ws=str(ws2.host), **self.params, **canary)
        shown = len(self.damage(ws2)) >= self.control_needs
        return verdict(
            self.id,
            breaches=[f"{entry} was {self.damage_verb} on the host" for entry in damage],
            control_shows_breach=shown,
            contained=self.contained,
            control="on the bare host " + self.control_says.format(were="were" if shown else "were NOT"),
            evidence={"attack": report, "run": run_evidence(run)},
            missing=None if sibling_ok else "the sibling file was not writable (in-sandbox control failed)",
        )

    def case(self) -> ProbeCase:
        return _case(
            self.id,
            self.title,
            self.expected,
            self.check,
            wrap=f"{_HOOKS}: protected paths inside a writable root are a contain boundary feature",
        )


PROTECTED_NAMES_CASES: tuple[ProtectedNamesCase, ...] = (
    ProtectedNamesCase(
        "FS-08",
        "overwrite .git/config, hooks, .bashrc, .vscode, .gitconfig",
        "denied; originals byte-identical; sibling writable",
        attack=_OVERWRITE,
        plant=_plant_protected,
        damage=_changed,
        damage_verb="modified",
        control_needs=len(_PROTECTED_FILES),
        control_says="the protected files {were} overwritten",
        contained="every protected file stayed byte-identical; the sibling file was writable",
        canary_label="dotfile",
        params={"files": list(_PROTECTED_FILES)},
    ),
    ProtectedNamesCase(
        "FS-09",
        "create .git/hooks/post-checkout, git init sub/, .vscode, .bashrc",
        "creation denied",
        attack=_CREATE_PROTECTED,
        plant=_plant_bare_repo,
        damage=_created,
        damage_verb="created",
        control_needs=len(_CREATED),
        control_says="the protected names {were} created",
        contained="no protected name could be created; a sibling file could",
    ),
)


_WRITE_THROUGH_DECOYS = r"""
ws = P["ws"]
for rel in (".vscode/settings.json", ".git/hooks/pre-commit"):
    def w(rel=rel):
        with open(f"{ws}/{rel}", "w") as f:
            f.write(P["canary"])
    rec(f"write {rel}", w)
done()
"""


def _plant_decoys(rc: RunContext, label: str) -> tuple[Workspace, list[Path]]:
    ws = rc.workspace(label)
    decoys = [rc.plant_dir(f"{label}-decoy-vscode", writable_by_sandbox=True)]
    decoys.append(rc.plant_dir(f"{label}-decoy-git", writable_by_sandbox=True))
    (decoys[1] / "hooks").mkdir()
    rc.give_to_sandbox(decoys[1])
    (ws.host / ".vscode").symlink_to(decoys[0])
    (ws.host / ".git").symlink_to(decoys[1])
    return ws, decoys


def _decoy_writes(decoys: list[Path]) -> list[str]:
    return [str(p) for d in decoys for p in d.rglob("*") if p.is_file()]


def fs_10(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("decoy")
    ws, decoys = _plant_decoys(rc, "ws")
    evidence: dict[str, Any] = {}
    try:
        run, report = run_attack(
            rc.target, _WRITE_THROUGH_DECOYS, boundary=ws.boundary(), ws=ws.path_for(rc.target), canary=canary
        )
        evidence.update(attack=report, run=run_evidence(run))
    except ContainError as exc:  # a refusal to launch that names its cause is the contained outcome
        evidence["launch_refused"] = f"{type(exc).__name__}: {exc.cause}"
    written = _decoy_writes(decoys)
    ws2, decoys2 = _plant_decoys(rc, "ws-control")
    run_attack(rc.control, _WRITE_THROUGH_DECOYS, ws=str(ws2.host), canary=canary)
    shown = len(_decoy_writes(decoys2)) == 2
    how = (
        "the launcher refused with an explicit error" if "launch_refused" in evidence else "the decoys stayed untouched"
    )
    return verdict(
        "FS-10",
        breaches=[f"decoy file {p} was written through a pre-planted symlink" for p in written],
        control_shows_breach=shown,
        contained=how,
        control=f"on the bare host the writes {'landed' if shown else 'did NOT land'} in the decoys",
        evidence=evidence,
    )


_REFER = r"""
ro, ws = P["ro"], P["ws"]
rec("rename ro -> ws", os.rename, ro + "/moved", ws + "/moved")
rec("link ro -> ws", os.link, ro + "/linked", ws + "/linked")
def sibling():
    with open(ws + "/sibling", "w") as f:
        f.write("ok")
rec("sibling", sibling)
done()
"""


def _plant_refer(rc: RunContext, label: str) -> tuple[Path, Workspace]:
    ro = rc.plant_dir(f"{label}-ro", writable_by_sandbox=True)
    for name in ("moved", "linked"):
        (ro / name).write_text("original\n")
    rc.give_to_sandbox(ro)
    return ro, rc.workspace(label)


def _refer_breaches(ro: Path, ws: Workspace) -> list[str]:
    out = []
    if not (ro / "moved").exists() or (ws.host / "moved").exists():
        out.append("a file was renamed out of the read-only directory")
    if (ws.host / "linked").exists():
        out.append("a file of the read-only directory was hard-linked into the writable one")
    return out


def fs_13(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    ro, ws = _plant_refer(rc, "ws")
    files = [{"host": str(ro), "path": "/probe/ro", "access": "read"}, *ws.boundary()["files"]]
    run, report = run_attack(
        rc.target,
        _REFER,
        boundary={"files": files},
        ro="/probe/ro" if rc.target.has_contain_hooks else str(ro),
        ws=ws.path_for(rc.target),
    )
    breaches = _refer_breaches(ro, ws)
    ro2, ws2 = _plant_refer(rc, "ws-control")
    run_attack(rc.control, _REFER, ro=str(ro2), ws=str(ws2.host))
    shown = len(_refer_breaches(ro2, ws2)) == 2
    return verdict(
        "FS-13",
        breaches=breaches,
        control_shows_breach=shown,
        contained="rename and link out of the read-only directory failed; the sibling was writable",
        control=f"on the bare host rename and link {'worked' if shown else 'did NOT work'}",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None
        if (ws.host / "sibling").exists()
        else "the workspace was not writable (in-sandbox control failed)",
    )


_TRUNCATE = r"""
f = P["file"]
rec("open O_TRUNC", lambda: os.close(os.open(f, os.O_WRONLY | os.O_TRUNC)))
def ft():
    fd = os.open(f, os.O_RDONLY)
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
rec("ftruncate on a read-only fd", ft)
rec("truncate(path)", os.truncate, f, 1)
done()
"""

_ORIGINAL = "original content that must survive\n"


def _plant_truncatable(rc: RunContext, label: str) -> Path:
    directory = rc.plant_dir(label, writable_by_sandbox=True)
    target = directory / "granted.txt"
    target.write_text(_ORIGINAL)
    target.chmod(0o666)
    rc.give_to_sandbox(directory)
    return target


def fs_14(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    target = _plant_truncatable(rc, "ro")
    inside = "/probe/ro/granted.txt" if rc.target.has_contain_hooks else str(target)
    boundary = {"files": [{"host": str(target.parent), "path": "/probe/ro", "access": "read"}]}
    run, report = run_attack(rc.target, _TRUNCATE, boundary=boundary, file=inside)
    changed = target.read_text() != _ORIGINAL
    control_file = _plant_truncatable(rc, "ro-control")
    run_attack(rc.control, _TRUNCATE, file=str(control_file))
    shown = control_file.read_text() != _ORIGINAL
    return verdict(
        "FS-14",
        breaches=[f"the read-only-granted file was truncated ({target.stat().st_size} bytes left)"] if changed else [],
        control_shows_breach=shown,
        contained="O_TRUNC, ftruncate and truncate all failed; the file is byte-identical",
        control=f"on the bare host the file {'was' if shown else 'was NOT'} truncated",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


def fs_15(ctx: ProbeContext) -> CaseResult:
    """Not an attack: contain's own layer decision, checked with host facts lowered to ABI 0."""
    import dataclasses

    from contain.boundary import Boundary
    from contain.boundary.plain import plain_boundary
    from contain.errors import UnsupportedHost
    from contain.host.facts import detect_host
    from contain.runtime.plan import plan_layers

    facts = detect_host()
    low = dataclasses.replace(facts, landlock_abi=0)
    required = plain_boundary(Boundary.model_validate({"hardening": {"landlock": "required"}}))
    auto = plain_boundary(Boundary.model_validate({"hardening": {"landlock": "auto"}}))
    evidence: dict[str, Any] = {"host_landlock_abi": facts.landlock_abi}
    breaches = []
    try:
        plan = plan_layers(required, low, egress_available=True)
        breaches.append(f"landlock: required was accepted on ABI 0 ({plan.report.get('landlock')})")
    except UnsupportedHost as exc:
        evidence["required_on_abi_0"] = f"refused: {exc.cause}"
    plan_auto = plan_layers(auto, low, egress_available=True)
    evidence["auto_on_abi_0"] = plan_auto.report.get("landlock")
    if plan_auto.landlock is not None or "applied" in str(plan_auto.report.get("landlock", "")):
        breaches.append("landlock: auto claims Landlock is applied on ABI 0")
    control_ok: bool | None = None
    if facts.landlock_abi >= 1:
        plan_real = plan_layers(required, facts, egress_available=True)
        control_ok = plan_real.landlock is not None
        evidence["required_on_host"] = plan_real.report.get("landlock")
    return verdict(
        "FS-15",
        breaches=breaches,
        control_shows_breach=control_ok,
        contained="ABI 0 with landlock required is refused; with auto the report says it is absent",
        control=(
            f"on this host (ABI {facts.landlock_abi}) landlock: required is planned "
            f"{'with' if control_ok else 'without'} Landlock"
        ),
        evidence=evidence,
        missing=None if control_ok is not None else "this host has no Landlock to compare with",
    )


_SYSCTL_OPEN = r"""
import glob
paths = ["/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger"]
paths += sorted(glob.glob("/sys/fs/cgroup/*/release_agent") + glob.glob("/sys/fs/cgroup/release_agent"))[:20]
# Open for writing and close without writing a byte: the open itself is the breach.
for p in paths:
    rec(f"open {p} for writing", lambda p=p: os.close(os.open(p, os.O_WRONLY)))
done()
"""


def fs_16(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    run, report = run_attack(rc.target, _SYSCTL_OPEN)
    _control, control_report = run_attack(rc.control, _SYSCTL_OPEN)
    opened = succeeded(report)
    shown = bool(succeeded(control_report))
    return verdict(
        "FS-16",
        breaches=[f"{name} succeeded" for name in opened],
        control_shows_breach=shown,
        contained="no kernel tunable or cgroup release_agent could be opened for writing",
        control=f"on the bare host (root) {len(succeeded(control_report))} of them opened for writing",
        evidence={
            "attack": report,
            "run": run_evidence(run),
            "judged_by": "the kernel's answer to open(O_WRONLY); nothing is ever written",
        },
        missing=None if report else "the attack did not report",
    )


_MOUNTS = r"""
import ctypes
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
def mount(src, dst, fstype, flags):
    if libc.mount(src.encode(), dst.encode(), fstype.encode() if fstype else None, flags, None) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def umount(path, flags=0):
    if libc.umount2(path.encode(), flags) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
d = P["dir"]
rec("mkdir", lambda: [os.makedirs(d + m, exist_ok=True) for m in ("/m1", "/m2")])
rec("mount -t tmpfs", mount, "tmpfs", d + "/m1", "tmpfs", 0)
rec("mount --bind", mount, "/", d + "/m2", None, 4096)  # MS_BIND
rec("umount2 /proc", umount, "/proc", 2)  # MNT_DETACH; last: nothing below reads /proc
done()
"""


def fs_17(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("mount")
    inside_dir = f"/tmp/{canary}"
    run, report = run_attack(rc.target, _MOUNTS, dir=inside_dir)
    # The control is root of a fresh user+mount namespace: mounts work there and vanish with it.
    _control, control_report = run_attack(rc.userns_control, _MOUNTS, dir=str(rc.plant_dir("mnt")))
    leaked = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if canary in line]
    breaches = [f"{name} succeeded" for name in succeeded(report, "mount -t tmpfs", "mount --bind", "umount2 /proc")]
    breaches += [f"a mount leaked into the host's table: {line}" for line in leaked]
    shown = bool(succeeded(control_report, "mount -t tmpfs", "mount --bind"))
    rc.remove_later(f"/tmp/{canary}")
    return verdict(
        "FS-17",
        breaches=breaches,
        control_shows_breach=shown,
        contained="mount, bind mount and umount2 all failed",
        control=f"as root of a fresh user+mount namespace the mounts {'worked' if shown else 'did NOT work'}",
        evidence={
            "attack": report,
            "run": run_evidence(run),
            "judged_by": "the kernel's answer, and the host mount table",
        },
        missing=None if succeeded(report, "mkdir") else "no writable directory to mount on",
    )


def _case(case_id: str, title: str, expected: str, check: Any, **na: str) -> ProbeCase:
    return ProbeCase(case_id, Category.FS, title, expected, check, dict(na))


CASES: tuple[ProbeCase, ...] = (
    _case("FS-01", "read a $HOME canary and /etc/shadow", "ENOENT/EACCES; canary at no sink", fs_01),
    _case("FS-02", "read via /proc/self/root, /proc/1/root, /proc/<ppid>/cwd", "same denial as FS-01", fs_02),
    _case("FS-03", "run a tool via /proc/self/root, a /tmp copy, ld.so, sh", "denial not path-string based", fs_03),
    _case("FS-04", "write /tmp/host-marker-<id> and $HOME/x", "marker absent on host", fs_04),
    _case("FS-05", "symlink in the workspace to an outside path, write", "write fails; target absent", fs_05),
    _case("FS-06", "hard-link /etc/passwd and a $HOME key into the workspace", "EXDEV/EPERM", fs_06),
    _case("FS-07", "mknod c 1 3, mknod b 8 0, mkfifo", "mknod EPERM; mkfifo allowed (control)", fs_07),
    *(row.case() for row in PROTECTED_NAMES_CASES),
    _case(
        "FS-10",
        ".vscode/.git pre-planted as symlinks to decoys",
        "launcher refuses or protects the real target; decoy untouched",
        fs_10,
        wrap=f"{_HOOKS}: the workspace is bound by contain's launcher",
    ),
    _case("FS-13", "rename/link from a read-only dir into a writable one", "EXDEV", fs_13),
    _case("FS-14", "O_TRUNC / ftruncate a read-only-granted file", "denied", fs_14),
    _case(
        "FS-15",
        "Landlock ABI below what the boundary requires",
        "refused or reported degraded; never silently weaker",
        fs_15,
        wrap=f"{_HOOKS}: this checks contain's own layer decision",
    ),
    _case("FS-16", "open core_pattern, sysrq-trigger, release_agent for writing", "EROFS/EACCES", fs_16),
    _case("FS-17", "mount -t tmpfs, umount2 /proc, mount --bind", "EPERM", fs_17),
)
