"""The boundary manifest: what a task may touch, as one typed schema.

Names are imported on first use: the runtime needs only ``kinds`` and ``plain``, and must not
pay for pydantic on every ``contain run`` (see ``contain.boundary.cache``).
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from contain.boundary.kinds import (
        PROTECTED_PATHS,
        Backend,
        CredentialVia,
        FileAccess,
        LayerRequirement,
        Threat,
        ToolVerdict,
    )
    from contain.boundary.load import boundary_from_mapping, boundary_json_schema, load_boundary
    from contain.boundary.model import (
        ArgConstraint,
        Boundary,
        ContainerRuntime,
        Credential,
        FileRule,
        Hardening,
        MicrovmRuntime,
        Network,
        NetworkRule,
        RecordRule,
        Resources,
        Runtime,
        ToolRule,
    )
    from contain.boundary.plain import PlainBoundary

_KINDS = ("PROTECTED_PATHS", "Backend", "CredentialVia", "FileAccess", "LayerRequirement", "Threat", "ToolVerdict")
_MODELS = (
    "ArgConstraint",
    "Boundary",
    "ContainerRuntime",
    "Credential",
    "FileRule",
    "Hardening",
    "MicrovmRuntime",
    "Network",
    "NetworkRule",
    "RecordRule",
    "Resources",
    "Runtime",
    "ToolRule",
)
_WHERE = {
    **{name: "contain.boundary.kinds" for name in _KINDS},
    **{name: "contain.boundary.model" for name in _MODELS},
    "boundary_from_mapping": "contain.boundary.load",
    "boundary_json_schema": "contain.boundary.load",
    "load_boundary": "contain.boundary.load",
    "PlainBoundary": "contain.boundary.plain",
}

__all__ = [
    "PROTECTED_PATHS",
    "ArgConstraint",
    "Backend",
    "Boundary",
    "ContainerRuntime",
    "Credential",
    "CredentialVia",
    "FileAccess",
    "FileRule",
    "Hardening",
    "LayerRequirement",
    "MicrovmRuntime",
    "Network",
    "NetworkRule",
    "PlainBoundary",
    "RecordRule",
    "Resources",
    "Runtime",
    "Threat",
    "ToolRule",
    "ToolVerdict",
    "boundary_from_mapping",
    "boundary_json_schema",
    "load_boundary",
]


def __getattr__(name: str) -> typing.Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'contain.boundary' has no attribute {name!r}")
