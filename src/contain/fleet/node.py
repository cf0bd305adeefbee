"""The pool actor: one per node, running the jobs the driver sends it in sandboxes of that node.

``NodePool`` is a plain class; ``ray_nodes.RayDispatcher.start_nodes`` makes it a Ray actor
pinned to its node (hard node affinity, threaded, never restarted). ``run_job`` is one attempt of
one job, an ordered checklist:

  1. refuse when the batch was cancelled, or when this node's own facts cannot run the job's
     backend (the driver placed it by the node's advertised resources; this is the second check);
  2. rebuild the job's boundary from the driver's validated dump (``plain_from_json``, cached),
     then wait for a free slot of the job's backend (``slots``: the driver sends a node up to
     twice its slots, so the next job is already here when one ends; the extra ones wait here);
  3. take a started sandbox and register it as live, under the lock that ``cancel_all`` takes,
     so a cancel either sees it or the job sees the cancel. With ``fleet.warm_sandboxes`` N > 0
     the sandbox comes from this node's ``SandboxPool`` for the job's manifest (one per manifest
     digest, so one per backend, size N, opened at the manifest's first job and refilled in the
     background): a ready one when there is one, else one started now in the job's own thread
     (``acquire_or_start``), so the first jobs run while the pool fills instead of queueing
     behind its one refill thread. A pool unused for 5 minutes, or the least recently used
     beyond 8 per node, is closed (a session would otherwise keep every manifest's warm
     sandboxes, refilled forever). With N = 0 every sandbox is started for its job, no pool;
  4. put the inputs, run the command with the job's broker key prefix in its environment
     (``identity.CALL_KEY_PREFIX_ENV``), read the outputs back (``Sandbox.get_file``: regular
     files under scratch only, never through a symlink, bounded by the disk budget);
  5. unregister and close the sandbox (export, cgroup removal, write-bind audit), always.

``cancel_all`` sets the cancelled flag, kills every live sandbox (``Sandbox.destroy``: its
processes and cgroup, from outside), closes every pool (its idle sandboxes, its leases, a start in
progress), and waits for the job threads to close theirs. When it returns no sandbox of this
actor exists, unless a job thread did not finish in time, which the report names.

What this does not do: retry (the driver decides), or survive its node (a node's death takes its
sandboxes' processes with it through the sandbox init's parent-death signal; their cgroups are
left for ``sweep_stale_cgroups``, see docs/fleet.md).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from contain._log import LazyLogger
from contain.boundary.plain import PlainBoundary, plain_from_json
from contain.errors import ContainError, FileTransferError
from contain.fleet.identity import CALL_KEY_COUNTER_ENV, CALL_KEY_PREFIX_ENV, JOB_ID_ENV
from contain.fleet.messages import CancelReport, JobOutcome, JobSpec, NodeDescription, Status
from contain.fleet.placement import (
    BACKEND_ROWS,
    NodeFacts,
    canonical_backend,
    gather_node_facts,
    is_backend_supported,
)
from contain.runtime.attachments import Attachment
from contain.runtime.sandbox import Sandbox

__all__ = ["CALL_COUNTER_NAME", "NodePool", "PoolFactory", "SandboxFactory", "WarmPool"]

log = LazyLogger(__name__)

# The broker client's call counter, in the sandbox's first scratch path (the job can write there;
# tampering with it only changes its own keys, which the broker scopes to its task anyway).
CALL_COUNTER_NAME = ".contain-fleet-calls"
# Broker tokens for fleet sandboxes live as long as a warm sandbox may wait plus this margin; the
# run's wall clock is added per boundary.
_TOKEN_MARGIN_S = 900.0
_CANCEL_WAIT_S = 30.0
# Warm pools kept per node: a pool no job took from for 5 minutes is closed, and beyond 8 manifests
# the least recently used one is (each holds its manifest's warm_sandboxes started sandboxes).
_POOL_IDLE_S = 300.0
_POOLS_MAX = 8

SandboxFactory = Callable[[PlainBoundary, list[Attachment]], Sandbox]


class _Lease(Protocol):
    sandbox: Sandbox

    def destroy(self) -> None: ...

    def close(self) -> None: ...


class WarmPool(Protocol):
    """What the node asks of a warm pool (``contain.runtime.pool.SandboxPool`` is the one)."""

    def acquire_or_start(self) -> tuple[_Lease, bool]: ...

    def close(self) -> int: ...


# (boundary, size, attachments_for_each) -> an open pool refilling in the background
PoolFactory = Callable[[PlainBoundary, int, Callable[[], Sequence[Attachment]]], WarmPool]


class _ColdLease:
    """A sandbox started for one job, outside any pool; closing the lease closes it."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def destroy(self) -> None:
        self.sandbox.destroy()

    def close(self) -> None:
        self.sandbox.close()


