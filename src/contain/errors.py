"""Every error contain raises on purpose, with a cause and a fix.

The tree::

    ContainError                  cause + fix + optional rule_id; exit code 125 unless noted
    ├── BoundaryInvalid           a manifest failed to parse or validate (names file, key, line)
    ├── UnsupportedHost           this host lacks a layer the boundary needs (fail closed)
    │   └── BackendRefusal        a backend cannot carry a boundary feature (one refusal row, named)
    ├── UnknownBackend            a backend spec or OCI runtime name is not one contain knows
    ├── SandboxStartError         a sandbox could not be set up or started
    │   └── PoolUnavailable       a warm pool could not hand out a sandbox (closed, starts failing, timeout)
    ├── SandboxLost               a running sandbox died or stopped answering
    │   └── DeadlinePassed        the run's deadline passed while a request waited for an answer
    ├── FileTransferError         put_file / get_file / export refused or failed
    ├── GateError                 a grant key, the review store or a review request is unusable
    ├── ImageError                a container image is refused (hostile member, bad digest) or unusable
    ├── LedgerInUse               another broker already serves this ledger
    ├── LedgerAnchorError         a ledger anchor or checkpoint file cannot be written or read
    ├── BrokerStateUnsafe         the broker's database or socket sits where others could change it
    └── RenderRefused             a valid boundary cannot be rendered for Kubernetes as it stands

The CLI renders these in one place (``contain.cli.main``); library code never prints or exits.
Foreign exceptions are translated where they enter, with ``raise ... from exc``.
"""

from __future__ import annotations

__all__ = [
    "BackendRefusal",
    "BoundaryInvalid",
    "BrokerStateUnsafe",
    "ContainError",
    "DeadlinePassed",
    "FileTransferError",
    "GateError",
    "ImageError",
    "LedgerAnchorError",
    "LedgerInUse",
    "PoolUnavailable",
    "RenderRefused",
    "SandboxLost",
    "SandboxStartError",
    "UnknownBackend",
    "UnsupportedHost",
]


class ContainError(Exception):
    """Base class: something contain refused or could not do.

    Raised only through a subclass. ``cause`` says what happened, naming the exact path,
    syscall, host or field; ``fix`` says what the user can change.
    """

    exit_code: int = 125

    def __init__(self, cause: str, fix: str = "", *, rule_id: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix
        self.rule_id = rule_id

    def __str__(self) -> str:
        return f"{self.cause} (fix: {self.fix})" if self.fix else self.cause


class BoundaryInvalid(ContainError):
    """Raised when a manifest cannot be read, parsed or validated.

    ``problems`` holds one line per error, each naming the file, key path and line.
    """

    def __init__(self, cause: str, fix: str = "", *, problems: list[str] | None = None) -> None:
        super().__init__(cause, fix)
        self.problems = problems or []


class UnsupportedHost(ContainError):
    """Raised when the host cannot enforce a layer the boundary requires (fail closed)."""


class BackendRefusal(UnsupportedHost):
    """Raised when a backend refuses a boundary feature it cannot carry, e.g. the microvm backend
    and write binds (``runtime.microvm.backend.plan_microvm_refusals``). ``feature`` names the
    refusal row (``write_binds``, ``attachments``, ``memory_budget``), so a
    caller can tell which one without parsing the cause."""

    def __init__(self, cause: str, fix: str = "", *, feature: str) -> None:
        super().__init__(cause, fix)
        self.feature = feature


class UnknownBackend(ContainError):
    """Raised when a backend spec (``--backend``, ``Sandbox(backend=...)``, ``runtime.backend``) names
    a kind or an OCI runtime that ``runtime.backend_names.BACKEND_KINDS`` does not list."""


class SandboxStartError(ContainError):
    """Raised when a sandbox cannot be created: spawning bwrap, cgroups, the supervisor handshake."""


class PoolUnavailable(SandboxStartError):
    """Raised by ``SandboxPool.acquire`` when it cannot hand out a sandbox: the pool is closed,
    its last starts failed (the cause and fix are the failed start's, which is chained), or none
    was ready within the timeout."""


class SandboxLost(ContainError):
    """Raised when a running sandbox's supervisor dies or stops answering; the sandbox is torn down."""


class DeadlinePassed(SandboxLost):
    """Raised when the run's deadline passed while a request waited for the sandbox to answer.

    The sandbox is torn down as for ``SandboxLost``; ``Sandbox.run`` reports the run as timed out
    (exit 124 in the CLI), as when a command runs past its wall-clock limit.
    """


class FileTransferError(ContainError):
    """Raised when put_file, get_file or an export is refused (symlink, size, path) or fails."""


class GateError(ContainError):
    """Raised when the gate's grant key, its review store or a review request cannot be used.

    Examples: a key file readable by group or others, an unknown request id, approving a request
    that is no longer pending. A gate *decision* is never an exception: it is a ``Decision``.
    """


class ImageError(ContainError):
    """Raised when a local container image is refused or cannot be unpacked into the image cache.

    Examples: a layer member with an absolute name, a ``..`` component, a path through a symlink
    or a hard link out of the image; a device node; a blob whose sha256 or size differs from its
    descriptor; a layer past the byte or entry budget; zstd layers. ``cause`` names the image path
    and the member. ``report`` (a ``contain.runtime.container.UnpackReport``, or None when no
    layer was read) lists every member refused or changed so far. Nothing is left in the cache.
    """

    def __init__(self, cause: str, fix: str = "", *, report: object | None = None) -> None:
        super().__init__(cause, fix)
        self.report = report


class LedgerInUse(ContainError):
    """Raised when a broker's store is already held by another running broker.

    Two brokers on one ledger would each reconcile the other's writes in flight as crashed (and
    a write reconciled as not applied is executed again on retry), so the second one refuses.
    """


class LedgerAnchorError(ContainError):
    """Raised when the ledger's external anchor cannot take a checkpoint (a required anchor at the
    broker's start), or when a checkpoint, anchor or key file a verifier was told to use cannot be
    read. Never raised for a ledger that fails verification: that is a result, not an error.
    """


class BrokerStateUnsafe(ContainError):
    """Raised when the broker's database or socket would live in a directory that other users
    can change (replace ``broker.db`` or its WAL, swap the socket for a symlink), or when the
    socket it bound was replaced before its mode was set. The broker refuses to start.
    """


class RenderRefused(ContainError):
    """Raised when ``contain k8s render`` cannot carry a valid boundary into Kubernetes objects
    without weakening it (a write bind, a credential from the renderer's environment, a read rule
    with no cluster volume, a task name that is not a Kubernetes name), or cannot write the output.
    ``rule_id`` names the ``contain.k8s.refusals`` row. Nothing is written.
    """
