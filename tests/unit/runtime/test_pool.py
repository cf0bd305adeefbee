"""The warm pool's orchestration against the recording fake backend (no kernel). Its pure
decisions are in test_pool_decisions.py; the real process backend in
tests/integration/test_sandbox_pool.py."""

from __future__ import annotations

import threading

import pytest

from contain.boundary import Boundary
from contain.errors import PoolUnavailable, SandboxLost, SandboxStartError, UnknownBackend
from contain.runtime.attachments import Attachment
from contain.runtime.backend import BackendPlan, RecordingBackend, RecordingRunning, WarmStartCapable
from contain.runtime.pool import PoolSettings, SandboxPool
from contain.runtime.supervisor_channel import Exited
from fake_host import facts_as_user

FACTS = facts_as_user()
BOUNDARY = Boundary.model_validate({"hardening": {"cgroups": "off"}})
EXITED = Exited(status=0, utime_us=1, stime_us=1, maxrss_kb=100)
WAIT = 10.0  # the longest any test waits for the refill thread; never reached when the pool works


# -- orchestration against the recording backend ----------------------------------------------------


class ScriptedBackend(RecordingBackend):
    """The recording backend, with one scripted outcome per start (an error, or None for success)
    and an optional gate each start waits on."""

    def __init__(self, *, wakeup_fd, start_errors=(), gate: threading.Event | None = None, **kwargs):
        super().__init__(wakeup_fd=wakeup_fd, **kwargs)
        self.start_errors = list(start_errors)
        self.gate = gate
        self.entered = threading.Event()
        self.handles: list[RecordingRunning] = []

    def start(self, plan: BackendPlan) -> RecordingRunning:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT)
        self.plans.append(plan)
        self.calls.append(("start",))
        if self.start_errors:
            error = self.start_errors.pop(0)
            if error is not None:
                raise error
        handle = RecordingRunning(self, cgroup=plan.cgroup)
        self.handles.append(handle)
        return handle


def calls_named(backend, name):
    return [call for call in backend.calls if call[0] == name]


def test_a_pool_starts_size_sandboxes_before_any_acquire_and_replaces_each_one_handed_out(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup, replies=[EXITED])
    with SandboxPool(BOUNDARY, backend=backend, size=2, facts=FACTS) as pool:
        assert pool.wait_ready(timeout_s=WAIT)
        assert len(calls_named(backend, "start")) == 2 and calls_named(backend, "spawn") == []
        with pool.acquire(timeout_s=WAIT) as sandbox:
            result = sandbox.run(["/bin/true"])
            assert (result.exit_code, result.backend) == (0, "process")
        assert pool.wait_ready(timeout_s=WAIT)
        stats = pool.stats()
        assert (stats.ready, stats.handed_out, stats.started, stats.failed) == (2, 0, 3, 0)
    assert len(calls_named(backend, "close")) == 3  # the one used and the two idle ones


def test_a_sandbox_is_never_handed_out_twice_each_task_gets_its_own(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)
    with SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS) as pool:
        seen = []
        for _ in range(4):
            with pool.acquire(timeout_s=WAIT) as sandbox:
                seen.append((sandbox, sandbox._handle))
        assert len({id(s) for s, _ in seen}) == 4
        assert len({id(h) for _, h in seen}) == 4
        assert all(s._closed for s, _ in seen)  # closed at the lease's exit, not returned
        assert [s for s, _ in seen if s in pool._ready] == []


def test_every_pooled_sandbox_is_planned_on_its_own_like_a_one_shot_sandbox(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)
    with SandboxPool(BOUNDARY, backend=backend, size=3, facts=FACTS) as pool:
        assert pool.wait_ready(timeout_s=WAIT)
    assert len(backend.plans) == 3
    assert len({id(plan) for plan in backend.plans}) == 3
    assert all(plan.boundary == backend.plans[0].boundary for plan in backend.plans)


