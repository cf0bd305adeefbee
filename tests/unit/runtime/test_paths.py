"""Facts about bound host paths: protected-path masks, symlink decoys, reachability."""

import os

import pytest

from contain.boundary import Boundary
from contain.boundary.kinds import GIT_DIR_RULES, GitMetaAccess
from contain.errors import SandboxStartError
from contain.runtime.paths import Mask, gather_path_facts, scan_protected


def write_bind(tmp_path, **extra):
    return Boundary.model_validate(
        {"files": [{"host": str(tmp_path), "path": "/work/repo", "access": "write", **extra}]}
    )


def make_git_dir(path):
    """The smallest directory git takes for a repository: HEAD, objects/, refs/."""
    (path / "objects" / "info").mkdir(parents=True)
    (path / "refs" / "heads").mkdir(parents=True)
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    return path


def test_existing_protected_paths_are_rebound_and_missing_ones_masked_at_the_first_missing_component(tmp_path):
    (tmp_path / ".bashrc").write_text("")
    uid, gid = os.getuid(), os.getgid()
    facts = gather_path_facts(
        write_bind(tmp_path, protect=["ci/deploy.sh"]), sandbox_host_uid=uid, sandbox_host_gid=gid
    )
    masks = {m.sandbox_path: (m.kind, m.exists) for m in facts.binds[0].masks}
    assert masks["/work/repo/.bashrc"] == ("file", True)
    assert masks["/work/repo/.vscode"] == ("dir", False)
    assert masks["/work/repo/ci"] == ("dir", False)  # the first missing component, not ci/deploy.sh
    assert "/work/repo/ci/deploy.sh" not in masks
    assert {m.host_path for m in facts.created_placeholders()} >= {str(tmp_path / ".vscode"), str(tmp_path / "ci")}


def test_a_repository_is_planned_as_one_unit_row_by_row(tmp_path):
    git = make_git_dir(tmp_path / ".git")
    (git / "hooks").mkdir()
    (git / "config").write_text("[core]\n")
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    masks = {m.sandbox_path: m for m in facts.binds[0].masks}
    assert facts.binds[0].git_dirs == (".git",)
    for row in GIT_DIR_RULES:
        path = "/work/repo/.git" if row.name == "." else f"/work/repo/.git/{row.name}"
        if row.access is GitMetaAccess.IMMOVABLE:
            assert masks[path].immovable and masks[path].exists, row
        elif row.access is GitMetaAccess.READ_ONLY:
            mask = masks[path]
            exists = (git / row.name).exists()
            assert not mask.immovable and mask.exists == exists, row
            assert mask.kind == ("dir" if row.placeholder is None else "file"), row
            if not exists:
                assert mask.placeholder == row.placeholder or (row.placeholder is None and mask.placeholder == b"")
        else:
            assert path not in masks, row  # writable during the run (removed at close when listed so)
    order = [m.sandbox_path for m in facts.binds[0].masks]
    assert order.index("/work/repo/.git") < order.index("/work/repo/.git/config")  # immovable before its masks
    assert order.index("/work/repo/.git/objects") < order.index("/work/repo/.git/objects/info")


def test_a_missing_commondir_placeholder_names_the_git_dir_itself():
    commondir = next(r for r in GIT_DIR_RULES if r.name == "commondir")
    assert commondir.placeholder == b".\n"  # an empty commondir makes git die; "." is the git dir


@pytest.mark.parametrize("shape", ["empty_dir", "dir_without_head", "gitfile"])
def test_a_dotgit_that_is_not_a_repository_is_masked_read_only_whole(tmp_path, shape):
    if shape == "gitfile":
        (tmp_path / ".git").write_text("gitdir: /elsewhere\n")
    else:
        (tmp_path / ".git").mkdir()
        if shape == "dir_without_head":
            (tmp_path / ".git" / "hooks").mkdir()
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    git_masks = [m for m in facts.binds[0].masks if m.sandbox_path.split("/")[3] == ".git"]
    kind = "file" if shape == "gitfile" else "dir"
    assert git_masks == [Mask("/work/repo/.git", str(tmp_path / ".git"), kind, exists=True)]
    assert facts.binds[0].git_dirs == ()


def test_a_write_bind_that_is_itself_a_bare_repository_has_its_top_level_metadata_protected(tmp_path):
    make_git_dir(tmp_path)
    (tmp_path / "config").write_text("[core]\n\tbare = true\n")
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    masks = {m.sandbox_path: m for m in facts.binds[0].masks}
    assert masks["/work/repo/config"].exists and not masks["/work/repo/config"].immovable
    assert masks["/work/repo/hooks"] == Mask("/work/repo/hooks", str(tmp_path / "hooks"), "dir", exists=False)
    assert masks["/work/repo/objects"].immovable
    assert "" in facts.binds[0].git_dirs


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
    assert gather_path_facts(optional, sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid()).skipped == (
        "/inputs/x",
    )


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


def scan(path, **limits):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return scan_protected(fd, **limits)
    finally:
        os.close(fd)


def test_nested_protected_names_are_found_below_the_top_without_descending_into_them(tmp_path):
    (tmp_path / ".git").mkdir()  # top level: handled by masks, not listed
    (tmp_path / "sub" / ".git" / "objects").mkdir(parents=True)
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / ".envrc").write_text("")
    (tmp_path / "a" / ".vscode").symlink_to("/nonexistent")
    found = scan(tmp_path)
    assert set(found.names) == {"sub/.git", "a/b/.envrc", "a/.vscode"} and found.complete
    assert found.names["sub/.git"] == (
        os.lstat(tmp_path / "sub" / ".git").st_dev,
        os.lstat(tmp_path / "sub" / ".git").st_ino,
    )
    limited = scan(tmp_path, max_entries=3)
    assert not limited.complete and "more than 3 entries" in limited.limit_note


