"""A fleet session: the pool actors started once, serving batch after batch.

``run_batch`` alone starts one pool actor per node for its batch and stops them at its end, so
every batch pays the actors' start (a Ray worker process per node, contain's imports, the node's
facts: about 1-2 s here) and starts its warm pools empty. A ``FleetSession`` starts the actors
once (``open``), runs any number of batches on them one after another (``run_batch``), and stops
them at ``close``. Between batches each node keeps its warm pools (one ``SandboxPool`` per
manifest), so the next batch of the same manifest finds started sandboxes.

What stays the same: every job still gets a fresh sandbox (a pool hands each sandbox out once
and closes it after its job); a batch's guarantees (one report per job, retries only after a
lost node, cancel) are ``Batch``'s.

What a session does not do:

- Run two batches at once: ``run_batch`` refuses while the previous batch has reports to give.
  ``close()`` while a batch runs stops the actors under it: its running jobs are lost with them
  and reported failed (no alive node is left to retry on); cancel the batch first.
- Survive a cancel: cancelling a batch kills every sandbox on every node and leaves the actors
  refusing jobs, so the session is over (``run_batch`` refuses; ``close`` still stops them).
- Replace lost nodes or add nodes that joined after ``open``: a node lost in one batch gets no job
  in the next. Open a new session for a changed cluster.
- Re-check a warm sandbox against a changed host between batches: a pooled sandbox was planned
  when it started (at most the pool's ``max_idle_s``, 10 minutes, earlier).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from contain.errors import PoolUnavailable
from contain.fleet.batch import Batch, StartedNodes, start_pool_actors, stop_pool_actors
from contain.fleet.jobs import JobProblem, PreparedJob
from contain.fleet.ray_nodes import Dispatcher

__all__ = ["FleetSession"]


class FleetSession:
    """Pool actors kept across batches (see the module docstring). Use as a context manager.

    Args:
        dispatcher: the cluster (``ray_nodes.RayDispatcher`` after ``ray_nodes.connect``).
    """

    def __init__(self, *, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self._started: StartedNodes | None = None
        self._current: Batch | None = None
        self._closed = False

    def __enter__(self) -> FleetSession:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def nodes(self) -> StartedNodes | None:
        """The started actors (None before ``open``)."""
        return self._started

    def open(self) -> StartedNodes:
        """Start one pool actor per node, all at once; idempotent.

        Raises:
            PoolUnavailable: the session was closed.
        """
        if self._closed:
            raise PoolUnavailable("this fleet session is closed", "open a new FleetSession")
        if self._started is None:
            self._started = start_pool_actors(self._dispatcher)
        return self._started

    def run_batch(
        self,
        items: Iterable[PreparedJob | JobProblem],
        *,
        batch_id: str | None = None,
        max_in_flight: int | None = None,
    ) -> Batch:
        """A batch on this session's actors (as ``batch.run_batch`` takes it); nothing is sent
        before its first ``next()``.

        Raises:
            PoolUnavailable: the session is closed, a batch of it was cancelled, or the previous
                batch still has reports to give.
        """
        started = self.open()
        if started.cancelled:
            raise PoolUnavailable(
                "a batch of this fleet session was cancelled: its pool actors refuse every job",
                "close this session and open a new FleetSession",
            )
        if self._current is not None and not self._current.finished:
            raise PoolUnavailable(
                f"batch {self._current.batch_id} of this session has not finished",
                "iterate it to its end (or cancel it) before starting the next batch",
            )
        self._current = Batch(items, dispatcher=self._dispatcher, batch_id=batch_id, max_in_flight=max_in_flight,
                              started=started)
        return self._current

    def close(self) -> None:
        """Stop every actor (each closes its warm pools); idempotent."""
        self._closed = True
        if self._started is not None:
            stop_pool_actors(self._dispatcher, self._started)
