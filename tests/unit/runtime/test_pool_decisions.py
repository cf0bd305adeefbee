"""The warm pool's pure decisions: truth tables on an injected clock (no thread, no sandbox)."""

from __future__ import annotations

import math

import pytest

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

SETTINGS = PoolSettings(size=2)


def state(*, ready=0, starting=False, failures=0, retry_at=0.0, closed=False, retire_at=math.inf):
    return PoolState(
        ready=ready, starting=starting, failures=failures, retry_at=retry_at, closed=closed, retire_at=retire_at
    )


def test_backoff_doubles_from_the_base_per_failure_and_stops_at_the_cap():
    settings = PoolSettings(size=1, backoff_base_s=0.5, backoff_max_s=3.0)
    assert [backoff_delay_s(n, settings) for n in range(6)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff_delay_s(10_000, settings) == 3.0  # no overflow however long it keeps failing


@pytest.mark.parametrize(
    ("pool_state", "now", "action", "wait_s"),
    [
        (state(), 0.0, RefillAction.START, None),
        (state(ready=1), 0.0, RefillAction.START, None),
        (state(ready=2), 0.0, RefillAction.WAIT, None),  # full: sleep until an acquire wakes it
        (state(starting=True), 0.0, RefillAction.WAIT, None),  # one start at a time
        (state(failures=2, retry_at=5.0), 4.0, RefillAction.WAIT, 1.0),  # backing off
        (state(failures=2, retry_at=5.0), 5.0, RefillAction.START, None),  # backoff over
        (state(closed=True), 0.0, RefillAction.STOP, None),
        (state(closed=True, ready=0, failures=3, retry_at=9.0), 0.0, RefillAction.STOP, None),
        (state(ready=2, retire_at=604.0), 4.0, RefillAction.WAIT, 600.0),  # full: wake to retire the oldest
        (state(ready=1, failures=1, retry_at=5.0, retire_at=4.5), 4.0, RefillAction.WAIT, 0.5),
        (state(ready=1, failures=1, retry_at=5.0, retire_at=9.0), 4.0, RefillAction.WAIT, 1.0),
    ],
)
def test_the_refill_decision_starts_one_at_a_time_below_size_after_the_backoff(pool_state, now, action, wait_s):
    decision = decide_refill(pool_state, SETTINGS, now)
    assert (decision.action, decision.wait_s) == (action, wait_s)


@pytest.mark.parametrize(
    ("pool_state", "now", "action", "wait_s"),
    [
        (state(ready=1), 0.0, AcquireAction.TAKE, 0.0),
        (state(ready=1, failures=4), 0.0, AcquireAction.TAKE, 0.0),  # a ready one started fine
        (state(), 2.0, AcquireAction.WAIT, 8.0),
        (state(), 10.0, AcquireAction.FAIL_TIMEOUT, 0.0),
        (state(failures=1), 2.0, AcquireAction.FAIL_STARTS, 0.0),  # said at once, not waited out
        (state(failures=1, starting=True), 2.0, AcquireAction.WAIT, 8.0),  # a retry is running
        (state(closed=True, ready=1), 0.0, AcquireAction.FAIL_CLOSED, 0.0),
    ],
)
def test_the_acquire_decision_takes_waits_or_names_why_it_cannot(pool_state, now, action, wait_s):
    decision = decide_acquire(pool_state, SETTINGS, now, deadline=10.0)
    assert (decision.action, decision.wait_s) == (action, wait_s)


def test_acquire_waits_for_more_failures_when_told_to_surface_later():
    settings = PoolSettings(size=1, surface_after_failures=3)
    assert decide_acquire(state(failures=2), settings, 0.0, 1.0).action is AcquireAction.WAIT
    assert decide_acquire(state(failures=3), settings, 0.0, 1.0).action is AcquireAction.FAIL_STARTS


def test_only_ready_sandboxes_past_max_idle_are_stale_counting_from_the_oldest():
    settings = PoolSettings(size=3, max_idle_s=600.0)
    assert count_stale([], 1000.0, settings) == 0
    assert count_stale([0.0, 100.0, 500.0], 650.0, settings) == 1
    assert count_stale([0.0, 100.0, 500.0], 700.0, settings) == 2  # exactly max_idle_s old: stale
    assert count_stale([0.0, 100.0, 500.0], 599.0, settings) == 0


@pytest.mark.parametrize(
    "kwargs",
    [{"size": 1, "max_idle_s": 0}, {"size": 0}, {"size": 1, "backoff_base_s": 0.0}, {"size": 1, "backoff_base_s": 2, "backoff_max_s": 1},
     {"size": 1, "surface_after_failures": 0}],
)
def test_settings_refuse_a_pool_that_could_never_work(kwargs):
    with pytest.raises(ValueError):
        PoolSettings(**kwargs)
