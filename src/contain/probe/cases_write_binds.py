"""Write-bind cases contain adds beyond the catalogue (issue 18): FS-51, FS-52, RE-51.

- FS-51: a write-bound repository redirected to attacker-made git metadata (``commondir``, a
  gitfile, a copied or symlinked ``.git``, a nested repository, a bare repository at the root).
  Judged by the host's real ``git`` run in each repository after the run, the way a careless user
  or a CI image that marks the workspace safe would (``-c safe.directory=*``): a canary command
  planted in ``core.fsmonitor`` and in an alias must not run. Control: the same writes on plain
  host copies of the repositories make the host's git run the canary.
- FS-52: teardown following symlinks the workload planted in place of ``.git`` and of other
  masked names. Judged by a victim directory outside every bind, filled with what a clean-up
  removes (empty ``hooks/``, ``config``…): it must be intact. Control: the same swap on a host
  copy followed by a clean-up by path (what teardown did before issue 18) damages the victim.
- RE-51: an export bomb of entries and depth (5,000 empty directories and a 1,500-deep chain
  under a 32 MiB disk budget, room for the tree within the budget's inode cap). Judged by the
  host's disk use of the export directory and by the run's result reaching the caller. Control:
  the same tree copied by a plain recursive copy uses far more than the budget or dies with
  RecursionError.

All three need contain's own hooks (write binds, teardown and export are contain features); a
wrapped third-party sandbox is not applicable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext
from contain.probe.context import RunContext, as_run_context, run_attack, run_evidence, verdict

__all__ = ["CASES"]

_HOOKS = "needs contain's own hooks: write binds, their teardown and exports are contain features"

# Sandbox-side git must trust a repository owned by another uid; this grants nothing on the host.
_GIT_TRUST = "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; "
_EVIL_CONFIG = (
    'evilcfg() { printf \'[core]\\n\\tfsmonitor = "%s"\\n[alias]\\n\\tcanary = "!%s"\\n\' "$CANARY" "$CANARY"; }; '
)
# One repository per vector, so that no vector's failure hides another's success.
_VECTORS: dict[str, str] = {
    "commondir": (
        "mkdir -p evil/hooks; cp -a .git/objects .git/refs .git/HEAD evil/; "
        "{ printf '[core]\\n\\trepositoryformatversion = 0\\n'; evilcfg; } > evil/config; "
        "echo ../evil > .git/commondir"
    ),
    "gitfile": "mkdir -p evil; cp -a .git/. evil/; evilcfg >> evil/config; mv .git .git-moved"
    " && echo 'gitdir: evil' > .git",
    "copy": "mv .git .gitold && cp -a .gitold .git && evilcfg >> .git/config",
    "symlink": "cp -a .git evil && evilcfg >> evil/config; mv .git .git-moved && ln -s evil .git",
    "nested": "git init -q sub && evilcfg >> sub/.git/config",
    # refs/ is writable (branches), so .git can be made invalid; git then tries the root as bare
    "bare_root": "cp -a .git/HEAD .git/objects .git/refs . && { cat .git/config; evilcfg; } > config"
    " && rm -rf .git/refs",
}

_RUN_VECTORS = r"""
import subprocess
for name, where in P["repos"].items():
    env = dict(os.environ, CANARY=P["canaries"][name])
    rec(name, lambda w=where, n=name, e=env: subprocess.run(
        ["sh", "-c", P["prelude"] + P["vectors"][n]], cwd=w, env=e, capture_output=True, timeout=15).returncode)
