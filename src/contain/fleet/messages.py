"""What the driver sends a node and what comes back: plain frozen values (they cross Ray).

No exception object crosses the wire: a node reports a failure as ``cause`` and ``fix`` strings
(exceptions with keyword-only constructors do not survive pickling, and a driver must never
re-raise a node's error as its own). ``JobReport`` is what ``Batch`` yields to its caller: one per
job, exactly once, after the last attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from contain.runtime.result import RunResult

__all__ = ["CancelReport", "JobOutcome", "JobReport", "JobSpec", "NodeDescription", "Status"]

Status = Literal["done", "failed", "cancelled"]


@dataclass(frozen=True)
class JobSpec:
    """One attempt of one job, as the node runs it."""

    job_id: str
    attempt: int  # 1 for the first run; a rerun after a lost node counts up
    argv: tuple[str, ...]
    inputs: tuple[tuple[str, bytes, int], ...]  # (sandbox path, content, mode)
    outputs: tuple[str, ...]
    timeout_s: float | None
    boundary_dump: dict[str, Any]  # Boundary.model_dump(mode="json"), validated on the driver
    manifest_digest: str
    backend: str
    warm_sandboxes: int
    call_key_prefix: str  # contain.fleet.identity: the same on every attempt


@dataclass(frozen=True)
class JobOutcome:
    """What a node answers for one attempt. ``result`` is None when nothing ran."""

    job_id: str
    attempt: int
    node_id: str
    status: Status
    result: RunResult | None = None
    outputs: dict[str, bytes] = field(default_factory=dict)
    cause: str = ""
    fix: str = ""
    warm: bool = False  # the sandbox was started before the job arrived
    node_s: float = 0.0  # seconds on the node, from the call (a wait for a slot included) to the sandbox's close


@dataclass(frozen=True)
class NodeDescription:
    """A node's pool actor, as it describes itself once at the start of a batch."""

    node_id: str
    hostname: str
    pid: int
    unsupported: dict[str, str]  # backend -> why this node cannot run it (from its own facts)


@dataclass(frozen=True)
class CancelReport:
    """What ``NodePool.cancel_all`` did on one node."""

    node_id: str
    killed: int  # sandboxes that were running a job
    closed_warm: int  # started sandboxes no job had used
    unfinished: tuple[str, ...] = ()  # job ids whose threads did not finish in time (reported, never hidden)


@dataclass(frozen=True)
class JobReport:
    """The final word on one job: what the caller of ``run_batch`` receives, once per job.

    Attributes:
        job_id: the job's id (None for a line that had no usable id; then ``line`` names it).
        status: done (the command ran; see ``result`` for its exit), failed (it could not run, or
            an output is missing, or its node was lost more often than the manifest allows),
            cancelled.
        attempts: how many times it was sent to a node (more than 1: it was retried).
        retried_after: why each earlier attempt was abandoned (e.g. the node that died).
        latency_s: seconds from the batch's start of this job's first attempt to its report.
    """

    job_id: str | None
    line: int
    status: Status
    attempts: int = 0
    node_id: str | None = None
    backend: str | None = None
    result: RunResult | None = None
    outputs: dict[str, bytes] = field(default_factory=dict)
    cause: str = ""
    fix: str = ""
    retried_after: tuple[str, ...] = ()
    warm: bool = False
    latency_s: float = 0.0

    @property
    def retried(self) -> bool:
        return self.attempts > 1

    def to_dict(self) -> dict[str, Any]:
        """JSON form (outputs as their sizes; the bytes are the caller's to write)."""
        return {
            "job_id": self.job_id,
            "line": self.line,
            "status": self.status,
            "attempts": self.attempts,
            "node_id": self.node_id,
            "backend": self.backend,
            "result": self.result.to_dict() if self.result is not None else None,
            "outputs": {path: len(data) for path, data in self.outputs.items()},
            "cause": self.cause,
            "fix": self.fix,
            "retried_after": list(self.retried_after),
            "warm": self.warm,
            "latency_s": round(self.latency_s, 6),
        }
