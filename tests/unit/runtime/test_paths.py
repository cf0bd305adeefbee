"""Facts about bound host paths: protected-path masks, symlink decoys, reachability."""

import os

import pytest

from contain.boundary import Boundary
from contain.errors import SandboxStartError
from contain.runtime.paths import gather_path_facts


def write_bind(tmp_path, **extra):
    return Boundary.model_validate({"files": [{"host": str(tmp_path), "path": "/work/repo", "access": "write", **extra}]})


def test_existing_protected_paths_are_rebound_and_missing_ones_masked_at_the_first_missing_component(tmp_path):
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".bashrc").write_text("")
    uid, gid = os.getuid(), os.getgid()
    facts = gather_path_facts(write_bind(tmp_path, protect=["ci/deploy.sh"]), sandbox_host_uid=uid, sandbox_host_gid=gid)
    masks = {m.sandbox_path: (m.kind, m.exists) for m in facts.binds[0].masks}
    assert masks["/work/repo/.git/hooks"] == ("dir", True)
    assert masks["/work/repo/.bashrc"] == ("file", True)
    assert masks["/work/repo/.git/config"] == ("file", False)
    assert masks["/work/repo/.vscode"] == ("dir", False)
    assert masks["/work/repo/ci"] == ("dir", False)  # the first missing component, not ci/deploy.sh
    assert "/work/repo/ci/deploy.sh" not in masks
    assert {m.host_path for m in facts.created_placeholders()} >= {str(tmp_path / ".vscode"), str(tmp_path / "ci")}


def test_a_missing_git_dir_is_masked_whole(tmp_path):
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    paths = [m.sandbox_path for m in facts.binds[0].masks]
    assert "/work/repo/.git" in paths and not any(p.startswith("/work/repo/.git/") for p in paths)


@pytest.mark.parametrize("link", [".git", ".vscode", ".bashrc"])
def test_a_symlinked_protected_path_is_refused(tmp_path, link):
    decoy = tmp_path.parent / f"decoy-{link.strip('.')}"
    decoy.mkdir(exist_ok=True)
    (tmp_path / link).symlink_to(decoy)
    with pytest.raises(SandboxStartError, match="is a symlink"):
        gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())


def test_required_missing_paths_refuse_and_optional_ones_are_reported(tmp_path):
    b = Boundary.model_validate({"files": [{"host": str(tmp_path / "absent"), "path": "/inputs/x", "access": "read"}]})
    with pytest.raises(SandboxStartError, match="does not exist"):
        gather_path_facts(b, sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    optional = Boundary.model_validate(
        {"files": [{"host": str(tmp_path / "absent"), "path": "/inputs/x", "access": "read", "required": False}]}
    )
    assert gather_path_facts(optional, sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid()).skipped == ("/inputs/x",)


def test_a_bind_the_sandbox_user_cannot_reach_is_refused_naming_the_directory(tmp_path):
    locked = tmp_path / "locked"
    (locked / "data").mkdir(parents=True)
    locked.chmod(0o700)
    b = Boundary.model_validate({"files": [{"host": str(locked / "data"), "path": "/inputs/data", "access": "read"}]})
    with pytest.raises(SandboxStartError) as info:
        gather_path_facts(b, sandbox_host_uid=65534, sandbox_host_gid=65534)
    assert str(locked) in info.value.cause and "chmod o+x" in info.value.fix


def test_a_write_bind_not_writable_by_the_sandbox_user_is_refused(host_tmp):
    with pytest.raises(SandboxStartError, match="not writable by the sandbox user"):
        gather_path_facts(write_bind(host_tmp), sandbox_host_uid=65534, sandbox_host_gid=65534)
    # Control: once the sandbox user owns it, the same bind is accepted.
    os.chown(host_tmp, 65534, 65534) if os.geteuid() == 0 else host_tmp.chmod(0o777)
    assert gather_path_facts(write_bind(host_tmp), sandbox_host_uid=65534, sandbox_host_gid=65534).binds


def test_nested_protected_names_are_found_below_the_top_without_descending_into_them(tmp_path):
    from contain.runtime.paths import scan_nested_protected

    (tmp_path / ".git").mkdir()  # top level: handled by masks, not listed
    (tmp_path / "sub" / ".git" / "objects").mkdir(parents=True)
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / ".envrc").write_text("")
    (tmp_path / "a" / ".vscode").symlink_to("/nonexistent")
    assert scan_nested_protected(str(tmp_path)) == {"sub/.git", "a/b/.envrc", "a/.vscode"}
    assert scan_nested_protected(str(tmp_path), limit=3) is None


def test_existing_nested_repositories_have_hooks_and_config_rebound_read_only(tmp_path):
    (tmp_path / "sub" / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "sub" / ".git" / "config").write_text("")
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    nested = {m.sandbox_path: (m.kind, m.exists) for m in facts.binds[0].masks if "/sub/" in m.sandbox_path}
    assert nested == {"/work/repo/sub/.git/hooks": ("dir", True), "/work/repo/sub/.git/config": ("file", True)}
    assert facts.binds[0].nested == {"sub/.git"}


def test_protected_names_created_below_the_top_are_removed_at_close(tmp_path):
    from contain.runtime.paths import revert_nested_creations

    (tmp_path / "kept" / ".git").mkdir(parents=True)
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    (tmp_path / "new" / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / "new" / ".git" / "hooks" / "post-checkout").write_text("evil")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / ".envrc").symlink_to("/etc/passwd")
    findings = revert_nested_creations(facts)
    assert not (tmp_path / "new" / ".git").exists() and not os.path.lexists(tmp_path / "x" / ".envrc")
    assert (tmp_path / "kept" / ".git").is_dir() and (tmp_path / "new").is_dir()
    assert os.path.exists("/etc/passwd")  # the link was removed, never its target
    assert findings == [
        "removed /work/repo/new/.git, created by the task (a protected name)",
        "removed /work/repo/x/.envrc, created by the task (a protected name)",
    ]


def test_a_write_bind_too_large_to_scan_is_reported_at_close_not_skipped_silently(tmp_path, monkeypatch):
    from contain.runtime import paths

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setattr(paths, "MAX_SCAN_ENTRIES", 1)
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    assert facts.binds[0].nested is None
    findings = paths.revert_nested_creations(facts)
    assert len(findings) == 1 and "were not checked" in findings[0]
