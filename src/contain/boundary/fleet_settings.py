"""The manifest's optional ``fleet:`` section: how ``contain fleet`` runs jobs of this manifest.

Read by the fleet driver (``contain.fleet``) and nowhere else: the runtime never sees it (so it is
not mirrored in ``contain.boundary.plain``). A manifest without the section gets the defaults,
which are the safe ones: a job lost with its node is retried twice at most, and each node keeps
two sandboxes of this manifest started ahead of time.

What the section does not do: it grants nothing. A retry reruns the same job in a fresh sandbox
of the same boundary; a warm sandbox is a started sandbox that no job used yet, never one a job
already ran in (sandboxes are not reused between jobs).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MAX_FLEET_RETRIES", "MAX_WARM_SANDBOXES", "FleetSettings"]

# Bounds, so a typo cannot make one lost job rerun without end or a node start hundreds of
# sandboxes nobody asked for.
MAX_FLEET_RETRIES = 10
MAX_WARM_SANDBOXES = 32


class FleetSettings(BaseModel):
    """How the fleet runs jobs of this manifest (``contain fleet run``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    retries: int = Field(
        default=2,
        ge=0,
        le=MAX_FLEET_RETRIES,
        description="Times a job lost with its node (node or worker death) is rerun on another node, e.g. 2.",
    )
    warm_sandboxes: int = Field(
        default=2,
        ge=0,
        le=MAX_WARM_SANDBOXES,
        description="Sandboxes of this manifest each node keeps started ahead of its jobs, e.g. 2 (0: none).",
    )
