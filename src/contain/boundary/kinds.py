"""The boundary's fixed vocabulary: enums and tables, free of pydantic.

The manifest models (``contain.boundary.model``) validate against these; the runtime reads them
through ``contain.boundary.plain`` without importing pydantic, which keeps ``contain run`` quick.
Enum members are the same objects on both sides, so ``rule.access is FileAccess.WRITE`` holds
for a validated model and for its plain copy alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

__all__ = [
    "GIT_DIR_RULES",
    "PROTECTED_PATHS",
    "RESERVED_SANDBOX_PATHS",
    "Backend",
    "CredentialVia",
    "FileAccess",
    "GitDirRule",
    "GitMetaAccess",
    "LayerRequirement",
    "ProtectedPath",
    "Threat",
    "ToolVerdict",
]


@dataclass(frozen=True)
class ProtectedPath:
    """One path inside a writable root that stays read-only, with the reason."""

    path: str
    kind: Literal["dir", "file"]  # what to mask with when it does not exist yet
    why: str


# Paths a write bind protects unless the manifest lists them itself. Existing ones are re-bound
# read-only; missing ones are masked so they cannot be created. Each row says what an attacker
# who could write it would gain.
PROTECTED_PATHS: tuple[ProtectedPath, ...] = (
    ProtectedPath(
        path=".git",
        kind="dir",
        why="repository metadata: config, hooks, commondir and more run or redirect code; see GIT_DIR_RULES",
    ),
    ProtectedPath(path=".gitmodules", kind="file", why="submodule URLs and update commands run on checkout"),
    ProtectedPath(path=".bashrc", kind="file", why="runs in every interactive bash the user opens"),
    ProtectedPath(path=".bash_profile", kind="file", why="runs in every bash login shell"),
    ProtectedPath(path=".profile", kind="file", why="runs in every POSIX login shell"),
    ProtectedPath(path=".zshrc", kind="file", why="runs in every interactive zsh"),
    ProtectedPath(path=".zshenv", kind="file", why="runs in every zsh, even scripts"),
    ProtectedPath(path=".gitconfig", kind="file", why="aliases and hooksPath run commands in any repository"),
    ProtectedPath(path=".envrc", kind="file", why="direnv runs it on cd"),
    ProtectedPath(path=".vscode", kind="dir", why="tasks and settings run commands when the folder opens"),
    ProtectedPath(path=".idea", kind="dir", why="run configurations execute in the IDE"),
)


class GitMetaAccess(StrEnum):
    """What a workload may do with one name inside a repository's git directory."""

    IMMOVABLE = "immovable"  # bound onto itself, writable: cannot be renamed, removed or replaced
    READ_ONLY = "read_only"  # re-bound read-only; a missing one gets a placeholder the workload cannot replace
    WRITABLE = "writable"  # ordinary repository state a coding task writes (objects, refs, index)
    REMOVED_AT_CLOSE = "removed_at_close"  # writable during the run; removed at close if the run created it


@dataclass(frozen=True)
class GitDirRule:
    """One name (a glob, relative to a git directory) with what the workload may do and why.

    ``placeholder`` is what a missing READ_ONLY name is created as before the run: ``None`` for
    an empty directory, bytes for a file with that content (chosen so that git reads it as "no
    change": an empty ``commondir`` would make git die, ``.`` names the git directory itself).
    """

    name: str
    access: GitMetaAccess
    why: str
    placeholder: bytes | None = None


