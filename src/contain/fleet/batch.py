"""Run a batch of jobs across the cluster; results stream back as they finish.

``run_batch(jobs, dispatcher=...)`` returns a ``Batch``: iterate it for one ``JobReport`` per job,
in the order jobs finish; call ``cancel()`` (from any thread, or after Ctrl-C) to stop everything.
``Batch.__next__`` is the orchestrator, an ordered checklist per step:

  1. (once) report every line that is not a job (bad JSON, bad manifest, duplicate id): failed,
     alone; start one pool actor per node advertising a ``contain_backend_*`` resource;
  2. place queued attempts on nodes whose resources advertise the job's backend and that have
     room: up to ``placement.SENT_PER_SLOT`` attempts per slot of that backend (the count the node
     advertised for it; each backend's slots are counted on their own, as Ray counts custom
     resources); the node runs at most its slots and holds the rest; a job whose backend no
     alive node advertises fails with that cause;
  3. wait for attempts to finish; an outcome becomes the job's report; an attempt lost with its
     node (``NodeLost``, from ``ray_nodes.RAY_FAILURE_ROWS``) marks the node dead and queues the
     job again, first in line, while its manifest's ``fleet.retries`` allows, then fails it;
  4. after the last report, stop the pool actors (their warm sandboxes are closed), unless they
     belong to a ``FleetSession`` (session.py), which keeps them, and their warm pools, for its
     next batch.

What is guaranteed: exactly one report per job line; a job is retried only after its node was
lost (never after a failure of its own: a command that exits 1 is done, with exit code 1); every
attempt of a job carries the same broker key prefix (``identity.call_key_prefix``), so a retry
replays the writes its lost attempt made instead of repeating them. ``cancel()`` kills every
sandbox on every node and waits for the nodes to confirm; the reports of jobs that had not
finished say cancelled, and ``cancel_reports`` holds what each node killed.

What is not: a job whose lost attempt had effects outside the broker (a write to a bound host
directory, a network call through egress) may have those effects twice. Nodes that join after
the batch started get no jobs. A node that stops answering without Ray declaring it dead keeps
its jobs until Ray does.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from contain._log import LazyLogger
from contain.fleet.identity import call_key_prefix, job_content_digest, new_batch_id
from contain.fleet.jobs import JobProblem, PreparedJob
from contain.fleet.messages import CancelReport, JobOutcome, JobReport, JobSpec, NodeDescription
from contain.fleet.placement import SENT_PER_SLOT, nodes_for_backend, plan_backend_slots, resource_name
from contain.fleet.ray_nodes import Dispatcher, NodeLost

__all__ = ["Batch", "StartedNodes", "run_batch", "start_pool_actors", "stop_pool_actors"]

log = LazyLogger(__name__)

_WAIT_S = 0.25  # how long one step waits for a result before checking cancel and placing again
_CANCEL_TIMEOUT_S = 30.0
_CANCEL_COLLECT_S = 5.0  # after the nodes confirmed the cancel, how long their last answers may take


@dataclass
class _Attempt:
    prepared: PreparedJob
    attempt: int
    first_sent: float | None = None
    retried_after: list[str] = field(default_factory=list)


@dataclass
class _Node:
    handle: Any
    description: NodeDescription
    resources: dict[str, float]
    in_use: Counter[str] = field(default_factory=Counter)  # backend -> attempts sent, not answered
    alive: bool = True


@dataclass
class StartedNodes:
    """The pool actors of a batch, or of a ``FleetSession`` serving several batches.

    Attributes:
        nodes: node id -> its actor, description, usable resources and liveness (shared by the
            batches of a session: a node lost in one batch gets no job in the next).
        problems: node id -> why that node got no actor or lost a backend.
        ready_at: ``time.monotonic()`` once every actor answered.
        cancelled: a batch on these nodes was cancelled (their actors refuse every later job).
    """

    nodes: dict[str, _Node]
    problems: dict[str, str]
    ready_at: float
    cancelled: bool = False


def start_pool_actors(dispatcher: Dispatcher) -> StartedNodes:
    """Start one pool actor per node advertising a ``contain_backend_*`` resource, all at once.

    The node's own facts have the last word: a backend its actor rules out is dropped from what
    the node advertised, so no job of that backend is sent there (and ``problems`` says so).
    """
    advertised = dispatcher.nodes()
    # Each backend's slots are its own (Ray custom resources are independent): a node advertising
    # process 2 and container_runc 2 runs up to 4 sandboxes at once; its actor enforces them.
    slots = {node_id: plan_backend_slots(resources) for node_id, resources in advertised.items()}
    nodes: dict[str, _Node] = {}
    problems: dict[str, str] = {}
    for node_id, started in dispatcher.start_nodes(slots).items():
        resources = advertised[node_id]
        if isinstance(started, str):
            problems[node_id] = started
            continue
        handle, description = started
        refused = {resource_name(b) for b in description.unsupported} & set(resources)
        if refused:
            problems[node_id] = (
                f"advertises {', '.join(sorted(str(r) for r in refused))} but its own facts rule "
                + "; ".join(f"{b} out ({why})" for b, why in sorted(description.unsupported.items())
                            if resource_name(b) in refused)
            )
        usable = {name: value for name, value in resources.items() if name not in refused}
        nodes[node_id] = _Node(handle, description, usable)
    return StartedNodes(nodes, problems, time.monotonic())


def stop_pool_actors(dispatcher: Dispatcher, started: StartedNodes) -> None:
    """Stop every alive actor (each closes its pools first)."""
    for node in started.nodes.values():
        if node.alive:
            dispatcher.stop(node.handle)
            node.alive = False


class Batch:
    """A running batch: an iterator of ``JobReport`` (see the module docstring)."""

    def __init__(
        self,
        items: Iterable[PreparedJob | JobProblem],
        *,
        dispatcher: Dispatcher,
        batch_id: str | None = None,
        max_in_flight: int | None = None,
        started: StartedNodes | None = None,
    ) -> None:
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError("max_in_flight must be 1 or more")
        self.batch_id = batch_id or new_batch_id()
        self.max_in_flight = max_in_flight
        self.nodes_ready_at: float | None = None  # time.monotonic() once the pool actors answered
        self.nodes: dict[str, _Node] = {}
        self.node_problems: dict[str, str] = {}  # node id -> why it got no job
        self._started_nodes = started  # a session's actors: used, never stopped, by this batch
        self.cancel_reports: dict[str, CancelReport | str] = {}
        self._dispatcher = dispatcher
        self._items = list(items)
        self._ready: deque[JobReport] = deque()
        self._queue: deque[_Attempt] = deque()
        self._inflight: dict[Any, tuple[_Attempt, str]] = {}
        self._owns_nodes = False  # started by this batch: stopped at its end
        self._started = False
        self._finished = False
        self._cancel = threading.Event()
        self._cancel_lock = threading.Lock()
        self._cancelled_done = False
        self._began = time.monotonic()
        self._in_flight_view: dict[str, str] = {}  # replaced whole after each change, read by other threads

    def in_flight(self) -> dict[str, str]:
        """Job id -> node id of the attempts sent and not yet answered (a snapshot; any thread)."""
        return dict(self._in_flight_view)

    @property
    def total(self) -> int:
        """Job lines in the batch (each gets exactly one report)."""
        return len(self._items)

    def __iter__(self) -> Iterator[JobReport]:
        return self

    def __next__(self) -> JobReport:
        if not self._started:
            self._start()
        while not self._ready:
            if self._finished:
                raise StopIteration
            self._step()
        return self._ready.popleft()

    @property
    def finished(self) -> bool:
        """Every report was produced (the iterator is exhausted or about to be)."""
        return self._finished

    def cancel(self) -> None:
        """Kill every sandbox on every node; later reports say cancelled. Idempotent, any thread.

        On a session's nodes this ends the session too: the actors refuse every later job.
        """
        self._cancel.set()
        with self._cancel_lock:
            if self._cancelled_done:
                return
            self._cancelled_done = True
            if self._started_nodes is not None:
                self._started_nodes.cancelled = True
            for node_id, node in list(self.nodes.items()):
                if node.alive:
                    self.cancel_reports[node_id] = self._dispatcher.cancel(node.handle, timeout_s=_CANCEL_TIMEOUT_S)

    # -- the steps ----------------------------------------------------------------------------

    def _start(self) -> None:
        self._started = True
        self._began = time.monotonic()
        for item in self._items:
            if isinstance(item, JobProblem):
                self._ready.append(JobReport(item.job_id, item.line, "failed", cause=item.cause, fix=item.fix))
            else:
                self._queue.append(_Attempt(item, 1))
        if not self._queue:
            self._finished = True
            return
        if self._started_nodes is None:
            self._started_nodes = start_pool_actors(self._dispatcher)
            self._owns_nodes = True
        self.nodes = self._started_nodes.nodes
        self.node_problems = dict(self._started_nodes.problems)
        self.nodes_ready_at = max(self._started_nodes.ready_at, self._began)

    def _step(self) -> None:
        try:
            self._advance()
        finally:
            self._in_flight_view = {attempt.prepared.id: node for attempt, node in self._inflight.values()}

    def _advance(self) -> None:
        if self._cancel.is_set():
            self._finish_cancelled()
            return
        self._place()
        if not self._inflight:
            if not self._queue:
                self._finish()
            return
        for ref, answer in self._dispatcher.wait(list(self._inflight), timeout_s=_WAIT_S):
            attempt, node_id = self._inflight.pop(ref)
            node = self.nodes[node_id]
            node.in_use[attempt.prepared.backend] -= 1
            if isinstance(answer, NodeLost):
                self._lost(attempt, node_id, answer.reason)
            elif isinstance(answer, str):
                self._report(attempt, node_id, status="failed", cause=f"the call to node {node_id} failed: {answer}")
            else:
                self._report_outcome(attempt, answer)

    def _place(self) -> None:
        waiting: deque[_Attempt] = deque()
        while self._queue:
            if self.max_in_flight is not None and len(self._inflight) >= self.max_in_flight:
                waiting.extend(self._queue)
                self._queue.clear()
                break
            attempt = self._queue.popleft()
            backend = attempt.prepared.backend
            alive = {nid: n for nid, n in self.nodes.items() if n.alive}
            able = nodes_for_backend({nid: n.resources for nid, n in alive.items()}, backend)
            if not able:
                self._report(
                    attempt, None, status="failed",
                    cause=f"no alive node advertises {resource_name(backend) or backend} (backend {backend})",
                    fix="start nodes with `ray start --resources \"$(contain fleet resources)\"` where it works",
                )
                continue
            free = [nid for nid, slots in able.items() if alive[nid].in_use[backend] < slots * SENT_PER_SLOT]
            if not free:
                waiting.append(attempt)
                continue
            node_id = min(free, key=lambda nid: alive[nid].in_use[backend] / able[nid])
            self._send(attempt, node_id)
        self._queue = waiting

    def _send(self, attempt: _Attempt, node_id: str) -> None:
        prepared = attempt.prepared
        job = prepared.job
        inputs = tuple((f.path, f.data(), f.mode) for f in job.inputs)
        digest = job_content_digest(
            argv=job.argv(),
            inputs=[{"path": p, "sha256": _sha256(d), "mode": m} for p, d, m in inputs],
            outputs=job.outputs,
            boundary_dump=prepared.boundary_dump,
        )
        spec = JobSpec(
            job_id=job.id,
            attempt=attempt.attempt,
            argv=job.argv(),
            inputs=inputs,
            outputs=job.outputs,
            timeout_s=job.timeout_s,
            boundary_dump=prepared.boundary_dump,
            manifest_digest=prepared.manifest_digest,
            backend=prepared.backend,
            warm_sandboxes=prepared.fleet.warm_sandboxes,
            call_key_prefix=call_key_prefix(batch_id=self.batch_id, job_id=job.id, content_digest=digest),
        )
        if attempt.first_sent is None:
            attempt.first_sent = time.monotonic()
        node = self.nodes[node_id]
        node.in_use[prepared.backend] += 1
        self._inflight[self._dispatcher.submit(node.handle, spec)] = (attempt, node_id)

    def _lost(self, attempt: _Attempt, node_id: str, reason: str) -> None:
        node = self.nodes[node_id]
        if node.alive:
            node.alive = False
            log.warning("node %s lost: %s", node_id, reason)
        attempt.retried_after.append(f"attempt {attempt.attempt} lost with node {node_id}: {reason}")
        if self._cancel.is_set():
            self._report(attempt, node_id, status="cancelled", cause="the batch was cancelled")
        elif attempt.attempt <= attempt.prepared.fleet.retries:
            attempt.attempt += 1
            self._queue.appendleft(attempt)
        else:
            self._report(
                attempt, node_id, status="failed",
                cause=f"lost with its node {attempt.attempt} times; fleet.retries is {attempt.prepared.fleet.retries}",
                fix="raise fleet.retries in the manifest, or find out why the nodes die",
            )

    def _report_outcome(self, attempt: _Attempt, outcome: JobOutcome) -> None:
        self._report(
            attempt, outcome.node_id, status=outcome.status, result=outcome.result, outputs=outcome.outputs,
            cause=outcome.cause, fix=outcome.fix, warm=outcome.warm,
        )

    def _report(self, attempt: _Attempt, node_id: str | None, **fields: Any) -> None:
        sent = attempt.first_sent
        self._ready.append(
            JobReport(
                job_id=attempt.prepared.id,
                line=attempt.prepared.line,
                attempts=attempt.attempt if sent is not None else 0,
                node_id=node_id,
                backend=attempt.prepared.backend,
                retried_after=tuple(attempt.retried_after),
                latency_s=time.monotonic() - sent if sent is not None else 0.0,
                **fields,
            )
        )

    def _finish_cancelled(self) -> None:
        self.cancel()  # idempotent: makes sure the nodes were told, even when only the flag was set
        # The nodes have answered the cancel, so their run_job calls have returned: collect those
        # answers (a job that finished before the cancel reached it is reported done).
        deadline = time.monotonic() + _CANCEL_COLLECT_S
        while self._inflight and time.monotonic() < deadline:
            for ref, answer in self._dispatcher.wait(list(self._inflight), timeout_s=_WAIT_S):
                attempt, node_id = self._inflight.pop(ref)
                if isinstance(answer, JobOutcome) and answer.status == "done":
                    self._report_outcome(attempt, answer)
                else:
                    self._report(attempt, node_id, status="cancelled", cause="the batch was cancelled")
        for attempt, node_id in self._inflight.values():
            self._report(attempt, node_id, status="cancelled", cause="the batch was cancelled while it ran")
        self._inflight.clear()
        for attempt in self._queue:
            self._report(attempt, None, status="cancelled", cause="the batch was cancelled before it started")
        self._queue.clear()
        self._finish()

    def _finish(self) -> None:
        self._finished = True
        if self._owns_nodes and self._started_nodes is not None:
            stop_pool_actors(self._dispatcher, self._started_nodes)


def run_batch(
    items: Iterable[PreparedJob | JobProblem],
    *,
    dispatcher: Dispatcher,
    batch_id: str | None = None,
    max_in_flight: int | None = None,
) -> Batch:
    """Start a batch over ``dispatcher`` (``ray_nodes.RayDispatcher`` after ``ray_nodes.connect``).

    Args:
        items: from ``jobs.prepare_jobs``; problems become failed reports.
        dispatcher: the cluster.
        batch_id: to resume a batch (same broker keys as its first run); default a new random id.
        max_in_flight: at most this many attempts running at once across the cluster (default:
            every advertised slot).

    Returns:
        The ``Batch``; nothing is sent to a node before the first ``next()``.
    """
    return Batch(items, dispatcher=dispatcher, batch_id=batch_id, max_in_flight=max_in_flight)


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
