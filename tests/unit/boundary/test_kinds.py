"""The boundary's fixed tables: every row has a reason, no row is shadowed, paths are clean."""

from __future__ import annotations

import fnmatch
import posixpath

import pytest

from contain.boundary.kinds import (
    GIT_DIR_RULES,
    PROTECTED_PATHS,
    RESERVED_SANDBOX_PATHS,
    GitMetaAccess,
)


@pytest.mark.parametrize("row", PROTECTED_PATHS, ids=lambda row: row.path)
def test_each_protected_path_is_one_relative_name_with_a_kind_and_a_reason(row):
    assert "/" not in row.path and row.path not in (".", "..") and row.path.startswith(".")
    assert row.kind in ("dir", "file")
    assert row.why.strip()


def test_protected_paths_are_unique_and_cover_git_and_the_shell_rc_files():
    paths = [row.path for row in PROTECTED_PATHS]
    assert len(paths) == len(set(paths))
    assert {".git", ".bashrc", ".zshrc", ".profile", ".gitconfig", ".vscode"} <= set(paths)


def test_no_git_dir_rule_is_shadowed_by_an_earlier_one():
    # Rows match in order and the first match decides: a row an earlier glob already matches
    # can never apply, so its access and reason would be dead text.
    for later_index, later in enumerate(GIT_DIR_RULES):
        for earlier in GIT_DIR_RULES[:later_index]:
            assert not fnmatch.fnmatchcase(later.name, earlier.name), f"{later.name!r} is shadowed by {earlier.name!r}"


@pytest.mark.parametrize("rule", GIT_DIR_RULES, ids=lambda rule: rule.name)
def test_each_git_dir_rule_has_a_reason_and_a_placeholder_only_when_read_only(rule):
    assert rule.why.strip()
    if rule.placeholder is not None:
        assert rule.access is GitMetaAccess.READ_ONLY


def test_the_names_that_run_code_or_redirect_git_are_read_only():
    access = {rule.name: rule.access for rule in GIT_DIR_RULES}
    for name in ("config", "config.worktree", "commondir", "hooks", "info", "objects/info", "worktrees", "modules"):
        assert access[name] is GitMetaAccess.READ_ONLY, name
    assert access["."] is GitMetaAccess.IMMOVABLE


def test_a_missing_commondir_is_a_placeholder_git_reads_as_this_directory():
    commondir = next(rule for rule in GIT_DIR_RULES if rule.name == "commondir")
    assert commondir.placeholder == b".\n"  # an empty commondir would make git die


@pytest.mark.parametrize("path", RESERVED_SANDBOX_PATHS)
def test_reserved_sandbox_paths_are_absolute_and_normalised(path):
    assert path.startswith("/") and posixpath.normpath(path) == path


def test_the_runtime_owned_paths_are_reserved():
    assert {"/", "/usr", "/etc", "/proc", "/dev", "/.contain"} <= set(RESERVED_SANDBOX_PATHS)
