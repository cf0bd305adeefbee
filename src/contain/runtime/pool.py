"""A warm pool: sandboxes of one boundary started before any task needs them.

``SandboxPool(boundary, backend=..., size=N)`` keeps up to N sandboxes *started* (``Sandbox.start()``
done: host ids leased, cgroup created, the backend's init ready, egress listening) and hands one
out per task with ``acquire(timeout_s)``. What a pool guarantees:

- **One task, one sandbox.** ``acquire`` returns a ``Lease`` whose exit closes the sandbox
  (export, teardown, audit: exactly ``Sandbox.close()``). A sandbox never goes back to the pool,
  so nothing a task wrote (scratch, /tmp, processes, cgroup counters, egress logs) can be seen by
  another task.
- **A pooled sandbox is a fresh sandbox.** Each one is ``Sandbox(boundary, backend=spec)`` then
  ``start()``, the same calls a one-shot sandbox makes, so it gets its own leased host uid, its
  own cgroup and namespaces (hostname in its own UTS namespace, pids, mounts, network) and its
  own disk-budget tmpfs. A backend may offer a faster warm start (``backend.WarmStartCapable``,
  the microVM's snapshot restore); the contract there is the same: a fresh plan per sandbox and
  nothing of another sandbox.
- **Refill in the background, bounded.** One thread starts one sandbox at a time, only while
  fewer than ``size`` are ready. A failed start is recorded (its ``ContainError`` with cause and
  fix) and retried after an exponential backoff (``backoff_delay_s``); while the last attempts
  failed and nothing is ready, ``acquire`` raises ``PoolUnavailable`` naming that cause at once,
  instead of waiting out its timeout. Every wait has a deadline: nothing hangs silently.
- **close() leaves nothing.** It kills every handed-out sandbox's processes at once
  (``Sandbox.destroy``), closes every idle and handed-out sandbox, and then lets the refill thread
  end (it closes a sandbox it was starting) and joins it: no process, cgroup, mount, leased uid or
  staged bind is left. The thread ends last because a process sandbox dies with the thread that
  started it (bubblewrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which follows the
  parent *thread*): a sandbox killed that way would skip its teardown.

What it does NOT do:

- It does not re-check the boundary or the host at ``acquire``: a pooled sandbox was planned from
  the boundary, the host facts and the bound host paths as they were when *it* started (at most
  ``max_idle_s`` earlier: an older one is closed unused and replaced), not as they are when the
  task runs. Build a new pool when the boundary changes.
- It does not health-check idle sandboxes: one whose init died while idle (killed from outside,
  the host's OOM killer) is handed out and fails its first call with ``SandboxLost``.
- It does not queue a caller that cannot wait: ``acquire_or_start()`` starts a sandbox in the
  caller's own thread when none is ready (the same fresh sandbox, handed out as a lease of the
  pool). That sandbox is tied to the caller's thread as the refill's are to the refill thread
  (``--die-with-parent``): the caller's thread must outlive its lease.
- It does not cancel a start in progress: ``close()`` waits for the refill thread's current
  ``start()`` (and any ``acquire_or_start`` cold start) to end (bounded by the backend's own
  start timeouts) and then closes that sandbox.
- It does not wait for a handed-out task to finish before killing it; after the kill, ``close()``
  waits for that task's current ``Sandbox`` call to return before removing its host traces.
- It cannot clean up after a SIGKILL of its own process. A pool that was never closed is closed
  at interpreter exit (``atexit``); a process killed outright leaves what a killed one-shot
  sandbox leaves (bubblewrap dies with it; the cgroup is swept by a later contain).
- Idle sandboxes hold their resources (a leased uid, a cgroup, their disk-budget tmpfs, for a
  microVM its guest RAM) for as long as they wait.
- It does not isolate tasks from each other through host directories the boundary binds in: a
  write bind is shared by every sandbox of the pool, as by one-shot sandboxes of that boundary.
- It does not make a start cheaper, only earlier: the refill uses the same CPUs.

The decisions are pure functions of a ``PoolState`` and a clock, in pool_decisions.py, tested
without threads; ``SandboxPool`` here is the thin part that holds the lock, the condition and the
thread.
"""

from __future__ import annotations

import atexit
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING

from contain._log import LazyLogger
from contain.boundary.plain import PlainBoundary
from contain.errors import ContainError, PoolUnavailable, SandboxStartError
from contain.host.facts import HostFacts
from contain.runtime.attachments import Attachment
from contain.runtime.backend import RunningSandbox, SandboxBackend, WarmStart, WarmStartCapable
from contain.runtime.pool_decisions import (
    AcquireAction,
    PoolSettings,
    PoolState,
    RefillAction,
    backoff_delay_s,
    count_stale,
    decide_acquire,
    decide_refill,
)
from contain.runtime.sandbox import Sandbox

if TYPE_CHECKING:
    from contain.boundary.model import Boundary
    from contain.runtime.backend import BackendPlan

__all__ = ["Lease", "PoolSettings", "PoolStats", "SandboxPool", "WarmBackend"]

log = LazyLogger(__name__)


# -- the warm-start adapter -------------------------------------------------------------------------


class WarmBackend:
    """A ``SandboxBackend`` whose ``start`` goes through a backend's ``WarmStart``.

    ``Sandbox`` plans as always (fresh ids, cgroup, path facts) and hands the plan here; the warm
    start turns it into a running sandbox its own faster way. Everything else is the backend's.
    """

    def __init__(self, backend: SandboxBackend, warm: WarmStart) -> None:
        self.backend = backend
        self.warm = warm
        self.name = backend.name

    def cgroup_joined_at_exec(self, facts: HostFacts) -> bool:
        return self.backend.cgroup_joined_at_exec(facts)

    def start(self, plan: BackendPlan) -> RunningSandbox:
        return self.warm.start(plan)

    @property
    def layer_report(self) -> dict[str, str]:
        """Lines the warm start knows only once it started a sandbox (a restored microVM's), which
        ``Sandbox.start`` adds to that sandbox's layers; starts run one at a time (the refill thread)."""
        report = getattr(self.warm, "layer_report", None)
        return dict(report) if isinstance(report, dict) else {}