# A git directory is one protected unit: everything git honours that could run a command on the
# host or point git at other metadata is read-only, or immovable so that it cannot be swapped for a
# copy. A name the run creates that matches no row is removed at close (fail closed). The rows
# are matched in order; the first match decides.
GIT_DIR_RULES: tuple[GitDirRule, ...] = (
    GitDirRule(
        ".", GitMetaAccess.IMMOVABLE, "bound onto itself: cannot be renamed, replaced by a gitfile or a symlink"
    ),
    GitDirRule("config", GitMetaAccess.READ_ONLY, "core.fsmonitor, core.hooksPath, aliases, filters run commands", b""),
    GitDirRule("config.worktree", GitMetaAccess.READ_ONLY, "per-worktree config: same powers as config", b""),
    GitDirRule("commondir", GitMetaAccess.READ_ONLY, "points git at another directory's config and hooks", b".\n"),
    GitDirRule("hooks", GitMetaAccess.READ_ONLY, "hooks run as the user on the next commit or checkout"),
    GitDirRule("info", GitMetaAccess.READ_ONLY, "attributes select filter/diff drivers; grafts rewrite history"),
    GitDirRule("objects", GitMetaAccess.IMMOVABLE, "new objects are written here; immovable so objects/info stays put"),
    GitDirRule("objects/info", GitMetaAccess.READ_ONLY, "alternates and http-alternates redirect object reads"),
    GitDirRule("worktrees", GitMetaAccess.READ_ONLY, "each linked worktree has its own gitdir, commondir, config"),
    GitDirRule("modules", GitMetaAccess.READ_ONLY, "submodule git directories carry their own config and hooks"),
    GitDirRule("branches", GitMetaAccess.READ_ONLY, "legacy remote definitions: URLs git fetches from"),
    GitDirRule("remotes", GitMetaAccess.READ_ONLY, "legacy remote definitions: URLs git fetches from"),
    GitDirRule("rebase-merge", GitMetaAccess.REMOVED_AT_CLOSE, "its todo list's exec lines run on rebase --continue"),
    GitDirRule("rebase-apply", GitMetaAccess.REMOVED_AT_CLOSE, "an interrupted am/rebase the user would resume"),
    GitDirRule("sequencer", GitMetaAccess.REMOVED_AT_CLOSE, "cherry-pick/revert todo the user would resume"),
    GitDirRule("objects/*", GitMetaAccess.WRITABLE, "loose objects and packs: commits need them"),
    GitDirRule("refs", GitMetaAccess.WRITABLE, "branches and tags: commits and checkouts update them"),
    GitDirRule("logs", GitMetaAccess.WRITABLE, "reflogs, written with every ref update"),
    GitDirRule("index", GitMetaAccess.WRITABLE, "the staging area: git add and commit write it"),
    GitDirRule("sharedindex.*", GitMetaAccess.WRITABLE, "the shared part of a split index"),
    GitDirRule("HEAD", GitMetaAccess.WRITABLE, "the current branch: checkout writes it"),
    GitDirRule("*_HEAD", GitMetaAccess.WRITABLE, "ORIG_HEAD, FETCH_HEAD, MERGE_HEAD...: plain object names"),
    GitDirRule("*.lock", GitMetaAccess.WRITABLE, "git's lock files, renamed over their target"),
    GitDirRule("packed-refs", GitMetaAccess.WRITABLE, "packed branches and tags"),
    GitDirRule("COMMIT_EDITMSG", GitMetaAccess.WRITABLE, "the last commit message"),
    GitDirRule("MERGE_*", GitMetaAccess.WRITABLE, "merge messages and modes, text only"),
    GitDirRule("SQUASH_MSG", GitMetaAccess.WRITABLE, "squash message, text only"),
    GitDirRule("AUTO_MERGE", GitMetaAccess.WRITABLE, "an object name"),
    GitDirRule("BISECT_*", GitMetaAccess.WRITABLE, "bisect state; BISECT_RUN is only a log"),
    GitDirRule("description", GitMetaAccess.WRITABLE, "gitweb's description text"),
    GitDirRule("shallow", GitMetaAccess.WRITABLE, "list of shallow commits: limits history, runs nothing"),
    GitDirRule("gc.pid", GitMetaAccess.WRITABLE, "gc's lock"),
    GitDirRule("gc.log", GitMetaAccess.WRITABLE, "gc's log"),
    GitDirRule("rr-cache", GitMetaAccess.WRITABLE, "recorded conflict resolutions: content only"),
    GitDirRule("lost-found", GitMetaAccess.WRITABLE, "fsck's recovered objects"),
)

# Sandbox paths the runtime owns. A manifest that binds over them would replace the loader,
# the generated /etc, procfs or the supervisor.
RESERVED_SANDBOX_PATHS: tuple[str, ...] = (
    "/",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/etc",
    "/proc",
    "/dev",
    "/sys",
    "/run",
    "/.contain",
)


class FileAccess(StrEnum):
    """What the sandbox may do with a path."""

    READ = "read"  # host path bound read-only
    WRITE = "write"  # host path bound read-write, minus protected subpaths
    SCRATCH = "scratch"  # fresh, size-limited, empty; may be exported after the run
    BLOCK = "block"  # masked inside a read or write bind


class Threat(StrEnum):
    """What the task is exposed to; `contain check` lints the boundary against these."""

    UNTRUSTED_DOCUMENTS = "untrusted_documents"
    GENERATED_CODE = "generated_code"
    TRUSTED_API = "trusted_api"


class LayerRequirement(StrEnum):
    """Whether a hardening layer must be present (required), is used when present (auto), or off."""

    REQUIRED = "required"
    AUTO = "auto"
    OFF = "off"


class CredentialVia(StrEnum):
    """How a credential reaches the work: through the broker (never inside) or an env variable."""

    BROKER = "broker"
    ENV = "env"


class ToolVerdict(StrEnum):
    """The gate's answer before an action starts."""

    ALLOW = "allow"
    DENY = "deny"
    REVIEW = "review"


class Backend(StrEnum):
    """Where the task's code runs. ``none`` declares that it runs without a contain runtime
    (``contain run`` refuses it; ``contain check`` flags it for generated code)."""

    PROCESS = "process"
    CONTAINER = "container"
    MICROVM = "microvm"
    NONE = "none"
