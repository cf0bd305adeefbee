"""Write binds against a live sandbox: git metadata redirection, teardown through planted symlinks,
concurrent sandboxes on one bind, and export bombs. Each attack runs inside; the judge is the
host's own view afterwards (the host's real git for repositories), with a positive control that
shows the same writes succeed on a plain host copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.runtime import Sandbox

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

GIT = shutil.which("git")
# Sandbox-side git needs to trust a repository owned by another uid; this grants nothing on the host.
GIT_ENV = "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'; "

# Each vector writes git metadata that would make the host's next git command run $CANARY: through
# core.fsmonitor (`git status` in a worktree) or an alias (`git canary`, in a bare repository too).
EVIL_CONFIG = (
    'evilcfg() { printf \'[core]\\n\\tfsmonitor = "%s"\\n[alias]\\n\\tcanary = "!%s"\\n\' "$CANARY" "$CANARY"; }; '
)
REDIRECT_VECTORS = {
    "commondir": (
        "mkdir -p evil/hooks; cp -a .git/objects .git/refs .git/HEAD evil/; "
        "{ printf '[core]\\n\\trepositoryformatversion = 0\\n'; evilcfg; } > evil/config; "
        "echo ../evil > .git/commondir"
    ),
    "gitfile": "mkdir -p evil; cp -a .git/. evil/; evilcfg >> evil/config; mv .git .git-moved && echo 'gitdir: evil' > .git",
    "copy_then_config": "mv .git .gitold && cp -a .gitold .git && evilcfg >> .git/config",
    "rm_then_copy": "cp -a .git saved && rm -rf .git; cp -a saved .git && evilcfg >> .git/config",
    "symlink": "cp -a .git evil && evilcfg >> evil/config; mv .git .git-moved && ln -s evil .git",
    "config_worktree": (
        "evilcfg > .git/config.worktree; printf '[extensions]\\n\\tworktreeConfig = true\\n' >> .git/config"
    ),
    "config_and_info": "mkdir -p .git/info; echo '* filter=x' > .git/info/attributes; evilcfg >> .git/config",
    "alternates": "mkdir -p evil; echo $PWD/evil > .git/objects/info/alternates; evilcfg >> .git/config",
    "nested_repo": "git init -q sub && evilcfg >> sub/.git/config",
    "bare_repo_in_subdir": "git init -q --bare sub2 && evilcfg >> sub2/config",
    # refs/ is writable (branches), so the task can make .git invalid; git then tries the root as bare
    "bare_repo_at_root": "cp -a .git/HEAD .git/objects .git/refs . && { cat .git/config; evilcfg; } > config"
    " && rm -rf .git/refs",
}


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(path),
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "i",
        ],
        check=True,
    )
    for entry in [path, *path.rglob("*")]:
        os.chown(entry, 65534, 65534, follow_symlinks=False)
    return path


def _host_git_runs_canary(repo: Path, canary: Path) -> bool:
    """Run the host's git the way a careless user or CI would, in every directory the attack used."""
    for where in (repo, repo / "sub", repo / "sub2"):
        for command in (["status", "--short"], ["canary"]):
            if where.is_dir():
                subprocess.run(
                    ["git", "-c", "safe.directory=*", *command], cwd=where, capture_output=True, check=False, timeout=30
                )
    return canary.exists()


def _write(repo: Path) -> Boundary:
    return Boundary.model_validate({"files": [{"host": str(repo), "path": "/work/repo", "access": "write"}]})