def test_a_boundary_that_cannot_start_is_reported_on_acquire_with_its_cause_and_fix(wakeup):
    error = SandboxStartError("bwrap: No permission to create user namespace", "enable user namespaces")
    backend = ScriptedBackend(wakeup_fd=wakeup, start_errors=[error] * 100)
    with SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS) as pool:
        with pytest.raises(PoolUnavailable) as caught:
            pool.acquire(timeout_s=WAIT)  # raises at the first failure, not after WAIT
        assert "No permission to create user namespace" in caught.value.cause
        assert caught.value.fix == "enable user namespaces"
        assert caught.value.__cause__ is error
        assert caught.value.exit_code == 125
        stats = pool.stats()
        assert stats.last_error is error and stats.failed >= 1 and stats.ready == 0


def test_a_failed_start_is_retried_after_the_backoff_and_the_next_success_is_handed_out(wakeup):
    error = SandboxStartError("a transient failure", "retry")
    backend = ScriptedBackend(wakeup_fd=wakeup, start_errors=[error, error, None])
    settings = PoolSettings(size=1, backoff_base_s=0.001, backoff_max_s=0.002, surface_after_failures=3)
    with SandboxPool(BOUNDARY, backend=backend, settings=settings, facts=FACTS) as pool:
        with pool.acquire(timeout_s=WAIT) as sandbox:
            assert sandbox.supervisor_pid == 4242
        stats = pool.stats()
        assert (stats.failed, stats.failures) == (2, 0)  # a success resets the streak


def test_a_foreign_exception_in_a_start_is_recorded_as_a_start_failure_not_a_dead_thread(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup, start_errors=[RuntimeError("backend bug")] * 100)
    with SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS) as pool:
        with pytest.raises(PoolUnavailable, match="backend bug"):
            pool.acquire(timeout_s=WAIT)
        assert pool._thread.is_alive()  # it keeps retrying with backoff


def test_acquire_times_out_with_the_pools_state_when_nothing_became_ready(wakeup):
    gate = threading.Event()
    backend = ScriptedBackend(wakeup_fd=wakeup, gate=gate)
    pool = SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS)
    try:
        assert backend.entered.wait(WAIT)
        with pytest.raises(PoolUnavailable, match=r"no process sandbox was ready within 0s .*one is starting"):
            pool.acquire(timeout_s=0)
    finally:
        gate.set()
        pool.close()


def test_close_while_a_start_is_in_progress_closes_that_sandbox_too(wakeup):
    gate = threading.Event()
    backend = ScriptedBackend(wakeup_fd=wakeup, gate=gate)
    pool = SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS)
    assert backend.entered.wait(WAIT)
    closer = threading.Thread(target=pool.close)
    closer.start()
    with pool._cond:
        assert pool._cond.wait_for(lambda: pool._closed, WAIT)
    gate.set()  # the start in progress now finishes, after close began
    closer.join(WAIT)
    assert not closer.is_alive() and not pool._thread.is_alive()
    assert [call[0] for call in backend.calls] == ["start", "close"]
    assert pool.stats().ready == 0
    with pytest.raises(PoolUnavailable, match="closed"):
        pool.acquire(timeout_s=WAIT)


def test_close_kills_a_handed_out_sandbox_at_once_then_closes_it(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)
    pool = SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS)
    lease = pool.acquire(timeout_s=WAIT)
    handed = backend.handles[0]
    pool.close()
    handle_calls = [call[0] for call in backend.calls if call[0] in ("destroy", "close")]
    assert handle_calls[0] == "destroy"  # killed before anything else was closed
    assert handle_calls.count("close") == len(backend.handles)  # idle and in-flight ones too
    assert lease.sandbox._closed and pool.stats().handed_out == 0
    with pytest.raises(SandboxLost):
        lease.sandbox.run(["/bin/true"])
    lease.close()  # the task's own exit afterwards is harmless
    assert handed is backend.handles[0]


