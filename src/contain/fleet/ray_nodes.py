"""The fleet's one seam to Ray: connect, list nodes, start a pool actor per node, call it.

Everything Ray-specific the driver needs is here, behind ``Dispatcher`` (``batch.py`` drives it;
tests drive ``batch.py`` with an in-memory dispatcher instead). Ray is imported inside the
functions, so importing ``contain.fleet`` costs nothing and works without the ``fleet`` extra.

Pool actors: one per alive node that advertises a ``contain_backend_*`` resource, created with
hard node affinity (``soft=False``: never placed elsewhere), ``num_cpus=0`` (the sandboxes' CPU is
the node's advertised backend slots, counted by the driver), enough threads for the node's slots,
and ``max_restarts=0``: an actor that died with its node stays dead, and its jobs are retried by
the driver, which knows what was in flight.

How a Ray failure of one call is read is a table (``RAY_FAILURE_ROWS``): a row says whether the
job's node was lost (the attempt is retried elsewhere) or the call itself failed (the job fails,
not retried). An exception type in no row fails the job: a retry is only for a known loss.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from contain.errors import SandboxStartError
from contain.fleet.messages import CancelReport, JobOutcome, JobSpec, NodeDescription
from contain.fleet.placement import RESOURCE_PREFIX, SENT_PER_SLOT

__all__ = [
    "RAY_FAILURE_ROWS",
    "Dispatcher",
    "NodeLost",
    "RayDispatcher",
    "RayFailureRow",
    "classify_ray_failure",
    "connect",
]


@dataclass(frozen=True)
class NodeLost:
    """An attempt that ended because its node (or its pool actor) was lost."""

    reason: str


@dataclass(frozen=True)
class RayFailureRow:
    """How one Ray exception type is read: the node was lost (retry) or the call failed."""

    exception: str  # the class name in ray.exceptions
    node_lost: bool
    why: str


RAY_FAILURE_ROWS: tuple[RayFailureRow, ...] = (
    RayFailureRow("ActorDiedError", True, "the pool actor's process or its node died"),
    RayFailureRow("ActorUnavailableError", True, "the actor's node stopped answering"),
    RayFailureRow("RayActorError", True, "base class of the two above, raised by older paths"),
    RayFailureRow("NodeDiedError", True, "the raylet of the node is gone"),
    RayFailureRow("WorkerCrashedError", True, "the worker process died mid-call"),
    RayFailureRow("LocalRayletDiedError", True, "the raylet the call went through died"),
    RayFailureRow("ObjectLostError", True, "the result lived only on the dead node"),
    RayFailureRow("OwnerDiedError", True, "the result's owner died"),
    RayFailureRow("ActorUnschedulableError", True, "the node the actor is pinned to is gone"),
    RayFailureRow(
        "RayTaskError", False, "run_job itself raised (it never should): a bug, reported on the job, not retried"
    ),
)


def classify_ray_failure(exc: BaseException) -> NodeLost | str:
    """``NodeLost`` for a loss the driver retries; otherwise the failure's text (the job fails)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    for row in RAY_FAILURE_ROWS:
        if row.exception in names:
            text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else row.why}"
            return NodeLost(f"{row.why} ({text[:300]})") if row.node_lost else text[:500]
    return f"{type(exc).__name__}: {str(exc)[:300]}"


class Dispatcher(Protocol):
    """What ``Batch`` asks of a cluster. Handles and refs are opaque to it."""

    def nodes(self) -> dict[str, dict[str, float]]:
        """Alive node id -> its resources."""
        ...

    def start_nodes(self, slots: dict[str, dict[str, int]]) -> dict[str, tuple[Any, NodeDescription] | str]:
        """Start a pool actor on each node (node id -> backend -> its slots), all at once; per node
        its handle and description, or why it could not start."""
        ...

    def submit(self, node: Any, spec: JobSpec) -> Any:
        """Send one attempt to a node's actor; returns a reference to wait on."""
        ...

    def wait(self, refs: Sequence[Any], *, timeout_s: float) -> list[tuple[Any, JobOutcome | NodeLost | str]]:
        """The attempts that finished within ``timeout_s`` (at least one if any finished)."""
        ...

    def cancel(self, node: Any, *, timeout_s: float) -> CancelReport | str:
        """Cancel everything on one node; its report, or why it could not be reached."""
        ...

    def stop(self, node: Any) -> None:
        """Close the node's warm sandboxes and end its actor."""
        ...


_DESCRIBE_TIMEOUT_S = 120.0  # an actor's first answer includes its worker's start and imports


