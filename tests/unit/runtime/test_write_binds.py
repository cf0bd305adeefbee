"""Write binds before and after a workload, with the workload simulated by host-side changes
between ``prepare_write_binds`` and ``close``: no sandbox, no mounts, no root needed."""

from __future__ import annotations

import os
import shutil

from contain.boundary import Boundary
from contain.boundary.kinds import GIT_DIR_RULES, GitMetaAccess
from contain.runtime.paths import gather_path_facts
from contain.runtime.write_binds import prepare_write_binds


def write_bind(root, **extra):
    return Boundary.model_validate({"files": [{"host": str(root), "path": "/work/repo", "access": "write", **extra}]})


def prepare(root, **extra):
    facts = gather_path_facts(write_bind(root, **extra), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    return prepare_write_binds(facts)


def make_repo(root):
    git = root / ".git"
    (git / "objects" / "info").mkdir(parents=True)
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "hooks").mkdir()
    (git / "info").mkdir()
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n")
    return git


def test_placeholders_are_created_before_the_run_and_every_mask_then_exists(tmp_path):
    git = make_repo(tmp_path)
    facts, guard = prepare(tmp_path)
    try:
        assert all(m.exists for b in facts.binds for m in b.masks)
        assert (git / "commondir").read_bytes() == b".\n"  # git reads it as "this directory"
        assert (git / "config.worktree").read_bytes() == b""
        assert (git / "worktrees").is_dir() and (tmp_path / ".vscode").is_dir()
        assert oct((tmp_path / ".vscode").stat().st_mode & 0o777) == "0o555"
    finally:
        findings = guard.close(workload_ran=True)
    assert findings == []
    assert sorted(p.name for p in git.iterdir()) == ["HEAD", "config", "hooks", "info", "objects", "refs"]
    assert not (tmp_path / ".vscode").exists()


def test_teardown_does_not_follow_a_symlink_that_replaced_a_placeholders_parent(tmp_path):
    root = tmp_path / "repo"
    git = make_repo(root)
    victim = tmp_path / "victim"
    for name in ("worktrees", "modules", "branches"):
        (victim / name).mkdir(parents=True)
    for name in ("commondir", "config.worktree"):
        (victim / name).write_bytes(b".\n" if name == "commondir" else b"")
    for path in [victim, *victim.iterdir()]:
        os.chmod(path, 0o555 if path.is_dir() else 0o444)  # looks exactly like placeholders
    _, guard = prepare(root)
    git.rename(root / ".gitold")  # what the workload did (impossible under the immovable mount; defence in depth)
    (root / ".git").symlink_to(victim)
    guard.close(workload_ran=True)
    assert sorted(p.name for p in victim.iterdir()) == [
        "branches",
        "commondir",
        "config.worktree",
        "modules",
        "worktrees",
    ]
    assert (root / ".gitold" / "commondir").exists() is False  # the real placeholders were removed where they are


def test_a_placeholder_swapped_for_another_entry_is_left_and_reported(tmp_path):
    _, guard = prepare(tmp_path)
    os.rmdir(tmp_path / ".vscode")
    (tmp_path / ".vscode").mkdir()
    (tmp_path / ".vscode" / "tasks.json").write_text("{}")
    findings = guard.close(workload_ran=True)
    assert (tmp_path / ".vscode" / "tasks.json").exists()
    assert findings == ["left /work/repo/.vscode in place: it is no longer the empty placeholder contain made"]


def test_names_the_run_created_in_the_git_dir_are_removed_unless_a_writable_row_allows_them(tmp_path):
    git = make_repo(tmp_path)
    _, guard = prepare(tmp_path)
    (git / "sequencer").mkdir()
    (git / "sequencer" / "todo").write_text("exec touch /tmp/x\n")
    (git / "surprise").write_text("")
    (git / "ORIG_HEAD").write_text("0" * 40)
    (git / "index").write_bytes(b"DIRC")
    (git / "refs" / "heads" / "topic").write_text("0" * 40)
    findings = guard.close(workload_ran=True)
    assert sorted(p.name for p in git.iterdir()) == [
        "HEAD",
        "ORIG_HEAD",
        "config",
        "hooks",
        "index",
        "info",
        "objects",
        "refs",
    ]
    assert (git / "refs" / "heads" / "topic").exists()
    assert findings == [
        "removed /work/repo/.git/sequencer, created by the task (git metadata: "
        + next(r.why for r in GIT_DIR_RULES if r.name == "sequencer")
        + ")",
        "removed /work/repo/.git/surprise, created by the task (git metadata: a name git may honour that no rule allows)",
    ]


def test_every_top_level_name_is_decided_by_a_row_and_unknown_ones_fail_closed():
    from contain.runtime.paths import git_rule_for

    for row in GIT_DIR_RULES:
        if "/" in row.name or row.name == "." or "*" in row.name:
            continue
        assert git_rule_for(row.name) is row
    assert git_rule_for("index.lock").access is GitMetaAccess.WRITABLE
    assert git_rule_for("FETCH_HEAD").access is GitMetaAccess.WRITABLE
    assert git_rule_for("something-new") is None


