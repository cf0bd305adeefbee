"""The sweeps' owner check (runtime/pids.py) against real pids of this host."""

from __future__ import annotations

import os

import pytest

from contain.runtime import pids
from contain.runtime.pids import is_pid_alive

PAST_PID_MAX = 99_999_999  # above the largest possible pid_max (2**22), so never a process


def test_this_process_is_alive_and_a_pid_no_process_can_have_is_not() -> None:
    assert is_pid_alive(os.getpid())
    assert not is_pid_alive(PAST_PID_MAX)


def test_another_users_process_counts_as_alive_when_signalling_it_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(pids.os, "kill", refused)
    assert is_pid_alive(1)
