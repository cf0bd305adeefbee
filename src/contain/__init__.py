"""contain: name what an AI agent may touch, enforce it in layers, and prove it.

The public surface is small: the boundary manifest, the sandbox runtime and the errors. Each
subpackage (``contain.egress``, ``contain.inventory``, ...) has its own ``__all__``. Names are
imported on first use, so ``import contain.cli`` does not pay for pydantic or the runtime.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from contain.boundary import Boundary, load_boundary
    from contain.errors import (
        BoundaryInvalid,
        ContainError,
        FileTransferError,
        PoolUnavailable,
        SandboxLost,
        SandboxStartError,
        UnsupportedHost,
    )
    from contain.runtime import RunResult, Sandbox
    from contain.runtime.pool import SandboxPool

_WHERE = {
    "Boundary": "contain.boundary",
    "load_boundary": "contain.boundary",
    "BoundaryInvalid": "contain.errors",
    "ContainError": "contain.errors",
    "FileTransferError": "contain.errors",
    "PoolUnavailable": "contain.errors",
    "SandboxLost": "contain.errors",
    "SandboxStartError": "contain.errors",
    "UnsupportedHost": "contain.errors",
    "RunResult": "contain.runtime",
    "Sandbox": "contain.runtime",
    "SandboxPool": "contain.runtime.pool",
}

__all__ = [
    "Boundary",
    "BoundaryInvalid",
    "ContainError",
    "FileTransferError",
    "PoolUnavailable",
    "RunResult",
    "Sandbox",
    "SandboxLost",
    "SandboxPool",
    "SandboxStartError",
    "UnsupportedHost",
    "load_boundary",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> typing.Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'contain' has no attribute {name!r}")