def test_a_copied_nested_repository_is_removed_and_the_moved_original_kept(tmp_path):
    make_repo(tmp_path / "vendor" / "lib")
    _, guard = prepare(tmp_path)
    (tmp_path / "vendor" / "lib").rename(tmp_path / "vendor" / "lib2")  # the parent is not immovable
    shutil.copytree(tmp_path / "vendor" / "lib2", tmp_path / "vendor" / "lib", symlinks=True)
    (tmp_path / "vendor" / "lib" / ".git" / "config").write_text("[core]\n\tfsmonitor = evil\n")
    findings = guard.close(workload_ran=True)
    assert not (tmp_path / "vendor" / "lib" / ".git").exists()
    assert (tmp_path / "vendor" / "lib2" / ".git" / "config").read_text() == "[core]\n"
    assert findings == ["removed /work/repo/vendor/lib/.git, created by the task (a protected name)"]


def test_protected_names_created_below_the_top_are_removed_without_following_links(tmp_path):
    (tmp_path / "kept" / ".git").mkdir(parents=True)
    _, guard = prepare(tmp_path)
    (tmp_path / "new" / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "new" / ".git" / "hooks" / "post-checkout").write_text("evil")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / ".envrc").symlink_to("/etc/passwd")
    findings = guard.close(workload_ran=True)
    assert not (tmp_path / "new" / ".git").exists() and not os.path.lexists(tmp_path / "x" / ".envrc")
    assert (tmp_path / "kept" / ".git").is_dir() and (tmp_path / "new").is_dir()
    assert os.path.exists("/etc/passwd")
    assert findings == [
        "removed /work/repo/new/.git, created by the task (a protected name)",
        "removed /work/repo/x/.envrc, created by the task (a protected name)",
    ]


def test_a_directory_made_into_a_bare_repository_loses_its_head(tmp_path):
    make_repo(tmp_path)
    (tmp_path / "fixtures").mkdir()
    _, guard = prepare(tmp_path)
    bare = tmp_path / "fixtures" / "remote.git"
    (bare / "objects").mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (bare / "config").write_text("[alias]\n\tst = !evil\n")
    (tmp_path / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "objects").mkdir()
    findings = guard.close(workload_ran=True)
    assert not (bare / "HEAD").exists() and (bare / "config").exists()  # the rest of the task's work stays
    assert not (tmp_path / "HEAD").exists()
    assert findings == [
        "removed /work/repo/HEAD, created by the task (it made a directory git takes for a bare repository)",
        "removed /work/repo/fixtures/remote.git/HEAD, created by the task "
        "(it made a directory git takes for a bare repository)",
    ]


def test_two_sandboxes_share_a_placeholder_and_the_last_one_out_removes_it(tmp_path):
    _, first = prepare(tmp_path)
    _, second = prepare(tmp_path)  # adopts the first one's .git placeholder
    first.close(workload_ran=True)
    assert (tmp_path / ".git").is_dir()  # still masked by the second sandbox
    second.close(workload_ran=True)
    assert not (tmp_path / ".git").exists() and os.listdir(tmp_path) == []


def test_a_bind_too_large_to_scan_is_reported_at_close_not_skipped_silently(tmp_path, monkeypatch):
    from contain.runtime import paths

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setattr(paths, "MAX_SCAN_ENTRIES", 1)
    _, guard = prepare(tmp_path)
    findings = guard.close(workload_ran=True)
    assert len(findings) == 1 and "were not checked" in findings[0]


def test_a_start_that_failed_only_removes_the_placeholders(tmp_path):
    _, guard = prepare(tmp_path)
    (tmp_path / "new" / ".git").mkdir(parents=True)
    assert guard.close(workload_ran=False) == []
    assert (tmp_path / "new" / ".git").exists() and not (tmp_path / ".vscode").exists()


def test_a_prepared_repository_is_planned_as_an_immovable_bind_before_its_read_only_names(tmp_path):
    from contain.boundary.plain import plain_boundary
    from contain.runtime.bwrap import BwrapInputs, plan_bwrap_argv

    git = make_repo(tmp_path)
    boundary = write_bind(tmp_path)
    facts, guard = prepare(tmp_path)
    try:
        inputs = BwrapInputs(
            paths=facts,
            loader_links={},
            loader_dirs=(),
            etc_tree="/cache/etc",
            supervisor_host_path="/cache/supervisor",
            supervisor_args=(),
            data_fds={},
            disk_root="/cache/disk-budget",
            empty_file_fd_for={},
            seccomp_fd=6,
            info_fd=4,
        )
        argv = plan_bwrap_argv(plain_boundary(boundary), inputs)
    finally:
        guard.close(workload_ran=False)
    pairs = [(argv[i], argv[i + 2]) for i in range(len(argv) - 2) if argv[i] in ("--bind", "--ro-bind")]
    assert pairs.index(("--bind", "/work/repo/.git")) < pairs.index(("--ro-bind", "/work/repo/.git/config"))
    assert ("--bind", "/work/repo/.git/objects") in pairs and ("--ro-bind", "/work/repo/.git/commondir") in pairs
    assert ("--ro-bind", "/work/repo/.git/objects/info") in pairs
    assert str(git / "commondir") in argv  # the placeholder on the host, bound read-only
    assert "--tmpfs" not in argv[argv.index("/work/repo") :]  # nothing left for bwrap to create on the host