def test_a_closed_lease_is_not_killed_again_by_the_pools_close(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)
    pool = SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS)
    with pool.acquire(timeout_s=WAIT):
        pass
    pool.close()
    assert calls_named(backend, "destroy") == []


def test_an_unknown_backend_is_refused_at_once_before_any_thread_starts():
    before = threading.active_count()
    with pytest.raises(UnknownBackend, match="backend 'no-such-backend' is unknown"):
        SandboxPool(BOUNDARY, backend="no-such-backend", size=1, facts=FACTS)
    assert threading.active_count() == before


# -- the warm-start capability ----------------------------------------------------------------------


class FakeWarmStart:
    def __init__(self, backend):
        self.backend = backend
        self.plans: list[BackendPlan] = []
        self.closed = 0

    def start(self, plan):
        self.plans.append(plan)
        self.backend.calls.append(("warm-start",))
        return RecordingRunning(self.backend, cgroup=plan.cgroup)

    def close(self):
        self.closed += 1
        self.backend.calls.append(("warm-close",))


class WarmRecordingBackend(RecordingBackend):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.opened: list[FakeWarmStart] = []

    def open_warm_start(self):
        warm = FakeWarmStart(self)
        self.opened.append(warm)
        return warm


def test_a_backend_with_a_warm_start_starts_every_pooled_sandbox_through_it_with_its_own_plan(wakeup):
    backend = WarmRecordingBackend(wakeup_fd=wakeup, replies=[EXITED], name="process")
    assert isinstance(backend, WarmStartCapable)
    assert not isinstance(RecordingBackend(wakeup_fd=wakeup), WarmStartCapable)
    with SandboxPool(BOUNDARY, backend=backend, size=2, facts=FACTS) as pool:
        assert pool.wait_ready(timeout_s=WAIT)
        with pool.acquire(timeout_s=WAIT) as sandbox:
            assert sandbox.run(["/bin/true"]).backend == "process"
        assert pool.wait_ready(timeout_s=WAIT)
    (warm,) = backend.opened  # opened once per pool
    assert len(warm.plans) == 3 and len({id(p) for p in warm.plans}) == 3
    assert calls_named(backend, "start") == []  # never the cold start
    assert warm.closed == 1
    assert backend.calls[-1] == ("warm-close",)  # after every sandbox it started was closed


def test_a_warm_starts_layer_lines_reach_the_pooled_sandboxs_layers(wakeup):
    backend = WarmRecordingBackend(wakeup_fd=wakeup, replies=[EXITED], name="process")
    original_open = backend.open_warm_start

    def open_with_report():
        warm = original_open()
        warm.layer_report = {"warm start": "restored from template abc (cached)"}
        return warm

    backend.open_warm_start = open_with_report
    with SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS) as pool, pool.acquire(timeout_s=WAIT) as sandbox:
        assert sandbox.layers["warm start"] == "restored from template abc (cached)"
        assert sandbox.run(["/bin/true"]).layers["warm start"] == "restored from template abc (cached)"


def test_the_refill_thread_outlives_every_sandbox_it_started_until_close_closed_them(wakeup):
    """A process sandbox dies with the thread that started it (bwrap --die-with-parent follows the
    parent thread): the pool's thread must still run while close() closes each sandbox."""
    alive_at_close: list[bool] = []
    holder: list[SandboxPool] = []

    class Watching(ScriptedBackend):
        def start(self, plan):
            handle = super().start(plan)
            plain_close = handle.close

            def close():
                alive_at_close.append(holder[0]._thread.is_alive())
                plain_close()

            handle.close = close
            return handle

    backend = Watching(wakeup_fd=wakeup)
    pool = SandboxPool(BOUNDARY, backend=backend, size=2, facts=FACTS)
    holder.append(pool)
    assert pool.wait_ready(timeout_s=WAIT)
    lease = pool.acquire(timeout_s=WAIT)
    assert pool.wait_ready(timeout_s=WAIT)
    pool.close()
    assert lease.sandbox._closed
    assert alive_at_close == [True, True, True]
    assert not pool._thread.is_alive()


