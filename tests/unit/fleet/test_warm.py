"""Warm sandboxes: started ahead, each used once, stale ones closed, nothing owned after close()."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from contain.errors import SandboxStartError
from contain.fleet.warm import PrestartedSandboxes

from .fleet_fakes import FakeSandbox


class _Maker:
    """Makes FakeSandboxes; ``made`` is set each time ``wanted`` of them exist."""

    def __init__(self, wanted: int, *, gate: threading.Event | None = None) -> None:
        self.made: list[FakeSandbox] = []
        self.enough = threading.Event()
        self.spare_entered = threading.Event()  # a make() beyond the first has begun
        self.wanted = wanted
        self.gate = gate
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        with self.lock:
            sandbox = FakeSandbox(f"sb{len(self.made)}")
            self.made.append(sandbox)
            if len(self.made) > 1:
                self.spare_entered.set()
            if len(self.made) > 1 and self.gate is not None:
                self.gate.wait(30)
            if len(self.made) >= self.wanted:
                self.enough.set()
        return sandbox


def test_the_first_take_starts_cold_then_spares_are_started_and_the_next_take_is_warm() -> None:
    pool = PrestartedSandboxes()
    maker = _Maker(wanted=3)  # the cold one and two spares
    first, warm = pool.take("m", maker, keep=2)
    assert (first.name, warm, first.started) == ("sb0", False, True)  # type: ignore[attr-defined]
    assert maker.enough.wait(10)
    second, warm = pool.take("m", maker, keep=2)
    assert warm and second is maker.made[1] and second.started  # type: ignore[attr-defined]
    pool.close()


def test_keep_zero_starts_every_sandbox_cold_and_no_spare() -> None:
    pool = PrestartedSandboxes()
    maker = _Maker(wanted=99)
    taken = [pool.take("m", maker, keep=0) for _ in range(3)]
    assert [warm for _, warm in taken] == [False] * 3 and len(maker.made) == 3
    assert pool.close() == 0


def test_a_spare_older_than_max_idle_is_closed_instead_of_used() -> None:
    now = [0.0]
    pool = PrestartedSandboxes(max_idle_s=10.0, clock=lambda: now[0])
    maker = _Maker(wanted=2)
    pool.take("m", maker, keep=1)
    assert maker.enough.wait(10)
    spare = maker.made[1]
    now[0] = 11.0
    taken, warm = pool.take("m", maker, keep=1)
    assert not warm and taken is not spare and spare.closed
    pool.close()


def test_close_closes_the_spares_and_one_still_starting_and_refuses_later_takes() -> None:
    gate = threading.Event()
    pool = PrestartedSandboxes()
    maker = _Maker(wanted=2, gate=gate)
    pool.take("m", maker, keep=1)  # the cold start passes; the spare's make() waits on the gate
    assert maker.spare_entered.wait(30)  # close only once the spare is really starting
    closer = threading.Thread(target=pool.close)
    closer.start()
    gate.set()
    closer.join(30)
    assert not closer.is_alive()
    assert len(maker.made) == 2 and maker.made[1].closed
    with pytest.raises(SandboxStartError, match="closed"):
        pool.take("m", maker, keep=1)


def test_a_manifest_whose_spare_cannot_start_is_not_retried_in_a_loop() -> None:
    from contain.errors import UnsupportedHost

    calls = []
    done = threading.Event()

    def make() -> Any:
        calls.append(1)
        if len(calls) > 1:
            done.set()
            raise UnsupportedHost("landlock is required but missing", "")
        return FakeSandbox()

    pool = PrestartedSandboxes()
    pool.take("m", make, keep=3)
    assert done.wait(10)
    pool.close()  # joins the refill thread: no start after the failure
    assert len(calls) == 2 and pool.ready_count("m") == 0


def test_close_closes_the_ready_spares_while_the_thread_that_started_them_still_lives() -> None:
    pool = PrestartedSandboxes()
    maker = _Maker(wanted=2)
    pool.take("m", maker, keep=1)
    assert maker.enough.wait(10)
    spare = maker.made[1]
    refill_thread_alive_at_close: list[bool] = []
    spare.close = lambda: refill_thread_alive_at_close.append(pool._thread.is_alive()) or 0.0  # type: ignore[method-assign, union-attr, func-returns-value]
    pool.close()
    assert refill_thread_alive_at_close == [True]  # its PR_SET_PDEATHSIG has not fired yet
