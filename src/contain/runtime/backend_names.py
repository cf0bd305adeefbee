"""Backend spec strings (``process``, ``container``, ``container:runc``, ``container:runsc``,
``microvm``) parsed into a ``BackendSpec``, and the table of what each kind and variant is.

Pure: ``parse_backend_spec(text, default_container_runtime=...)`` is a function of its arguments.
The spec is what ``--backend`` on ``contain run``, ``contain probe`` and ``contain bench startup``
takes, what ``Sandbox(boundary, backend=...)`` takes as a string, and what ``RunResult.backend``
reports in full (``process``, ``container:runc``, ``container:runsc``, ``microvm``): a bare
``container`` is resolved to the manifest's ``runtime.container.runtime`` (default ``runc``)
before anything reports it, so a result always names the OCI runtime that ran it.

Enforces: a name missing from ``BACKEND_KINDS`` or a variant missing from its row is refused with
``UnknownBackend`` (exit 125 in the CLI, with the accepted spellings), never mapped to a default.
Does NOT check that a runtime binary exists or works (the backend does, at construction:
``container/oci_runtime.py``), nor decide layers (``plan.plan_layers``).
"""

from __future__ import annotations

from dataclasses import dataclass

from contain.errors import UnknownBackend, UnsupportedHost

__all__ = [
    "BACKEND_KINDS",
    "CONTAINER_RUNTIMES",
    "RUNSC_PLATFORMS",
    "BackendKind",
    "BackendSpec",
    "PlatformRow",
    "RuntimeFacts",
    "parse_backend_spec",
    "plan_runsc_platform",
]


@dataclass(frozen=True)
class BackendKind:
    """One kind of backend: its variants (empty: takes none), and the cgroup parent its sandboxes
    live under (each kind has its own, so a sweep or a limit on one never touches another's)."""

    kind: str
    variants: tuple[str, ...]
    cgroup_parent: str
    why: str


# The OCI runtimes the container backend drives, in preference order for a bare ``container``.
CONTAINER_RUNTIMES: tuple[str, ...] = ("runc", "runsc")

BACKEND_KINDS: tuple[BackendKind, ...] = (
    BackendKind("process", (), "contain", "bubblewrap + supervisor on the host kernel (process_backend.py)"),
    BackendKind(
        "container",
        CONTAINER_RUNTIMES,
        "contain-container",
        "an OCI runtime without a daemon: runc (host kernel) or runsc (gVisor's user-space kernel)",
    ),
    BackendKind("microvm", (), "contain-microvm", "a guest kernel under qemu (runtime/microvm/)"),
)


@dataclass(frozen=True)
class BackendSpec:
    """A parsed backend spec: ``kind`` and, for ``container``, the OCI runtime ``variant``."""

    kind: str
    variant: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.variant}" if self.variant else self.kind

    @property
    def row(self) -> BackendKind:
        """The ``BACKEND_KINDS`` row of this spec's kind."""
        return next(k for k in BACKEND_KINDS if k.kind == self.kind)


def _accepted() -> str:
    names: list[str] = []
    for kind in BACKEND_KINDS:
        names.append(kind.kind)
        names += [f"{kind.kind}:{variant}" for variant in kind.variants]
    return ", ".join(names)


def parse_backend_spec(text: str, *, default_container_runtime: str = "runc") -> BackendSpec:
    """Parse ``kind[:variant]``; a bare ``container`` gets ``default_container_runtime``.

    Args:
        text: the spec as the user wrote it (``--backend``, ``Sandbox(backend=...)``).
        default_container_runtime: the manifest's ``runtime.container.runtime``.

    Returns:
        The spec, with ``variant`` set for every kind that has variants.

    Raises:
        UnknownBackend: an unknown kind, an unknown variant, or a variant on a kind without any.
    """
    kind_name, sep, variant = text.strip().partition(":")
    row = next((k for k in BACKEND_KINDS if k.kind == kind_name), None)
    if row is None:
        raise UnknownBackend(f"backend {text!r} is unknown", f"use one of: {_accepted()}")
    if not row.variants:
        if sep:
            raise UnknownBackend(f"backend {row.kind!r} takes no variant (got {text!r})", f"use --backend {row.kind}")
        return BackendSpec(row.kind)
    chosen = variant if sep else default_container_runtime
    if chosen not in row.variants:
        raise UnknownBackend(
            f"{row.kind} runtime {chosen!r} is unknown (in {text!r})",
            f"use one of: {', '.join(f'{row.kind}:{v}' for v in row.variants)}",
        )
    return BackendSpec(row.kind, chosen)


@dataclass(frozen=True)
class RuntimeFacts:
    """What an OCI runtime binary is, probed once from the binary itself (``container/oci_runtime.py``).

    ``platforms`` are the runsc platforms the build lists in ``runsc help platforms`` (empty for runc).
    """

    runtime: str  # "runc" | "runsc"
    path: str
    version: str  # first line of ``<runtime> --version``
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlatformRow:
    """A gVisor platform contain may pick, in preference order, with why."""

    name: str
    why: str


RUNSC_PLATFORMS: tuple[PlatformRow, ...] = (
    PlatformRow("systrap", "seccomp-trap based, faster than ptrace; gVisor's default since 2023 builds"),
    PlatformRow("ptrace", "works everywhere, no /dev/kvm; the only usable one in Debian's 2022 build"),
    # kvm is deliberately not a row: measured (docs/gvisor-notes.md) to never finish a container on
    # this nested-virtualisation host; it would hang sandboxes instead of refusing them.
)


def plan_runsc_platform(available: tuple[str, ...]) -> PlatformRow:
    """The first ``RUNSC_PLATFORMS`` row the runsc build lists.

    Raises:
        UnsupportedHost: the build lists none of them.
    """
    for row in RUNSC_PLATFORMS:
        if row.name in available:
            return row
    raise UnsupportedHost(
        f"this runsc build offers platforms {', '.join(available) or 'none'}, none of which contain uses",
        f"install a runsc with one of: {', '.join(r.name for r in RUNSC_PLATFORMS)}",
    )