@pytest.mark.skipif(GIT is None, reason="git is not installed on this host")
@pytest.mark.parametrize("vector", sorted(REDIRECT_VECTORS))
def test_a_write_bound_repository_cannot_be_redirected_to_attacker_git_metadata(host_tmp: Path, vector: str) -> None:
    script = REDIRECT_VECTORS[vector]
    # Control: the same writes on a plain host copy make the host's git run the canary.
    control = _repo(host_tmp / "control")
    control_canary = host_tmp / "control-canary"
    subprocess.run(
        ["sh", "-c", GIT_ENV + EVIL_CONFIG + script],
        cwd=control,
        env={**os.environ, "CANARY": f"touch {control_canary}; false"},
        check=False,
    )
    assert _host_git_runs_canary(control, control_canary), f"control for {vector} did not breach"

    repo = _repo(host_tmp / "repo")
    canary = host_tmp / "canary"
    with Sandbox(_write(repo)) as sb:
        result = sb.run(
            ["sh", "-c", f"cd /work/repo; {GIT_ENV}{EVIL_CONFIG}{script}; echo done"],
            env={"CANARY": f"touch {canary}; false"},
        )
        assert b"done" in result.stdout.data, result.stderr.data
    assert not _host_git_runs_canary(repo, canary), (vector, sb.teardown_findings)
    if vector not in ("bare_repo_at_root", "rm_then_copy"):  # these delete refs/, as any task may
        log = subprocess.run(
            ["git", "-c", "safe.directory=*", "log", "--oneline"], cwd=repo, capture_output=True, check=True, text=True
        )
        assert log.stdout.count("\n") == 1  # the host repository is intact


@pytest.mark.skipif(GIT is None, reason="git is not installed on this host")
def test_commits_branches_and_merges_still_work_in_a_write_bound_repository(host_tmp: Path) -> None:
    repo = _repo(host_tmp / "repo")
    script = (
        "cd /work/repo; "
        + GIT_ENV
        + "C='-c user.name=a -c user.email=a@b'; echo a > f; git add f && git $C commit -qm x"
        " && git checkout -qb topic && git $C commit -q --allow-empty -m y && git checkout -q master"
        " && git $C merge -q topic && git tag v1 && echo b > f && git stash -q && git stash pop -q"
        " && git reset -q --hard && echo ok"
    )
    with Sandbox(_write(repo)) as sb:
        result = sb.run(["sh", "-c", script])
        assert result.stdout.data == b"ok\n", result.stderr.data
    log = subprocess.run(
        ["git", "-c", "safe.directory=*", "log", "--oneline", "v1"],
        cwd=repo,
        capture_output=True,
        check=True,
        text=True,
    )
    assert log.stdout.count("\n") == 3
    assert sb.teardown_findings == []
    assert sorted(p.name for p in (repo / ".git").iterdir() if p.name in ("commondir", "worktrees", "modules")) == []


def test_teardown_does_not_follow_a_symlink_planted_in_place_of_dotgit(host_tmp: Path) -> None:
    repo = host_tmp / "repo"
    (repo / ".git").mkdir(parents=True)
    victim = host_tmp / "victim"
    for name in ("hooks", "worktrees", "modules", "info"):
        (victim / name).mkdir(parents=True)
    for name in ("config", "commondir", "config.worktree"):
        (victim / name).write_text("")
    for entry in [repo, *repo.rglob("*")]:
        os.chown(entry, 65534, 65534)
    before = sorted(p.name for p in victim.iterdir())
    script = (
        "cd /work/repo && { mv .git .gitold; ln -s "
        + str(victim)
        + " .git; mkdir -p d; ln -s "
        + str(victim)
        + " d/.git; true; }"
    )
    with Sandbox(_write(repo)) as sb:
        sb.run(["sh", "-c", script])
    assert sorted(p.name for p in victim.iterdir()) == before
    # Control: the victim directory is removable by root, so its survival is the teardown's doing.
    assert os.access(victim, os.W_OK)


def test_two_sandboxes_on_one_write_bind_leave_no_dotgit_behind_and_keep_it_masked(host_tmp: Path) -> None:
    repo = host_tmp / "repo"
    repo.mkdir()
    os.chown(repo, 65534, 65534)
    b = _write(repo)
    first, second = Sandbox(b), Sandbox(b)
    first.start()
    second.start()
    first.close()  # the first out must not take the second's mask with it
    attempt = second.run(["sh", "-c", "mkdir -p /work/repo/.git/hooks && echo created || echo denied"])
    second.close()
    assert attempt.stdout.data == b"denied\n"
    assert not (repo / ".git").exists()
    assert sorted(os.listdir(repo)) == []
    # A later run still masks .git (the regression: an orphaned empty .git stopped being masked).
    with Sandbox(b) as sb:
        later = sb.run(["sh", "-c", "mkdir /work/repo/.git/x && echo created || echo denied"])
    assert later.stdout.data == b"denied\n"