def connect(address: str) -> None:
    """Connect this process to the Ray cluster at ``address`` (``auto`` or ``host:port``), once.

    Raises:
        SandboxStartError: Ray is not installed, or no cluster answers at ``address``.
    """
    ray = _ray()
    if ray.is_initialized():
        return
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise SandboxStartError(
            f"cannot connect to a Ray cluster at {address}: {exc}",
            "start one with `ray start --head`, or pass --address local to start one for this run",
        ) from exc


def _ray() -> Any:
    """Ray, with its auto-init switched off for this process.

    Ray starts a new local cluster when an API is called while not connected (``ray.get`` after
    the cluster went away, from a thread still iterating a batch). For the fleet that would send
    jobs to a cluster nobody named, and since Ray 2.60 that ``ray.init()`` also writes
    ``~/.ray/auth_token``, which silently turns on token authentication for every later
    ``ray start`` of the user on the machine. A call while not connected fails instead.
    """
    try:
        import ray
        import ray._private.auto_init_hook as auto_init
    except ImportError as exc:
        raise SandboxStartError(
            "contain fleet needs Ray, which is not installed", "pip install 'contain[fleet]'"
        ) from exc
    auto_init.enable_auto_connect = False
    return ray


class RayDispatcher:
    """``Dispatcher`` over a connected Ray cluster (``connect`` first).

    Args:
        broker_config: passed to each node's ``NodePool`` (a broker.yaml path valid on every node).
    """

    def __init__(self, *, broker_config: str | None = None) -> None:
        self._ray = _ray()
        self._broker_config = broker_config
        self._actor_class: Any = None

    def nodes(self) -> dict[str, dict[str, float]]:
        return {
            node["NodeID"]: dict(node.get("Resources", {}))
            for node in self._ray.nodes()
            if node.get("Alive") and any(name.startswith(RESOURCE_PREFIX) for name in node.get("Resources", {}))
        }

    def start_nodes(self, slots: dict[str, dict[str, int]]) -> dict[str, tuple[Any, NodeDescription] | str]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._actor_class is None:
            from contain.fleet.node import NodePool

            self._actor_class = self._ray.remote(NodePool)
        actors = {
            node_id: self._actor_class.options(
                num_cpus=0,
                # A thread per attempt the driver may send (SENT_PER_SLOT per slot), plus room for
                # describe/cancel/shutdown calls that must not queue behind jobs.
                max_concurrency=SENT_PER_SLOT * sum(backends.values()) + 4,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            ).remote(node_id=node_id, broker_config=self._broker_config, slots=backends)
            for node_id, backends in slots.items()
        }
        # Every actor starts at once; then each describes itself (a node that does not answer in
        # time gets no job, and its actor is ended).
        calls = {node_id: actor.describe.remote() for node_id, actor in actors.items()}
        started: dict[str, tuple[Any, NodeDescription] | str] = {}
        for node_id, call in calls.items():
            try:
                started[node_id] = (actors[node_id], self._ray.get(call, timeout=_DESCRIBE_TIMEOUT_S))
            except Exception as exc:  # the node gets no job; the reason is reported
                self._ray.kill(actors[node_id], no_restart=True)
                lost = classify_ray_failure(exc)
                started[node_id] = lost.reason if isinstance(lost, NodeLost) else lost
        return started

    def submit(self, node: Any, spec: JobSpec) -> Any:
        return node.run_job.remote(spec)

    def wait(self, refs: Sequence[Any], *, timeout_s: float) -> list[tuple[Any, JobOutcome | NodeLost | str]]:
        if not refs:
            return []
        first, _ = self._ray.wait(list(refs), num_returns=1, timeout=timeout_s)
        if not first:
            return []
        ready, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=0)  # all that are done now
        finished: list[tuple[Any, JobOutcome | NodeLost | str]] = []
        for ref in ready:
            try:
                finished.append((ref, self._ray.get(ref)))
            except Exception as exc:  # mapped by RAY_FAILURE_ROWS, never swallowed
                finished.append((ref, classify_ray_failure(exc)))
        return finished

    def cancel(self, node: Any, *, timeout_s: float) -> CancelReport | str:
        try:
            report: CancelReport = self._ray.get(node.cancel_all.remote(timeout_s), timeout=timeout_s + 30)
        except Exception as exc:  # an unreachable node is reported, not hidden
            lost = classify_ray_failure(exc)
            return lost.reason if isinstance(lost, NodeLost) else lost
        return report

    def stop(self, node: Any) -> None:
        with contextlib.suppress(Exception):  # a dead node has nothing left to close
            self._ray.get(node.shutdown.remote(), timeout=60)
        self._ray.kill(node, no_restart=True)

