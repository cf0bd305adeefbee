"""The warm pool's decisions as pure functions of its state and a clock (pool.py holds the thread).

``decide_refill``: start one sandbox now, wait (how long), or stop. ``decide_acquire``: take a
ready sandbox, wait, or fail with the reason (closed, the starts are failing, timeout).
``backoff_delay_s``: the wait after failed starts in a row. ``count_stale``: ready sandboxes past
``max_idle_s``, retired instead of handed out. Tested as truth tables on an injected clock
(tests/unit/runtime/test_pool_decisions.py); no lock, thread or sandbox here.

Does not decide what a sandbox may do (the boundary does) nor how one starts (the backend does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "AcquireAction",
    "AcquireDecision",
    "PoolSettings",
    "PoolState",
    "RefillAction",
    "RefillDecision",
    "backoff_delay_s",
    "count_stale",
    "decide_acquire",
    "decide_refill",
]


@dataclass(frozen=True)
class PoolSettings:
    """How a pool refills and when it gives up on an acquire.

    Attributes:
        size: sandboxes kept started and ready (1 or more).
        backoff_base_s: the wait after the first failed start; it doubles per failure in a row.
        backoff_max_s: the longest wait between two start attempts.
        surface_after_failures: failed starts in a row after which ``acquire`` raises at once
            (when nothing is ready or starting) instead of waiting for a retry.
        max_idle_s: a ready sandbox older than this is closed and replaced, never handed out: it
            was planned from host facts (and given credentials) that old.
    """

    size: int
    backoff_base_s: float = 0.1
    backoff_max_s: float = 10.0
    surface_after_failures: int = 1
    max_idle_s: float = 600.0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a pool's size must be 1 or more, not {self.size}")
        if self.backoff_base_s <= 0 or self.backoff_max_s < self.backoff_base_s:
            raise ValueError("backoff_base_s must be positive and at most backoff_max_s")
        if self.surface_after_failures < 1:
            raise ValueError("surface_after_failures must be 1 or more")
        if not self.max_idle_s > 0:
            raise ValueError("max_idle_s must be positive")


@dataclass(frozen=True)
class PoolState:
    """What the decisions read, copied under the pool's lock.

    Attributes:
        ready: started sandboxes waiting to be handed out.
        starting: whether the refill thread is starting one now.
        failures: failed starts in a row (0 after a success).
        retry_at: the clock time before which no new start is attempted (after a failure).
        closed: ``close()`` was called.
        retire_at: when the oldest ready sandbox passes ``max_idle_s`` (``math.inf``: none ready).
    """

    ready: int
    starting: bool
    failures: int
    retry_at: float
    closed: bool
    retire_at: float = math.inf


def count_stale(born: Sequence[float], now: float, settings: PoolSettings) -> int:
    """How many of the ready sandboxes, oldest first (``born``: their start times, ascending),
    are past ``max_idle_s`` and must be retired instead of handed out."""
    stale = 0
    for started in born:
        if now - started < settings.max_idle_s:
            break
        stale += 1
    return stale


def backoff_delay_s(failures: int, settings: PoolSettings) -> float:
    """Seconds to wait after ``failures`` failed starts in a row: base, 2x base, 4x base ... capped.

    Deterministic (no jitter): one pool has one refill thread, so there is no herd to spread.
    """
    if failures <= 0:
        return 0.0
    return min(settings.backoff_max_s, settings.backoff_base_s * 2.0 ** min(failures - 1, 62))


class RefillAction(Enum):
    START = "start"  # start one sandbox now
    WAIT = "wait"  # decide again after wait_s, or when woken (None: only when woken)
    STOP = "stop"  # the pool is closed: the refill thread ends


@dataclass(frozen=True)
class RefillDecision:
    action: RefillAction
    wait_s: float | None
    reason: str


def decide_refill(state: PoolState, settings: PoolSettings, now: float) -> RefillDecision:
    """What the refill thread does next.

    One start at a time (the thread runs it), none while ``size`` are ready, none before
    ``retry_at`` after a failure, and nothing at all once the pool is closed. A wait ends early
    when the oldest ready sandbox is due to be retired (``retire_at``); stale ones are removed
    (``count_stale``) before this is asked, so ``ready`` counts only usable ones.
    """
    if state.closed:
        return RefillDecision(RefillAction.STOP, None, "the pool is closed")
    if state.starting:
        return RefillDecision(RefillAction.WAIT, None, "a start is in progress")
    retire_in = state.retire_at - now if state.retire_at != math.inf else None  # wake to retire the oldest
    if state.ready >= settings.size:
        return RefillDecision(RefillAction.WAIT, retire_in, f"{state.ready} of {settings.size} ready")
    if state.failures and now < state.retry_at:
        wait_s = state.retry_at - now if retire_in is None else min(state.retry_at - now, retire_in)
        return RefillDecision(RefillAction.WAIT, wait_s, f"backing off after {state.failures} failed start(s)")
    return RefillDecision(RefillAction.START, None, f"{state.ready} of {settings.size} ready")


class AcquireAction(Enum):
    TAKE = "take"  # hand out the oldest ready sandbox
    WAIT = "wait"  # wait at most wait_s (woken early by a ready sandbox, a failure or close)
    FAIL_CLOSED = "closed"
    FAIL_STARTS = "starts failing"
    FAIL_TIMEOUT = "timeout"


@dataclass(frozen=True)
class AcquireDecision:
    action: AcquireAction
    wait_s: float


def decide_acquire(state: PoolState, settings: PoolSettings, now: float, deadline: float) -> AcquireDecision:
    """What ``acquire`` does next: take, wait, or fail with the reason.

    A ready sandbox is taken even after failures (it started fine). With nothing ready, the pool
    fails at once when its last ``surface_after_failures`` starts failed and no retry is running,
    so a boundary that cannot start is reported with its cause, never waited out.
    """
    if state.closed:
        return AcquireDecision(AcquireAction.FAIL_CLOSED, 0.0)
    if state.ready > 0:
        return AcquireDecision(AcquireAction.TAKE, 0.0)
    if state.failures >= settings.surface_after_failures and not state.starting:
        return AcquireDecision(AcquireAction.FAIL_STARTS, 0.0)
    if now >= deadline:
        return AcquireDecision(AcquireAction.FAIL_TIMEOUT, 0.0)
    return AcquireDecision(AcquireAction.WAIT, deadline - now)
