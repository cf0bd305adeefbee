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
    "PROTECTED_PATHS",
    "RESERVED_SANDBOX_PATHS",
    "Backend",
    "CredentialVia",
    "FileAccess",
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
    ProtectedPath(path=".git/hooks", kind="dir", why="hooks run as the user on the next git command"),
    ProtectedPath(path=".git/config", kind="file", why="core.fsmonitor / core.hooksPath run arbitrary commands"),
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

# Sandbox paths the runtime owns. A manifest that binds over them would replace the loader,
# the generated /etc, procfs or the agent.
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