def test_many_threads_acquiring_at_once_each_get_a_sandbox_of_their_own(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup, replies=[EXITED] * 16)
    got: list[object] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def task() -> None:
        try:
            with pool.acquire(timeout_s=WAIT) as sandbox:
                sandbox.run(["/bin/true"])
                with lock:
                    got.append(sandbox)
        except BaseException as exc:  # reported below, with the thread's failure
            errors.append(exc)

    with SandboxPool(BOUNDARY, backend=backend, size=2, facts=FACTS) as pool:
        threads = [threading.Thread(target=task) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert errors == [] and len(got) == 16 and len({id(s) for s in got}) == 16
        assert pool.stats().handed_out == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_ready_sandbox_past_max_idle_is_closed_and_replaced_never_handed_out(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)
    clock = FakeClock()
    settings = PoolSettings(size=2, max_idle_s=600.0)
    with SandboxPool(BOUNDARY, backend=backend, settings=settings, facts=FACTS, clock=clock) as pool:
        assert pool.wait_ready(timeout_s=WAIT)
        old = [sandbox for _, sandbox in pool._ready]
        clock.now = 600.0
        with pool.acquire(timeout_s=WAIT) as sandbox:
            assert all(sandbox is not stale for stale in old)
            assert all(stale._closed for stale in old)  # closed by the refill thread, unused
        stats = pool.stats()
        assert stats.retired == 2 and stats.started >= 3
    assert calls_named(backend, "spawn") == []


def test_attachments_for_each_are_made_once_per_pooled_sandbox_and_added_to_the_shared_ones(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)
    minted = iter(range(100))
    shared = Attachment("/.contain/shared", data=b"same")

    def token() -> list[Attachment]:
        return [Attachment("/.contain/token", data=f"token-{next(minted)}".encode())]

    with SandboxPool(
        BOUNDARY, backend=backend, size=2, facts=FACTS, attachments=[shared], attachments_for_each=token
    ) as pool:
        assert pool.wait_ready(timeout_s=WAIT)
    assert [[a.data for a in plan.attachments] for plan in backend.plans] == [
        [b"same", b"token-0"],
        [b"same", b"token-1"],
    ]


def test_a_failing_attachment_factory_is_a_failed_start_reported_on_acquire(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)

    def broken() -> list[Attachment]:
        raise SandboxStartError("the broker refused to mint a token", "start the broker")

    with (
        SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS, attachments_for_each=broken) as pool,
        pytest.raises(PoolUnavailable, match="the broker refused to mint a token"),
    ):
        pool.acquire(timeout_s=WAIT)
    assert backend.plans == []


# -- acquire_or_start: a cold start in the caller's thread when nothing is ready ----------------------


class RefillGatedBackend(ScriptedBackend):
    """Starts made by the refill thread wait on the gate; starts in any other thread do not."""

    def start(self, plan: BackendPlan) -> RecordingRunning:
        if threading.current_thread().name != "contain-pool-refill":
            gate, self.gate = self.gate, None
            try:
                return super().start(plan)
            finally:
                self.gate = gate
        return super().start(plan)


def test_acquire_or_start_starts_a_sandbox_in_the_callers_thread_while_the_refill_is_busy(wakeup):
    gate = threading.Event()
    backend = RefillGatedBackend(wakeup_fd=wakeup, gate=gate)
    pool = SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS)
    try:
        assert backend.entered.wait(WAIT)  # the refill thread is stuck in its first start
        lease, warm = pool.acquire_or_start()
        assert warm is False and lease.sandbox.supervisor_pid == 4242
        stats = pool.stats()
        assert (stats.cold_started, stats.started, stats.handed_out, stats.ready) == (1, 0, 1, 0)
        lease.close()
        gate.set()
        assert pool.wait_ready(timeout_s=WAIT)
        second, warm = pool.acquire_or_start()
        assert warm is True and second.sandbox is not lease.sandbox
        second.close()
    finally:
        gate.set()
        pool.close()
    assert pool.stats().cold_started == 1