def test_a_leftover_empty_dotgit_from_an_older_run_is_masked_whole(host_tmp: Path) -> None:
    repo = host_tmp / "repo"
    (repo / ".git").mkdir(parents=True)
    for entry in (repo, repo / ".git"):
        os.chown(entry, 65534, 65534)
    with Sandbox(_write(repo)) as sb:
        result = sb.run(["sh", "-c", "cd /work/repo; mkdir .git/objects .git/refs && echo created || echo denied"])
    assert result.stdout.data == b"denied\n"
    assert os.listdir(repo / ".git") == []


def test_an_export_bomb_of_entries_and_depth_is_capped_and_the_result_survives(host_tmp: Path) -> None:
    # The disk budget caps inodes at disk_bytes / 4 KiB inside the sandbox, so the entries a task
    # can make are already bounded; the export still stops at 64 levels and stays within its own
    # entry cap (the same disk_bytes / 4 KiB), and the run's result is not lost.
    out = host_tmp / "out"
    b = Boundary.model_validate(
        {
            "files": [{"path": "/work/out", "access": "scratch", "export": str(out)}],
            "resources": {"disk_bytes": "8MiB"},
        }
    )
    script = (
        "import os\n"
        "os.chdir('/work/out'); os.mkdir('deep'); os.chdir('deep')\n"
        "for _ in range(1500): os.mkdir('a'); os.chdir('a')\n"
        "os.chdir('/work/out'); flat = 0\n"
        "try:\n"
        "    for i in range(100000): os.mkdir(f'd{i}'); flat += 1\n"
        "except OSError:\n"
        "    pass\n"
        "print('made', flat)\n"
    )
    with Sandbox(b) as sb:
        result = sb.run(["/usr/bin/python3", "-c", script])
    assert result.exit_code == 0 and result.stdout.data.startswith(b"made "), result.stderr.data
    flat = int(result.stdout.data.split()[1])
    report = sb.export_reports["/work/out"]
    entries = sum(1 for _ in out.rglob("*"))
    assert entries == report.dirs <= 1 + 64 + flat <= (8 << 20) // 4096
    assert any("deeper than 64 levels" in skipped for skipped in report.skipped)
    assert any(f.startswith("export of /work/out: skipped") for f in sb.teardown_findings)


def test_concurrent_sandboxes_on_one_repository_keep_the_git_unit_intact(host_tmp: Path) -> None:
    if GIT is None:
        pytest.skip("git is not installed on this host")
    repo = _repo(host_tmp / "repo")
    b = _write(repo)
    errors: list[BaseException] = []

    def one() -> None:
        try:
            with Sandbox(b) as sb:
                sb.run(["sh", "-c", "echo x > /work/repo/.git/commondir || true"])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert not (repo / ".git" / "commondir").exists()
    assert subprocess.run(["git", "-c", "safe.directory=*", "status"], cwd=repo, capture_output=True).returncode == 0


def test_an_export_into_a_write_bind_is_not_redirected_by_a_symlink_the_task_planted(host_tmp: Path) -> None:
    ws = host_tmp / "ws"
    (ws / "a").mkdir(parents=True)
    for entry in (ws, ws / "a"):
        os.chown(entry, 65534, 65534)
    victim = host_tmp / "victim"
    victim.mkdir()
    b = Boundary.model_validate(
        {
            "files": [
                {"host": str(ws), "path": "/work/ws", "access": "write"},
                {"path": "/work/out", "access": "scratch", "export": str(ws / "a" / "out")},
            ]
        }
    )
    script = f"echo r > /work/out/result.txt; cd /work/ws && mv a a.old && ln -s {victim} a && echo swapped"
    with Sandbox(b) as sb:
        result = sb.run(["sh", "-c", script])
    assert result.stdout.data == b"swapped\n"
    assert os.listdir(victim) == []
    # Control: the link the task left does lead to the victim from the host.
    assert os.path.realpath(ws / "a") == str(victim)