# -- the thin part: the pool itself ------------------------------------------------------------------


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of a pool, for callers and the bench.

    Attributes:
        ready: started sandboxes waiting.
        handed_out: leases not yet closed.
        starting: whether a start is in progress.
        started: successful starts so far.
        failures: failed starts in a row.
        failed: failed starts so far.
        last_error: the last start failure (cause and fix), None when there was none.
        retired: ready sandboxes closed unused because they passed ``max_idle_s``.
        cold_started: sandboxes ``acquire_or_start`` started in its caller's thread (none was ready).
    """

    ready: int
    handed_out: int
    starting: bool
    started: int
    failures: int
    failed: int
    last_error: ContainError | None
    retired: int = 0
    cold_started: int = 0


class Lease:
    """One sandbox handed out by a pool; closing the lease closes the sandbox (never returned).

    Use as a context manager (``with pool.acquire(timeout_s=5) as sandbox: ...``) or call
    ``close()``. Thread-safe and idempotent.
    """

    def __init__(self, pool: SandboxPool, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._pool = pool
        self._lock = threading.Lock()
        self._closing = False

    def __enter__(self) -> Sandbox:
        return self.sandbox

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def destroy(self) -> None:
        """Kill the sandbox's processes now unless its close has begun (then close ends them)."""
        with self._lock:
            if not self._closing:
                self.sandbox.destroy()

    def close(self) -> None:
        """Close the sandbox (``Sandbox.close``: export, teardown, audit) and forget it."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        try:
            self.sandbox.close()
        finally:
            self._pool._forget(self)


class SandboxPool:
    """Keeps ``size`` started sandboxes of one boundary ready; see the module docstring.

    Args:
        boundary: what every sandbox of the pool may touch (validated once, here).
        backend: a backend spec string (as ``Sandbox`` takes; default the boundary's) or a
            ``SandboxBackend`` object shared by every sandbox of the pool (tests pass the
            recording fake).
        size: sandboxes kept ready.
        settings: refill and backoff settings (``size`` wins over ``settings.size`` when both are given).
        facts: host facts for every sandbox (detected per start when omitted).
        host_environ, attachments, extra_env: as ``Sandbox`` takes them, the same for every sandbox.
        attachments_for_each: called once per sandbox, in the refill thread, for attachments of
            its own (a credential minted per sandbox), added to ``attachments``; an exception
            there is a failed start.
        clock: monotonic seconds; the decisions read it (tests inject one).

    Raises:
        UnknownBackend: the backend spec names no known backend (at once, before any thread starts).
        UnsupportedHost: the boundary declares no runtime (``runtime.backend: none``), at once.
    """

    def __init__(
        self,
        boundary: Boundary | PlainBoundary | None = None,
        *,
        backend: str | SandboxBackend | None = None,
        size: int | None = None,
        settings: PoolSettings | None = None,
        facts: HostFacts | None = None,
        host_environ: Mapping[str, str] | None = None,
        attachments: Sequence[Attachment] = (),
        extra_env: Mapping[str, str] | None = None,
        attachments_for_each: Callable[[], Sequence[Attachment]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if settings is None:
            settings = PoolSettings(size=size if size is not None else 1)
        elif size is not None and size != settings.size:
            settings = replace(settings, size=size)
        self.settings = settings
        self._clock = clock
        self._facts = facts
        self._host_environ = host_environ
        self._attachments = tuple(attachments)
        self._extra_env = dict(extra_env) if extra_env is not None else None
        self._attachments_for_each = attachments_for_each
        # Validates the boundary, the backend spec and the attachments now, in the caller's thread.
        first = self._new_sandbox(boundary, backend, pooled=False)
        self.boundary = first.boundary
        self.backend = first.backend
        self._warm: WarmStart | None = None
        self._backend_for_each: str | SandboxBackend | None = backend
        if isinstance(first.sandbox_backend, WarmStartCapable):
            self._warm = first.sandbox_backend.open_warm_start()
            self._backend_for_each = WarmBackend(first.sandbox_backend, self._warm)
        # else: what a one-shot sandbox does: a spec gives each sandbox a fresh backend object
        self._cond = threading.Condition()
        self._ready: deque[tuple[float, Sandbox]] = deque()  # (started at, sandbox), oldest first
        self._retiring: list[Sandbox] = []  # stale, to be closed by the refill thread
        self._retired = 0
        self._leases: set[Lease] = set()
        self._starting = False
        self._failures = 0
        self._failed = 0
        self._started = 0
        self._retry_at = 0.0
        self._last_error: ContainError | None = None
        self._cold_starting = 0  # acquire_or_start calls starting a sandbox in their own thread
        self._cold_started = 0
        self._closed = False
        self._drained = False  # close() closed every sandbox; the refill thread may end
        self._thread = threading.Thread(target=self._refill_loop, name="contain-pool-refill", daemon=True)
        self._thread.start()
        # A pool nobody closed is closed at interpreter exit, while its (daemon) thread still runs:
        # otherwise that thread's death at exit would kill its sandboxes without their teardown.
        atexit.register(self.close)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _new_sandbox(
        self, boundary: Boundary | PlainBoundary | None, backend: str | SandboxBackend | None, *, pooled: bool
    ) -> Sandbox:
        attachments = self._attachments
        if pooled and self._attachments_for_each is not None:
            attachments += tuple(self._attachments_for_each())
        return Sandbox(
            boundary,
            backend=backend,
            facts=self._facts,
            host_environ=self._host_environ,
            attachments=attachments,
            extra_env=self._extra_env,
        )

    # -- state under the lock -----------------------------------------------------------------------

    def _state(self) -> PoolState:
        retire_at = self._ready[0][0] + self.settings.max_idle_s if self._ready else math.inf
        return PoolState(len(self._ready), self._starting, self._failures, self._retry_at, self._closed, retire_at)

    def _drop_stale_locked(self) -> None:
        """Move ready sandboxes past ``max_idle_s`` to ``_retiring`` (the refill thread closes them)."""
        stale = count_stale([born for born, _ in self._ready], self._clock(), self.settings)
        for _ in range(stale):
            self._retiring.append(self._ready.popleft()[1])
        if stale:
            self._retired += stale
            self._cond.notify_all()

    def stats(self) -> PoolStats:
        """A snapshot of the pool's counters."""
        with self._cond:
            return PoolStats(
                ready=len(self._ready),
                handed_out=len(self._leases),
                starting=self._starting,
                started=self._started,
                failures=self._failures,
                failed=self._failed,
                last_error=self._last_error,
                retired=self._retired,
                cold_started=self._cold_started,
            )

    # -- the refill thread --------------------------------------------------------------------------

    def _refill_loop(self) -> None:
        while True:
            with self._cond:
                self._drop_stale_locked()
                decision = decide_refill(self._state(), self.settings, self._clock())
                while decision.action is RefillAction.WAIT and not self._retiring:
                    self._cond.wait(timeout=decision.wait_s)
                    self._drop_stale_locked()
                    decision = decide_refill(self._state(), self.settings, self._clock())
                retiring, self._retiring = self._retiring, []
                if not retiring:
                    if decision.action is RefillAction.STOP:
                        # Only once close() closed every sandbox this thread started (see close()).
                        self._cond.wait_for(lambda: self._drained)
                        return
                    self._starting = True
            if retiring:
                for stale in retiring:  # closed by the thread that started them, outside the lock
                    self._close_quietly(stale)
                continue
            sandbox, error = self._start_one()
            leftover: Sandbox | None = None
            with self._cond:
                self._starting = False
                if error is not None:
                    self._failures += 1
                    self._failed += 1
                    self._last_error = error
                    self._retry_at = self._clock() + backoff_delay_s(self._failures, self.settings)
                    leftover = sandbox
                else:
                    self._failures = 0
                    self._started += 1
                    if self._closed:
                        leftover = sandbox
                    elif sandbox is not None:
                        self._ready.append((self._clock(), sandbox))
                self._cond.notify_all()
            if leftover is not None:
                self._close_quietly(leftover)

    def _start_one(self) -> tuple[Sandbox | None, ContainError | None]:
        """Create and start one sandbox; a failure is returned (and logged), never raised."""
        sandbox: Sandbox | None = None
        try:
            sandbox = self._new_sandbox(self.boundary, self._backend_for_each, pooled=True)
            sandbox.start()
        except ContainError as exc:
            log.debug("pool: a sandbox failed to start: %s", exc)  # acquire reports it, with its cause
            return sandbox, exc
        except Exception as exc:  # fail closed: recorded as a start failure with its cause
            log.debug("pool: a sandbox failed to start: %r", exc)
            wrapped = SandboxStartError(f"the sandbox failed to start: {exc!r}", "run `contain doctor`")
            wrapped.__cause__ = exc
            return sandbox, wrapped
        return sandbox, None

    @staticmethod
    def _close_quietly(sandbox: Sandbox) -> None:
        try:
            sandbox.close()
        except ContainError as exc:  # SandboxLost: a process survived; said loudly, never hidden
            log.error("pool: closing a sandbox left something behind: %s", exc)

    # -- handing out --------------------------------------------------------------------------------

    def wait_ready(self, count: int | None = None, *, timeout_s: float) -> bool:
        """Wait until ``count`` (default: ``size``) sandboxes are ready; False when the timeout
        passed, the pool closed, or its starts are failing first (see ``stats().last_error``)."""
        want = self.settings.size if count is None else min(count, self.settings.size)
        deadline = self._clock() + timeout_s
        with self._cond:
            while len(self._ready) < want:
                state = self._state()
                now = self._clock()
                if state.closed or now >= deadline:
                    return False
                if state.failures >= self.settings.surface_after_failures and not state.starting:
                    return False
                self._cond.wait(timeout=deadline - now)
            return True

    def acquire(self, timeout_s: float = 30.0) -> Lease:
        """Hand out one started sandbox; the refill thread starts its replacement.

        Args:
            timeout_s: the longest wait for a ready sandbox.

        Returns:
            A ``Lease``: use it as a context manager; its exit closes the sandbox.

        Raises:
            PoolUnavailable: the pool is closed, its last starts failed (the cause and fix are the
                failed start's), or no sandbox was ready within ``timeout_s``.
        """
        deadline = self._clock() + timeout_s
        with self._cond:
            while True:
                self._drop_stale_locked()
                decision = decide_acquire(self._state(), self.settings, self._clock(), deadline)
                if decision.action is AcquireAction.TAKE:
                    lease = Lease(self, self._ready.popleft()[1])
                    self._leases.add(lease)
                    self._cond.notify_all()  # the refill thread replaces it
                    return lease
                if decision.action is AcquireAction.WAIT:
                    self._cond.wait(timeout=decision.wait_s)
                    continue
                raise self._unavailable(decision.action, timeout_s)

    def acquire_or_start(self) -> tuple[Lease, bool]:
        """Hand out a ready sandbox, or start one now in the caller's thread when none is ready.

        For callers that must not queue behind the one refill thread (the fleet's node, whose
        first jobs arrive while the pool fills): the cold sandbox is built and started exactly as
        a pooled one (``Sandbox(boundary, ...)`` then ``start()``, its own attachments), in
        parallel with the refill, and handed out as a lease of this pool, so ``close()`` kills and
        closes it like any other; ``close()`` also waits for a cold start in progress, whose
        thread then closes the sandbox it started.

        Returns:
            The ``Lease`` and whether its sandbox was ready before the call (warm).

        Raises:
            PoolUnavailable: the pool is closed (before or during the cold start).
            ContainError: the cold start failed (its own error, with cause and fix:
                ``SandboxStartError``, ``UnsupportedHost`` ...); it is not counted as a refill failure.
        """
        with self._cond:
            if self._closed:
                raise self._unavailable(AcquireAction.FAIL_CLOSED, 0.0)
            self._drop_stale_locked()
            if self._ready:
                lease = Lease(self, self._ready.popleft()[1])
                self._leases.add(lease)
                self._cond.notify_all()  # the refill thread replaces it
                return lease, True
            self._cold_starting += 1
        sandbox: Sandbox | None = None
        try:
            sandbox = self._new_sandbox(self.boundary, self._backend_for_each, pooled=True)
            sandbox.start()
            with self._cond:
                if not self._closed:
                    lease = Lease(self, sandbox)
                    self._leases.add(lease)
                    self._cold_started += 1
                    sandbox = None
                    return lease, False
            raise self._unavailable(AcquireAction.FAIL_CLOSED, 0.0)
        finally:
            if sandbox is not None:  # failed to start, or the pool closed meanwhile: nobody's now
                self._close_quietly(sandbox)
            with self._cond:
                self._cold_starting -= 1
                self._cond.notify_all()

    def _unavailable(self, action: AcquireAction, timeout_s: float) -> PoolUnavailable:
        if action is AcquireAction.FAIL_CLOSED:
            return PoolUnavailable("the sandbox pool is closed", "acquire from a pool that is open")
        error = self._last_error
        if action is AcquireAction.FAIL_STARTS and error is not None:
            failed = PoolUnavailable(
                f"the pool cannot start a {self.backend} sandbox ({self._failures} failed start(s) in a row): "
                f"{error.cause}",
                error.fix or "run `contain doctor` to see what this host lacks",
            )
            failed.__cause__ = error
            return failed
        starting = "one is starting" if self._starting else "none is starting"
        return PoolUnavailable(
            f"no {self.backend} sandbox was ready within {timeout_s:g}s "
            f"(size {self.settings.size}, {len(self._leases)} handed out, {starting})",
            "raise acquire's timeout_s or the pool's size, or close leases sooner",
        )

    def _forget(self, lease: Lease) -> None:
        with self._cond:
            self._leases.discard(lease)
            self._cond.notify_all()

    # -- closing ------------------------------------------------------------------------------------

    def close(self) -> int:
        """Kill and close every sandbox of the pool, idle and handed out, and stop refilling.

        Order: mark closed (no new start, no acquire); kill every handed-out sandbox's processes;
        close the idle sandboxes; close the handed-out ones (each waits for its task's current
        call to return); let the refill thread end (it closes a sandbox it was starting) and join
        it; wait for cold starts of ``acquire_or_start`` in progress (each closes what it started);
        close the warm start. The thread ends last on purpose: bubblewrap's
        ``--die-with-parent`` ties each sandbox to the *thread* that started it
        (``PR_SET_PDEATHSIG`` fires when that thread exits), and a sandbox killed that way skips
        its teardown. Idempotent; a second call waits for nothing.

        Returns:
            How many idle sandboxes (started, never handed out) it closed.

        Raises:
            SandboxLost: a sandbox process survived its teardown (never expected; said loudly).
        """
        with self._cond:
            already = self._closed
            self._closed = True
            idle = [sandbox for _, sandbox in self._ready] + self._retiring
            self._ready.clear()
            self._retiring = []
            leases = list(self._leases)
            self._cond.notify_all()
        survivors: list[ContainError] = []
        try:
            for lease in leases:
                lease.destroy()
            for sandbox in idle:
                try:
                    sandbox.close()
                except ContainError as exc:
                    survivors.append(exc)
            for lease in leases:
                try:
                    lease.close()
                except ContainError as exc:
                    survivors.append(exc)
        finally:
            with self._cond:
                self._drained = True
                self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        with self._cond:
            self._cond.wait_for(lambda: self._cold_starting == 0)  # each is bounded by its start
        atexit.unregister(self.close)
        if self._warm is not None and not already:
            self._warm.close()
        if survivors:
            raise survivors[0]
        return len(idle)
