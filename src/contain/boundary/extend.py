"""Extending a boundary with command-line flags, re-validated as a whole.

Flags can only add what the manifest format can say; the result goes through the same
validation as a manifest, so a flag can never produce a boundary a file could not.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contain.boundary.model import Boundary

__all__ = ["BoundaryFlags", "extend_boundary", "flag_additions"]


@dataclass(frozen=True)
class BoundaryFlags:
    """What `contain run` flags add. Paths are HOST[:SANDBOX_PATH]; hosts are HOST[:PORT]."""

    reads: Sequence[str] = ()
    writes: Sequence[str] = ()
    env: Sequence[str] = ()
    allow_hosts: Sequence[str] = ()
    resources: dict[str, Any] = field(default_factory=dict)  # e.g. {"memory_bytes": "256MiB"}


def _bind(spec: str, default_parent: str, access: str) -> dict[str, Any]:
    host, sep, path = spec.partition(":")
    if not host:
        raise ValueError(f"--{access} {spec!r}: name a host path, e.g. ./data or ./data:/inputs/data")
    if not sep:
        name = os.path.basename(os.path.normpath(os.path.abspath(host))) or "root"
        path = f"{default_parent}/{name}"
    return {"host": os.path.abspath(os.path.expanduser(host)), "path": path, "access": access}


def _host_rule(spec: str) -> dict[str, Any]:
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif spec.count(":") == 1:
        host, _, port = spec.partition(":")
    else:
        host, port = spec, ""
    rule: dict[str, Any] = {"host": host}
    if port:
        if not port.isdigit():
            raise ValueError(f"--allow-host {spec!r}: the port must be a number")
        rule["ports"] = [int(port)]
    return rule


def extend_boundary(boundary: Boundary, flags: BoundaryFlags, *, source: str = "command-line flags") -> Boundary:
    """Return ``boundary`` plus what ``flags`` add, validated again.

    Raises:
        BoundaryInvalid: the combination is invalid (for example a path listed twice).
        ValueError: a flag is malformed.
    """
    from contain.boundary.load import boundary_from_mapping

    data = boundary.model_dump(mode="json", exclude_defaults=False)
    added = flag_additions(flags)
    data["files"] = [*data["files"], *added["files"]]
    data["env"].update(added["env"])
    data["network"]["allow"] = [*data["network"]["allow"], *added["allow"]]
    data["resources"].update(added["resources"])
    return boundary_from_mapping(data, source=source, base_dir=None)


def flag_additions(flags: BoundaryFlags) -> dict[str, Any]:
    """What ``flags`` add, as manifest fragments with host paths made absolute (not validated).

    Also the part of the validation-cache key that flags contribute: the same fragments always
    validate to the same boundary.

    Raises:
        ValueError: a flag is malformed.
    """
    env: dict[str, str] = {}
    for item in flags.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--env {item!r}: write NAME=VALUE")
        env[name] = value
    return {
        "files": [_bind(spec, "/inputs", "read") for spec in flags.reads]
        + [_bind(spec, "/work", "write") for spec in flags.writes],
        "env": env,
        "allow": [_host_rule(spec) for spec in flags.allow_hosts],
        "resources": dict(flags.resources),
    }
