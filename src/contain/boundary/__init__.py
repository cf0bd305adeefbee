"""The boundary manifest: what a task may touch, as one typed schema."""

from contain.boundary.load import boundary_from_mapping, boundary_json_schema, load_boundary
from contain.boundary.model import (
    PROTECTED_PATHS,
    ArgConstraint,
    Boundary,
    Credential,
    CredentialVia,
    FileAccess,
    FileRule,
    Hardening,
    LayerRequirement,
    Network,
    NetworkRule,
    RecordRule,
    Resources,
    Threat,
    ToolRule,
    ToolVerdict,
)

__all__ = [
    "PROTECTED_PATHS",
    "ArgConstraint",
    "Boundary",
    "Credential",
    "CredentialVia",
    "FileAccess",
    "FileRule",
    "Hardening",
    "LayerRequirement",
    "Network",
    "NetworkRule",
    "RecordRule",
    "Resources",
    "Threat",
    "ToolRule",
    "ToolVerdict",
    "boundary_from_mapping",
    "boundary_json_schema",
    "load_boundary",
]