def test_bare_repositories_are_found_by_their_head_and_store_anywhere_in_the_tree(tmp_path):
    make_git_dir(tmp_path / "x" / "bare.git")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "HEAD").write_text("not a repository: no objects beside it")
    (tmp_path / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "commondir").write_text("elsewhere\n")
    assert set(scan(tmp_path).bare) == {"x/bare.git", ""}


def test_a_scan_stops_at_its_depth_limit_and_says_so(tmp_path):
    deep = tmp_path
    for _ in range(5):
        deep = deep / "d"
    deep.mkdir(parents=True)
    found = scan(tmp_path, max_depth=3)
    assert not found.complete and "deeper than 3 levels" in found.limit_note


def test_existing_nested_repositories_are_planned_as_units(tmp_path):
    git = make_git_dir(tmp_path / "sub" / ".git")
    (git / "hooks").mkdir()
    (git / "config").write_text("")
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    nested = {
        m.sandbox_path: (m.kind, m.exists, m.immovable) for m in facts.binds[0].masks if "/sub/" in m.sandbox_path
    }
    assert nested["/work/repo/sub/.git"] == ("dir", True, True)
    assert nested["/work/repo/sub/.git/hooks"] == ("dir", True, False)
    assert nested["/work/repo/sub/.git/config"] == ("file", True, False)
    assert nested["/work/repo/sub/.git/commondir"] == ("file", False, False)
    assert set(facts.binds[0].scan.names) == {"sub/.git"}
    assert "sub/.git" in facts.binds[0].git_dirs


def test_names_already_in_a_git_dir_that_no_writable_row_allows_are_read_only(tmp_path):
    git = make_git_dir(tmp_path / ".git")
    (git / "my-hooks").mkdir()  # e.g. core.hooksPath = .git/my-hooks
    (git / "sequencer").mkdir()  # an interrupted cherry-pick the user left
    (git / "ORIG_HEAD").write_text("0" * 40)
    facts = gather_path_facts(write_bind(tmp_path), sandbox_host_uid=os.getuid(), sandbox_host_gid=os.getgid())
    masks = {m.sandbox_path: m for m in facts.binds[0].masks}
    for name in ("my-hooks", "sequencer"):
        mask = masks[f"/work/repo/.git/{name}"]
        assert mask.exists and not mask.immovable and mask.kind == "dir"
    assert "/work/repo/.git/ORIG_HEAD" not in masks  # writable state


def test_with_bind_sources_moves_binds_and_their_masks_to_the_staged_views():
    from contain.boundary.kinds import FileAccess
    from contain.boundary.plain import PlainFileRule
    from contain.runtime.paths import BindFacts, Mask, PathFacts, with_bind_sources

    rule = PlainFileRule("/work/repo", FileAccess.WRITE, host="/h/repo")
    other = PlainFileRule("/inputs/d", FileAccess.READ, host="/h/d")
    facts = PathFacts(
        binds=(
            BindFacts(rule, "/h/repo", True, (Mask("/work/repo/.git/config", "/h/repo/.git/config", "file", True),)),
            BindFacts(other, "/h/d", True),
        ),
        skipped=(),
    )
    moved = with_bind_sources(facts, {"/h/repo": "/run/contain/idmap/1-ab/0"})
    assert moved.binds[0].host_realpath == "/run/contain/idmap/1-ab/0"
    assert moved.binds[0].masks[0].host_path == "/run/contain/idmap/1-ab/0/.git/config"
    assert moved.binds[1] == facts.binds[1]  # not staged: unchanged
    assert facts.binds[0].host_realpath == "/h/repo"  # the input is not changed


def test_an_idmapped_bind_is_judged_by_its_owners_bits_not_the_directories_above(tmp_path):
    import os

    from contain.boundary import Boundary
    from contain.boundary.plain import plain_boundary
    from contain.errors import SandboxStartError
    from contain.runtime.paths import gather_path_facts

    private = tmp_path / "private"
    (private / "repo").mkdir(parents=True)
    os.chmod(private, 0o700)
    manifest = plain_boundary(
        Boundary.model_validate({"files": [{"host": str(private / "repo"), "path": "/w", "access": "write"}]})
    )
    stranger = 0x6000_0000 + 3
    with pytest.raises(SandboxStartError, match="cannot enter"):
        gather_path_facts(manifest, sandbox_host_uid=stranger, sandbox_host_gid=stranger)
    assert gather_path_facts(manifest, sandbox_host_uid=stranger, sandbox_host_gid=stranger, idmapped=True).binds
    os.chmod(private / "repo", 0o555)
    with pytest.raises(SandboxStartError, match="cannot write it"):
        gather_path_facts(manifest, sandbox_host_uid=stranger, sandbox_host_gid=stranger, idmapped=True)


def test_bind_source_looks_a_path_up_by_its_real_path(tmp_path):
    from contain.runtime.paths import bind_source

    real = tmp_path / "broker.sock"
    real.write_text("")
    link = tmp_path / "link.sock"
    link.symlink_to(real)
    staged = {str(real): "/run/contain/idmap/1-ab/3"}
    assert bind_source(staged, str(link)) == "/run/contain/idmap/1-ab/3"  # found through the link
    assert bind_source(staged, str(tmp_path / "other")) == str(tmp_path / "other")  # not staged: as given
    assert bind_source({}, str(link)) == str(link)