done()
"""


def _make_repo(path: Path) -> None:
    git = ["git", "-c", "safe.directory=*", "-c", "user.name=probe", "-c", "user.email=probe@invalid", "-C", str(path)]
    for command in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "i"]):
        subprocess.run([*git, *command], capture_output=True, check=True, timeout=30)


def _git_ran_canary(repo: Path, marker: Path) -> bool:
    for where in (repo, repo / "sub"):
        for command in (["status", "--short"], ["canary"]):
            if where.is_dir():
                subprocess.run(
                    ["git", "-c", "safe.directory=*", *command], cwd=where, capture_output=True, timeout=30, check=False
                )
    return marker.exists()


def _plant_repos(rc: RunContext, label: str, *, for_sandbox: bool) -> tuple[dict[str, Path], dict[str, Path]]:
    repos, markers = {}, {}
    for name in _VECTORS:
        ws = rc.workspace(f"{label}-{name}") if for_sandbox else None
        path = ws.host if ws is not None else rc.plant_dir(f"{label}-{name}")
        _make_repo(path)
        if for_sandbox:
            rc.give_to_sandbox(path)
        repos[name] = path
        markers[name] = rc.root / f"{label}-{name}-canary-{rc.canary('git')}"
    return repos, markers


def fs_51(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    if shutil.which("git") is None:
        return verdict(
            "FS-51", breaches=[], control_shows_breach=None, contained="", control=None, evidence={},
            missing="git is not installed on the host, so the host-side judge cannot run",
        )  # fmt: skip
    repos, markers = _plant_repos(rc, "repo", for_sandbox=True)
    files = [{"host": str(p), "path": f"/probe/{n}", "access": "write"} for n, p in repos.items()]
    canaries = {n: f"touch {m}; false" for n, m in markers.items()}
    params: dict[str, Any] = {"vectors": _VECTORS, "canaries": canaries, "prelude": _GIT_TRUST + _EVIL_CONFIG}
    run, report = run_attack(
        rc.target, _RUN_VECTORS, boundary={"files": files}, repos={n: f"/probe/{n}" for n in repos}, **params
    )
    breaches = [f"{n}: the host's git ran the canary" for n in repos if _git_ran_canary(repos[n], markers[n])]
    control_repos, control_markers = _plant_repos(rc, "control", for_sandbox=False)
    control_canaries = {n: f"touch {m}; false" for n, m in control_markers.items()}
    run_attack(
        rc.control,
        _RUN_VECTORS,
        repos={n: str(p) for n, p in control_repos.items()},
        **{**params, "canaries": control_canaries},
    )
    shown = [n for n in control_repos if _git_ran_canary(control_repos[n], control_markers[n])]
    return verdict(
        "FS-51",
        breaches=breaches,
        control_shows_breach=len(shown) == len(_VECTORS),
        contained=f"the host's git ran no canary after {len(_VECTORS)} redirection vectors",
        control=f"on plain host copies the host's git ran the canary for {len(shown)}/{len(_VECTORS)} vectors",
        evidence={"attack": report, "run": run_evidence(run), "control_breached": shown},
        missing=None if report else "the attack did not report",
    )


# Names a clean-up removes at teardown; the victim holds each, shaped like a placeholder.
_VICTIM_DIRS = ("hooks", "worktrees", "modules", "info", "branches", "remotes")
_VICTIM_FILES = ("config", "commondir", "config.worktree")
_SWAPPED = (".git", ".vscode", ".idea")

_SWAP_FOR_SYMLINKS = r"""
ws, victim = P["ws"], P["victim"]
for name in P["swapped"]:
    rec("move " + name, os.rename, ws + "/" + name, ws + "/" + name + ".old")
    rec("link " + name, os.symlink, victim, ws + "/" + name)
rec("mkdir d", os.makedirs, ws + "/d", exist_ok=True)
rec("link d/.git", os.symlink, victim, ws + "/d/.git")
done()
"""


def _plant_victim(rc: RunContext, label: str) -> Path:
    victim = rc.plant_dir(label)
    for name in _VICTIM_DIRS:
        (victim / name).mkdir(mode=0o555)
    for name in _VICTIM_FILES:
        (victim / name).write_bytes(b".\n" if name == "commondir" else b"")
        (victim / name).chmod(0o444)
    return victim


def _victim_damage(victim: Path) -> list[str]:
    present = set(os.listdir(victim))
    return [
        f"{victim}/{n} was removed through a planted symlink"
        for n in (*_VICTIM_DIRS, *_VICTIM_FILES)
        if n not in present
    ]


def _cleanup_by_path(ws: Path) -> None:
    """The control's teardown: remove placeholders by path string (what contain did before)."""
    for relative in (".git/hooks", ".git/worktrees", ".git/modules", ".git/info", ".git/branches", ".git/remotes",
                     ".vscode/hooks", ".idea/hooks", "d/.git/hooks"):  # fmt: skip
        try:
            os.rmdir(ws / relative)
        except OSError:
            continue
    for relative in (".git/config", ".git/commondir", ".git/config.worktree"):
        try:
            os.unlink(ws / relative)
        except OSError:
            continue