def test_a_cold_start_that_fails_raises_its_own_error_and_is_no_refill_failure(wakeup):
    gate = threading.Event()
    error = SandboxStartError("bwrap: setting up uid map: Permission denied", "check the host")
    backend = RefillGatedBackend(wakeup_fd=wakeup, gate=gate, start_errors=[error])
    pool = SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS)
    try:
        assert backend.entered.wait(WAIT)
        with pytest.raises(SandboxStartError) as caught:
            pool.acquire_or_start()
        assert caught.value is error
        stats = pool.stats()
        assert (stats.failed, stats.failures, stats.handed_out, stats.cold_started) == (0, 0, 0, 0)
        assert calls_named(backend, "close") == []  # its start raised before anything ran
    finally:
        gate.set()
        pool.close()


def test_close_waits_for_a_cold_start_in_progress_and_that_sandbox_is_closed_not_handed_out(wakeup):
    cold_gate = threading.Event()
    backend = ScriptedBackend(wakeup_fd=wakeup)
    pool = SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS)
    assert pool.wait_ready(timeout_s=WAIT)
    backend.gate = cold_gate  # every later start waits: the refill's and the cold one's
    first, warm = pool.acquire_or_start()  # takes the ready one
    assert warm is True
    outcome: list[object] = []

    def cold() -> None:
        try:
            outcome.append(pool.acquire_or_start())
        except PoolUnavailable as exc:
            outcome.append(exc)

    starter = threading.Thread(target=cold)
    starter.start()
    with pool._cond:
        assert pool._cond.wait_for(lambda: pool._cold_starting == 1, WAIT)
    closer = threading.Thread(target=pool.close)
    closer.start()
    with pool._cond:
        assert pool._cond.wait_for(lambda: pool._closed, WAIT)
    closer.join(0.05)
    assert closer.is_alive(), "close() returned while a cold start was in progress"
    cold_gate.set()
    closer.join(WAIT)
    starter.join(WAIT)
    assert not closer.is_alive() and not starter.is_alive()
    assert isinstance(outcome[0], PoolUnavailable) and "closed" in outcome[0].cause
    assert len(calls_named(backend, "close")) == len(backend.handles)  # every started sandbox closed
    assert first.sandbox._closed and pool.stats().handed_out == 0


def test_acquire_or_start_on_a_closed_pool_starts_nothing(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)
    pool = SandboxPool(BOUNDARY, backend=backend, size=1, facts=FACTS)
    pool.close()
    starts = len(calls_named(backend, "start"))
    with pytest.raises(PoolUnavailable, match="closed"):
        pool.acquire_or_start()
    assert len(calls_named(backend, "start")) == starts


def test_close_returns_how_many_idle_sandboxes_it_closed(wakeup):
    backend = ScriptedBackend(wakeup_fd=wakeup)
    pool = SandboxPool(BOUNDARY, backend=backend, size=2, facts=FACTS)
    assert pool.wait_ready(timeout_s=WAIT)
    gate = threading.Event()
    backend.gate = gate  # the replacement's start waits, so exactly one is idle at close
    lease = pool.acquire(timeout_s=WAIT)
    assert pool.stats().ready == 1
    closer = threading.Thread(target=lambda: outcome.append(pool.close()))
    outcome: list[int] = []
    closer.start()
    with pool._cond:
        assert pool._cond.wait_for(lambda: pool._closed, WAIT)
    gate.set()
    closer.join(WAIT)
    assert outcome == [1] and lease.sandbox._closed
    assert pool.close() == 0  # idempotent: nothing left
