"""The run/wait loop's clock decisions, driven by a fake clock: no sleeps, no sandbox."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from contain.runtime.run_loop import CPU_CHECK_INTERVAL_S, KILL_GRACE_S, Action, decide, wait_for_command
from contain.runtime.streams import CappedReader
from contain.runtime.supervisor_channel import Exited

EXITED = Exited(status=0, utime_us=0, stime_us=0, maxrss_kb=0)


@pytest.mark.parametrize(
    ("now", "exited", "kill_sent_at", "expected"),
    [
        (9.9, False, None, Action.WAIT),  # before the deadline
        (10.0, False, None, Action.KILL_FOR_TIMEOUT),  # at the deadline
        (10.0, False, 10.0, Action.WAIT),  # killed, grace running
        (10.0 + KILL_GRACE_S, False, 10.0, Action.WAIT),  # grace not yet exceeded
        (10.1 + KILL_GRACE_S, False, 10.0, Action.GIVE_UP),  # killed and silent past the grace
        (3.0 + KILL_GRACE_S + 0.1, False, 3.0, Action.GIVE_UP),  # a CPU kill before the deadline too
        (12.0, True, None, Action.WAIT),  # exited; draining output within the grace
        (10.1 + KILL_GRACE_S, True, None, Action.STOP_READING),  # exited; output held open too long
        (10.1 + KILL_GRACE_S, True, 10.0, Action.STOP_READING),
    ],
)
def test_the_clock_decision_is_a_pure_function_of_now_exit_and_kill_time(now, exited, kill_sent_at, expected):
    assert decide(now, exited=exited, kill_sent_at=kill_sent_at, deadline=10.0) is expected


class FakeClock:
    """Returns the scripted readings in turn, then the last one forever."""

    def __init__(self, *readings: float) -> None:
        self._readings: Iterator[float] = iter(readings)
        self.now = readings[0]

    def __call__(self) -> float:
        self.now = next(self._readings, self.now)
        return self.now


class FakeControl:
    """A command that reports its exit only after ``exit_after_kills`` kills (None: never)."""

    def __init__(self, *, exit_after_kills: int | None) -> None:
        self._wakeup, self._other = socket.socketpair()
        self._other.send(b"x")  # always readable: select() returns at once, so no real time passes
        self.kills = 0
        self._exit_after = exit_after_kills
        self.polls = 0

    def wait_exited(self, timeout_s: float | None) -> Exited | None:
        self.polls += 1
        if self._exit_after is not None and self.kills >= self._exit_after:
            return EXITED
        return None

    def fileno(self) -> int:
        return self._wakeup.fileno()

    def kill(self) -> None:
        self.kills += 1

    def close(self) -> None:
        self._wakeup.close()
        self._other.close()


def closed_output() -> CappedReader:
    read_end, write_end = os.pipe()
    os.close(write_end)  # EOF at once: the command wrote nothing
    return CappedReader(read_end, 1024)


@pytest.fixture
def streams():
    return closed_output(), closed_output()


def test_a_command_past_its_deadline_is_killed_once_and_reported_as_timed_out(streams):
    control = FakeControl(exit_after_kills=1)
    lost: list[str] = []
    clock = FakeClock(0.0, 0.0, 5.0, 10.0, 10.0, 10.0)
    outcome = wait_for_command(
        control, *streams, None, deadline=10.0, cpu_budget_s=1.0, cpu_used=None, on_lost=lost.append, clock=clock
    )
    control.close()
    assert outcome.exited == EXITED
    assert (outcome.timed_out, outcome.cpu_killed) == (True, False)
    assert control.kills == 1
    assert lost == []
    assert not streams[0].open and not streams[1].open


def test_a_killed_command_that_never_reports_loses_the_sandbox_after_the_grace(streams):
    control = FakeControl(exit_after_kills=None)
    lost: list[str] = []
    clock = FakeClock(0.0, 0.0, 10.0, 12.0, 10.0 + KILL_GRACE_S + 0.5)
    outcome = wait_for_command(
        control, *streams, None, deadline=10.0, cpu_budget_s=1.0, cpu_used=None, on_lost=lost.append, clock=clock
    )
    control.close()
    assert outcome.exited is None
    assert outcome.timed_out is True
    assert control.kills == 1  # one kill, then the grace, then give up: never a second kill
    assert lost == ["the supervisor did not report after a kill"]


def test_a_command_over_its_cpu_budget_is_killed_before_its_deadline(streams):
    control = FakeControl(exit_after_kills=1)
    used = iter([0.5, 1.5])  # first check within budget, second over it
    clock = FakeClock(0.0, 0.0, CPU_CHECK_INTERVAL_S, CPU_CHECK_INTERVAL_S, 0.3, 0.3, 0.3, 0.3)
    outcome = wait_for_command(
        control,
        *streams,
        None,
        deadline=10.0,
        cpu_budget_s=1.0,
        cpu_used=lambda: next(used),
        on_lost=lambda reason: None,
        clock=clock,
    )
    control.close()
    assert outcome.exited == EXITED
    assert (outcome.timed_out, outcome.cpu_killed) == (False, True)
    assert control.kills == 1


def test_without_a_cgroup_the_cpu_budget_is_left_to_rlimits_and_never_read(streams):
    control = FakeControl(exit_after_kills=0)  # exits at once
    outcome = wait_for_command(
        control, *streams, None, deadline=10.0, cpu_budget_s=0.0, cpu_used=None, on_lost=lambda r: None,
        clock=FakeClock(0.0, 100.0),
    )
    control.close()
    assert (outcome.exited, outcome.timed_out, outcome.cpu_killed) == (EXITED, False, False)
    assert control.kills == 0


def test_output_held_open_after_the_exit_stops_being_read_past_the_deadline_and_grace():
    control = FakeControl(exit_after_kills=0)
    read_end, write_end = os.pipe()  # a grandchild the host cannot see keeps stdout open
    os.write(write_end, b"partial")
    stdout = CappedReader(read_end, 1024)
    clock = FakeClock(0.0, 1.0, 10.0 + KILL_GRACE_S + 1.0)
    try:
        outcome = wait_for_command(
            control, stdout, closed_output(), None, deadline=10.0, cpu_budget_s=1.0, cpu_used=None,
            on_lost=lambda r: None, clock=clock,
        )
    finally:
        os.close(write_end)
        control.close()
    assert outcome.exited == EXITED
    assert stdout.result().data == b"partial"
    assert not stdout.open