def fs_52(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    victim = _plant_victim(rc, "victim")
    ws = rc.workspace("ws")
    (ws.host / ".git").mkdir()
    rc.give_to_sandbox(ws.host)
    run, report = run_attack(
        rc.target,
        _SWAP_FOR_SYMLINKS,
        boundary=ws.boundary(),
        ws=ws.path_for(rc.target),
        victim=str(victim),
        swapped=list(_SWAPPED),
    )
    breaches = _victim_damage(victim)
    control_victim = _plant_victim(rc, "victim-control")
    control_ws = rc.plant_dir("ws-control")
    for name in _SWAPPED:
        (control_ws / name).mkdir()
    run_attack(rc.control, _SWAP_FOR_SYMLINKS, ws=str(control_ws), victim=str(control_victim), swapped=list(_SWAPPED))
    _cleanup_by_path(control_ws)
    shown = bool(_victim_damage(control_victim))
    return verdict(
        "FS-52",
        breaches=breaches,
        control_shows_breach=shown,
        contained="the victim outside every bind is intact after teardown",
        control=f"a clean-up by path after the same swap {'damaged' if shown else 'did NOT damage'} the victim",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_BOMB_DIRS = 5_000
_BOMB_DEPTH = 1_500  # past Python's default recursion limit of 1000
# The disk budget also caps inodes (disk_bytes / 4 KiB, runtime/disk_budget.py), so the budget must
# leave room for the whole tree inside the sandbox: the case tests the export's own caps.
_BOMB_BUDGET_BYTES = 32 * 1024**2
assert _BOMB_BUDGET_BYTES // 4096 > _BOMB_DIRS + _BOMB_DEPTH + 16

_EXPORT_BOMB = r"""
os.chdir(P["out"])
def wide():
    for i in range(P["dirs"]):
        os.mkdir("d%d" % i)
    return P["dirs"]
def deep():
    os.mkdir("deep"); os.chdir("deep")
    for _ in range(P["depth"]):
        os.mkdir("a"); os.chdir("a")
    return P["depth"]
rec("wide", wide)
os.chdir(P["out"])
rec("deep", deep)
done()
"""


def _disk_bytes(root: Path) -> int:
    """Bytes of host disk the tree at ``root`` occupies (allocated blocks, entries included)."""
    total = os.lstat(root).st_blocks * 512
    for current, dirs, files in os.walk(root):
        for name in dirs + files:  # each entry once: as a child of its parent
            total += os.lstat(os.path.join(current, name)).st_blocks * 512
    return total


def _remove_deep(rc: RunContext, path: Path) -> None:
    from contain.runtime.fdtree import DIR_FLAGS, remove_tree_at

    def remove() -> None:
        if not path.exists():
            return
        parent = os.open(path.parent, DIR_FLAGS)
        try:
            remove_tree_at(parent, path.name, max_entries=1_000_000)
        finally:
            os.close(parent)

    rc.defer(remove)


def re_51(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    out = rc.root / f"export-{rc.canary('out')}"
    _remove_deep(rc, out)
    boundary = {
        "files": [{"path": "/work/out", "access": "scratch", "export": str(out)}],
        "resources": {"disk_bytes": _BOMB_BUDGET_BYTES},
    }
    breaches: list[str] = []
    evidence: dict[str, Any] = {}
    try:
        run, report = run_attack(
            rc.target,
            _EXPORT_BOMB,
            boundary=boundary,
            timeout_s=25,
            out="/work/out",
            dirs=_BOMB_DIRS,
            depth=_BOMB_DEPTH,
        )
        evidence.update(attack=report, run=run_evidence(run))
    except RecursionError as exc:
        report = {}
        breaches.append(f"the run's result was lost: {type(exc).__name__} during the export")
    used = _disk_bytes(out) if out.exists() else 0
    evidence["export_disk_bytes"] = used
    if used > 2 * _BOMB_BUDGET_BYTES:
        breaches.append(f"the export used {used} bytes of host disk under a {_BOMB_BUDGET_BYTES}-byte budget")
    control_src, control_dst = rc.root / "bomb-control-src", rc.root / "bomb-control-dst"
    _remove_deep(rc, control_src)
    _remove_deep(rc, control_dst)
    control_src.mkdir()
    run_attack(rc.control, _EXPORT_BOMB, out=str(control_src), dirs=_BOMB_DIRS, depth=_BOMB_DEPTH)
    try:
        shutil.copytree(control_src, control_dst, symlinks=True)
        control_failure = ""
    except RecursionError:
        control_failure = "RecursionError"
    control_used = _disk_bytes(control_dst) if control_dst.exists() else 0
    shown = bool(control_failure) or control_used > 2 * _BOMB_BUDGET_BYTES
    made = bool(report.get("wide", {}).get("ok")) and bool(report.get("deep", {}).get("ok"))
    return verdict(
        "RE-51",
        breaches=breaches,
        control_shows_breach=shown,
        contained=f"the export stopped at its limits ({used} bytes of host disk) and the run's result arrived",
        control=f"a plain recursive copy used {control_used} bytes"
        + (f" and died with {control_failure}" if control_failure else ""),
        evidence=evidence,
        missing=None if made else "the attack did not build the tree (no result to judge)",
    )


def _case(case_id: str, category: Category, title: str, expected: str, check: Any) -> ProbeCase:
    return ProbeCase(case_id, category, title, expected, check, {"wrap": _HOOKS})


CASES: tuple[ProbeCase, ...] = (
    _case(
        "FS-51",
        Category.FS,
        "redirect a write-bound repository: commondir, gitfile, copied/symlinked .git, nested and bare repos",
        "the host's git runs no canary; commits still work",
        fs_51,
    ),
    _case(
        "FS-52",
        Category.FS,
        "swap .git, .vscode, .idea and d/.git for symlinks to a victim before teardown",
        "the victim outside every bind is intact",
        fs_52,
    ),
    _case(
        "RE-51",
        Category.RE,
        "export 5,000 empty directories and a 1,500-deep chain under a 32 MiB disk budget",
        "export capped in entries and depth and reported; the run's result survives",
        re_51,
    ),
)