def _default_factory(boundary: PlainBoundary, attachments: list[Attachment]) -> Sandbox:
    return Sandbox(boundary, attachments=attachments)


def _default_pool(
    boundary: PlainBoundary, size: int, attachments_for_each: Callable[[], Sequence[Attachment]]
) -> WarmPool:
    from contain.runtime.pool import SandboxPool

    return SandboxPool(boundary, size=size, attachments_for_each=attachments_for_each)


class NodePool:
    """Runs job attempts on this node (see the module docstring).

    Args:
        node_id: the Ray node id this actor is pinned to (for reports).
        broker_config: a broker.yaml on this node; sandboxes of manifests with ``records`` get its
            socket, a task token and the client (``contain.broker.attachments_from_config``).
            None: such a job fails, naming the missing option.
        facts: this node's facts (gathered when omitted).
        open_pool: opens the warm pool of one manifest (default a ``SandboxPool`` of the
            manifest's backend; tests pass one over ``RecordingBackend`` or a fake).
        make_sandbox: builds an unstarted sandbox for a job without warm sandboxes.
        slots: backend spec -> jobs of it running at once here (the node's advertised resources);
            a job beyond that waits in ``run_job`` for a slot, so the driver may send the next job
            before one ends. None: no limit here (the driver's count is the only one).
        clock: monotonic seconds, for retiring unused pools (tests inject one).
    """

    def __init__(
        self,
        *,
        node_id: str,
        broker_config: str | None = None,
        facts: NodeFacts | None = None,
        open_pool: PoolFactory = _default_pool,
        make_sandbox: SandboxFactory = _default_factory,
        slots: Mapping[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._node_id = node_id
        self._broker_config = broker_config
        self._facts = facts or gather_node_facts()
        self._open_pool = open_pool
        self._make_sandbox = make_sandbox
        self._lock = threading.Condition()
        self._cancelled = False
        self._pools: dict[str, WarmPool] = {}  # manifest digest -> its pool (opened under _lock)
        self._pool_used: dict[str, float] = {}  # manifest digest -> when a job last took from its pool
        self._clock = clock
        self._live: dict[str, _Lease] = {}  # job id -> its lease or sandbox, while the job runs
        self._busy: set[str] = set()  # job ids whose thread is inside run_job
        self._boundaries: dict[str, PlainBoundary] = {}
        self._slots = dict(slots) if slots is not None else None
        self._running: Counter[str] = Counter()  # backend -> jobs holding a slot

    def describe(self) -> NodeDescription:
        """Who this actor is and which backends its own facts rule out."""
        unsupported = {
            row.backend: why for row in BACKEND_ROWS if (why := is_backend_supported(self._facts, row.backend))
        }
        return NodeDescription(self._node_id, socket.gethostname(), os.getpid(), unsupported)

    def run_job(self, spec: JobSpec) -> JobOutcome:
        """Run one attempt of one job; never raises (a failure is an outcome with cause and fix)."""
        began = time.perf_counter()
        with self._lock:
            if self._cancelled:
                return self._outcome(spec, "cancelled", began, cause="the batch was cancelled before this job started")
            self._busy.add(spec.job_id)
        try:
            return self._run(spec, began)
        except ContainError as exc:
            return self._outcome(
                spec, "cancelled" if self._is_cancelled() else "failed", began, cause=exc.cause, fix=exc.fix
            )
        except Exception as exc:  # reported as this job's failure, never retried or hidden
            log.exception("job %s failed inside the node", spec.job_id)
            return self._outcome(
                spec, "failed", began, cause=f"internal error on the node: {type(exc).__name__}: {exc}",
                fix="report this as a bug in contain",
            )
        finally:
            with self._lock:
                self._busy.discard(spec.job_id)
                self._lock.notify_all()

    def _run(self, spec: JobSpec, began: float) -> JobOutcome:
        why_not = is_backend_supported(self._facts, spec.backend)
        if why_not is not None:
            return self._outcome(
                spec, "failed", began, cause=f"node {self._node_id} cannot run {spec.backend}: {why_not}",
                fix="advertise contain_backend_* resources from `contain fleet resources` on each node",
            )
        boundary = self._boundary(spec)
        self._check_broker(boundary)
        backend = canonical_backend(spec.backend)
        if not self._wait_for_slot(backend):
            return self._outcome(spec, "cancelled", began, cause="the batch was cancelled before this job started")
        try:
            return self._run_in_slot(spec, boundary, began)
        finally:
            with self._lock:
                self._running[backend] -= 1
                self._lock.notify_all()

    def _wait_for_slot(self, backend: str) -> bool:
        """Wait until fewer than the node's slots of ``backend`` run; False once cancelled."""
        limit = self._slots.get(backend, 1) if self._slots is not None else None
        with self._lock:
            while limit is not None and self._running[backend] >= limit and not self._cancelled:
                self._lock.wait()
            if self._cancelled:
                return False
            self._running[backend] += 1
            return True

    def _run_in_slot(self, spec: JobSpec, boundary: PlainBoundary, began: float) -> JobOutcome:
        held, warm = self._take(spec, boundary)
        sandbox = held.sandbox
        with self._lock:
            cancelled = self._cancelled
            if not cancelled:
                self._live[spec.job_id] = held
        if cancelled:
            held.close()
            return self._outcome(spec, "cancelled", began, cause="the batch was cancelled before this job started")
        try:
            for path, data, mode in spec.inputs:
                sandbox.put_file(path, data, mode=mode)
            counter = f"{sandbox.scratch_paths[0].rstrip('/')}/{CALL_COUNTER_NAME}"
            env = {JOB_ID_ENV: spec.job_id, CALL_KEY_PREFIX_ENV: spec.call_key_prefix, CALL_KEY_COUNTER_ENV: counter}
            result = sandbox.run(list(spec.argv), timeout=spec.timeout_s, env=env)
            outputs, missing = self._outputs(sandbox, spec.outputs)
        finally:
            with self._lock:
                self._live.pop(spec.job_id, None)
            held.close()
        if self._is_cancelled():
            return self._outcome(spec, "cancelled", began, result=result, cause="the batch was cancelled", warm=warm)
        if missing:
            return self._outcome(
                spec, "failed", began, result=result, outputs=outputs, warm=warm,
                cause="outputs not brought back: " + "; ".join(missing),
                fix="write each output as a regular file under a scratch path, within resources.disk_bytes",
            )
        return self._outcome(spec, "done", began, result=result, outputs=outputs, warm=warm)

    def _take(self, spec: JobSpec, boundary: PlainBoundary) -> tuple[_Lease, bool]:
        """A started sandbox for the job (see step 3), and whether it was ready before the job."""
        if spec.warm_sandboxes < 1:
            cold = self._make_sandbox(boundary, self._attachments(boundary))
            try:
                cold.start()
            except BaseException:
                cold.close()
                raise
            return _ColdLease(cold), False
        from contain.errors import PoolUnavailable

        for _ in range(2):  # a second time only when the pool was retired between lookup and use
            with self._lock:
                if self._cancelled:
                    raise PoolUnavailable("this node's pools are closed (the batch was cancelled)", "")
                pool = self._pools.get(spec.manifest_digest)
                if pool is None:  # opened under the lock: cancel_all either closes it or it is never opened
                    pool = self._open_pool(boundary, spec.warm_sandboxes, lambda: self._attachments(boundary))
                    self._pools[spec.manifest_digest] = pool
                self._pool_used[spec.manifest_digest] = self._clock()
                retire = self._pools_to_retire_locked()
            for old in retire:
                self._close_quietly(old)
            try:
                return pool.acquire_or_start()
            except PoolUnavailable:
                with self._lock:
                    if self._cancelled or self._pools.get(spec.manifest_digest) is pool:
                        raise
        raise PoolUnavailable(f"the warm pool of manifest {spec.manifest_digest[:12]} kept closing", "")

    def _pools_to_retire_locked(self) -> list[WarmPool]:
        """Pools no job took from for ``_POOL_IDLE_S``, and the least recently used beyond
        ``_POOLS_MAX``: removed here, closed by the caller outside the lock. Without this a long
        session with many manifests would keep warm sandboxes of every one, refilled forever."""
        now = self._clock()
        by_age = sorted(self._pool_used, key=lambda digest: self._pool_used[digest])
        idle = [digest for digest in by_age if now - self._pool_used[digest] >= _POOL_IDLE_S]
        excess = by_age[: max(0, len(by_age) - _POOLS_MAX)]
        retired = []
        for digest in dict.fromkeys(idle + excess):
            self._pool_used.pop(digest)
            retired.append(self._pools.pop(digest))
        return retired

    def _close_quietly(self, pool: WarmPool) -> int:
        try:
            return pool.close()
        except ContainError as exc:  # a sandbox survived its teardown: said loudly, never hidden
            log.error("node %s: closing a warm pool left something behind: %s", self._node_id, exc.cause)
            return 0

    def _close_pools(self) -> int:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
            self._pool_used.clear()
        return sum(self._close_quietly(pool) for pool in pools)

    def cancel_all(self, timeout_s: float = _CANCEL_WAIT_S) -> CancelReport:
        """Kill every live sandbox, close the pools, wait for job threads; see the module docstring."""
        with self._lock:
            self._cancelled = True
            self._lock.notify_all()  # jobs waiting for a slot return cancelled
            live = list(self._live.values())
            for held in live:
                held.destroy()
        closed_warm = self._close_pools()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._busy and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            unfinished = tuple(sorted(self._busy))
        return CancelReport(self._node_id, killed=len(live), closed_warm=closed_warm, unfinished=unfinished)

    def shutdown(self) -> int:
        """Close the pools at the end of a batch; returns how many warm sandboxes no job used."""
        return self._close_pools()

    # -- helpers ------------------------------------------------------------------------------

    def _is_cancelled(self) -> bool:
        with self._lock:
            return self._cancelled

    def _boundary(self, spec: JobSpec) -> PlainBoundary:
        boundary = self._boundaries.get(spec.manifest_digest)
        if boundary is None:
            try:
                boundary = plain_from_json(spec.boundary_dump)
            except ValueError as exc:
                from contain.errors import BoundaryInvalid

                raise BoundaryInvalid(
                    f"the job's manifest did not arrive intact: {exc}", "send manifests validated by contain"
                ) from exc
            self._boundaries[spec.manifest_digest] = boundary
        return boundary

    def _check_broker(self, boundary: PlainBoundary) -> None:
        """Refuse a manifest with records when this fleet has no broker (before any sandbox or pool)."""
        if boundary.records and self._broker_config is None:
            from contain.errors import BoundaryInvalid

            raise BoundaryInvalid(
                f"the manifest of task {boundary.task} names records, but the fleet has no broker",
                "pass --broker-config broker.yaml (a broker reachable on every node)",
            )

    def _attachments(self, boundary: PlainBoundary) -> list[Attachment]:
        """The broker attachments of one sandbox (a task token minted for it), none without records."""
        self._check_broker(boundary)
        if not boundary.records or self._broker_config is None:
            return []
        from contain.broker.sandbox_link import attachments_from_config

        ttl_s = _TOKEN_MARGIN_S + boundary.resources.wall_s
        return attachments_from_config(boundary, self._broker_config, ttl_s=ttl_s)

    @staticmethod
    def _outputs(sandbox: Sandbox, paths: tuple[str, ...]) -> tuple[dict[str, bytes], list[str]]:
        outputs: dict[str, bytes] = {}
        missing: list[str] = []
        for path in paths:
            try:
                outputs[path] = sandbox.get_file(path)
            except FileTransferError as exc:
                missing.append(f"{path}: {exc.cause}")
        return outputs, missing

    def _outcome(self, spec: JobSpec, status: Status, began: float, **fields: Any) -> JobOutcome:
        return JobOutcome(
            job_id=spec.job_id, attempt=spec.attempt, node_id=self._node_id, status=status,
            node_s=time.perf_counter() - began, **fields,
        )

