"""The run/wait loop: pump a command's output, feed its stdin, and enforce its wall clock and CPU budget.

``wait_for_command`` waits on the sandbox's control descriptor (``CommandControl.fileno``) and the
command's pipes in one ``select`` until the sandbox reports the command's exit and both output
pipes are closed. The clock decisions are one pure function, ``decide``, over an injected clock
(``clock=``, by default ``time.perf_counter``), so tests drive time by hand:

- the wall-clock deadline passes before an exit report: kill the command (``timed_out``);
- the CPU used since the run began (``cpu_used``, read from the cgroup every
  ``CPU_CHECK_INTERVAL_S``) passes the budget: kill the command (``cpu_killed``);
- a kill got no exit report within ``KILL_GRACE_S``: the sandbox is lost (``on_lost``), which
  destroys it from outside; the loop stops;
- the command has exited but something the host cannot see holds its output pipes open past
  the deadline plus the grace: stop reading.

Does not cap output (``CappedReader`` does), read the cgroup itself, or decide the limits (the
boundary's resources, through ``Sandbox``). The CPU check samples: a command can overrun its budget
by up to one interval of CPU time per core before it is killed.
"""

from __future__ import annotations

import enum
import selectors
import time
from collections.abc import Callable
from typing import NamedTuple

from contain.runtime.backend import CommandControl
from contain.runtime.streams import CappedReader, StdinFeeder
from contain.runtime.supervisor_channel import Exited

__all__ = ["CPU_CHECK_INTERVAL_S", "KILL_GRACE_S", "Action", "WaitOutcome", "decide", "wait_for_command"]

KILL_GRACE_S = 5.0  # how long a killed command's exit report may take before the sandbox counts as lost
CPU_CHECK_INTERVAL_S = 0.1  # cgroup CPU accounting is read this often while a command runs


class Action(enum.Enum):
    """What the loop does at one tick of the clock."""

    WAIT = "wait"
    KILL_FOR_TIMEOUT = "kill: the wall-clock deadline passed"
    GIVE_UP = "give up: no exit report after a kill"
    STOP_READING = "stop reading: output held open after the exit"


def decide(now: float, *, exited: bool, kill_sent_at: float | None, deadline: float) -> Action:
    """The clock's decision at ``now``: a pure function, tested as a truth table.

    Args:
        now: the clock's reading.
        exited: the sandbox has reported the command's exit.
        kill_sent_at: when a kill was sent (timeout or CPU budget), None before.
        deadline: the wall-clock deadline on the same clock.
    """
    if not exited and kill_sent_at is None and now >= deadline:
        return Action.KILL_FOR_TIMEOUT
    if not exited and kill_sent_at is not None and now - kill_sent_at > KILL_GRACE_S:
        return Action.GIVE_UP
    if exited and now > deadline + KILL_GRACE_S:
        return Action.STOP_READING
    return Action.WAIT


class WaitOutcome(NamedTuple):
    """How the wait ended: the exit report (None when the sandbox was lost), and why it was killed."""

    exited: Exited | None
    timed_out: bool
    cpu_killed: bool


def wait_for_command(
    control: CommandControl,
    stdout: CappedReader,
    stderr: CappedReader,
    feeder: StdinFeeder | None,
    *,
    deadline: float,
    cpu_budget_s: float,
    cpu_used: Callable[[], float] | None,
    on_lost: Callable[[str], None],
    clock: Callable[[], float] = time.perf_counter,
) -> WaitOutcome:
    """Wait until the command exits and its output is drained; closes the streams and the feeder.

    Args:
        control: the running sandbox's command control.
        stdout, stderr: the command's output pipes, capped.
        feeder: the command's stdin, or None when it reads /dev/null.
        deadline: ``clock()`` value at which the command is killed.
        cpu_budget_s: CPU seconds the command may use.
        cpu_used: CPU seconds the sandbox used since the run began; None when there is no cgroup
            (rlimits then bound CPU inside the sandbox).
        on_lost: called with a reason when a kill got no report; must destroy the sandbox.
        clock: monotonic seconds (injected by tests).

    Raises:
        SandboxLost: the control channel failed while waiting.
    """
    selector = selectors.DefaultSelector()
    for capped in (stdout, stderr):
        selector.register(capped.fd, selectors.EVENT_READ, capped)
    if feeder is not None:
        selector.register(feeder.fd, selectors.EVENT_WRITE, feeder)
    selector.register(control.fileno(), selectors.EVENT_READ, None)
    exited: Exited | None = None
    timed_out = cpu_killed = False
    kill_sent_at: float | None = None
    next_cpu_check = clock() + CPU_CHECK_INTERVAL_S
    try:
        while exited is None or stdout.open or stderr.open:
            if exited is None:
                # The exit report may already sit in the channel's buffer (it often arrives in the
                # same read as the start reply), where the socket's readability would never show it.
                exited = control.wait_exited(0)
                if exited is not None:
                    selector.unregister(control.fileno())
                    continue
            now = clock()
            action = decide(now, exited=exited is not None, kill_sent_at=kill_sent_at, deadline=deadline)
            if action is Action.KILL_FOR_TIMEOUT:
                timed_out = True
                kill_sent_at = now
                control.kill()
            elif action is Action.GIVE_UP:
                on_lost("the supervisor did not report after a kill")
                break
            elif action is Action.STOP_READING:
                break  # streams held open by something we cannot see; stop reading
            wait = max(0.0, min(deadline - now if kill_sent_at is None else KILL_GRACE_S, CPU_CHECK_INTERVAL_S))
            for key, _ in selector.select(wait):
                if key.data is None:
                    exited = control.wait_exited(0)
                    if exited is not None:
                        selector.unregister(key.fd)
                elif isinstance(key.data, CappedReader):
                    if not key.data.pump():
                        selector.unregister(key.fd)
                elif isinstance(key.data, StdinFeeder) and not key.data.pump():
                    selector.unregister(key.fd)
            if cpu_used is not None and exited is None and kill_sent_at is None and clock() >= next_cpu_check:
                next_cpu_check = clock() + CPU_CHECK_INTERVAL_S
                if cpu_used() > cpu_budget_s:
                    cpu_killed = True
                    kill_sent_at = clock()
                    control.kill()
    finally:
        selector.close()
        stdout.close()
        stderr.close()
        if feeder is not None:
            feeder.close()
    return WaitOutcome(exited, timed_out, cpu_killed)
