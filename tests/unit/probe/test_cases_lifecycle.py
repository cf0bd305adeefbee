"""Pure judges of the LF/XT cases fire on planted readings."""

from __future__ import annotations

from contain.probe.cases_lifecycle import _ORPHANS_TO_PROVE, _orphan_breaches, _orphans_missing


def test_orphans_judge_flags_a_refused_fork_and_zombies():
    assert _orphan_breaches({"spawned": {"value": 2000}, "zombies": {"value": 0}}, 2000) == []
    found = _orphan_breaches(
        {"spawned": {"value": 900}, "zombies": {"value": 900}, "first fork error": {"value": "EAGAIN"}}, 2000
    )
    assert found == [
        "pid exhaustion: fork failed (EAGAIN) after 900 of at most 2000 short-lived children",
        "900 zombies were left unreaped",
    ]


def test_orphans_stopped_by_the_spawn_deadline_are_no_breach_but_too_few_show_nothing():
    """LF-09 spawns for a bounded time on every backend (runsc's ptrace platform makes ~200 in 12 s):
    a deadline is no exhaustion, but fewer orphans than twice pids_max cannot show reaping."""
    in_time = {"spawned": {"value": 199}, "zombies": {"value": 0}}
    assert _orphan_breaches(in_time, 2000) == []
    assert _orphans_missing(in_time, least=_ORPHANS_TO_PROVE) is None
    assert _ORPHANS_TO_PROVE == 64
    too_few = {"spawned": {"value": 40}, "zombies": {"value": 0}}
    assert "too few to show that init reaps" in str(_orphans_missing(too_few, least=_ORPHANS_TO_PROVE))
    assert _orphans_missing({}, least=_ORPHANS_TO_PROVE) == "the attack did not report"


def test_the_orphan_attack_stops_at_its_deadline_on_every_backend():
    from contain.probe.cases_lifecycle import _ORPHAN_SPAWN_S, _ORPHANS

    assert 'deadline = time.monotonic() + P["spawn_s"]' in _ORPHANS
    assert 0 < _ORPHAN_SPAWN_S <= 15  # inside the probe boundary's 20 s CPU and 30 s wall budgets


def test_lf_08_takes_neither_the_launcher_nor_its_copy_before_exec_for_the_workload():
    from contain.probe.cases_lifecycle import workload_processes
    from contain.probe.snapshot import ProcessEntry

    launcher = "python3 -c import subprocess ... python3 -c sleep launcher-mark"
    entries = [
        ProcessEntry(10, 1, "python3", 1, launcher),
        ProcessEntry(11, 10, "python3", 2, launcher),  # forked, not yet exec'd: gone in a moment
        ProcessEntry(12, 1, "python3", 3, "python3 -c import time; time.sleep(20) launcher-mark"),
    ]
    assert [p.pid for p in workload_processes(entries, launcher_pid=10, launcher_cmdline=launcher)] == [12]
    assert [p.pid for p in workload_processes(entries[:2], launcher_pid=10, launcher_cmdline=launcher)] == []
    assert [p.pid for p in workload_processes(entries, launcher_pid=10, launcher_cmdline=None)] == [11, 12]


def test_lf_08_knows_a_host_pid_in_the_hosts_own_pid_namespace_shows_no_workload():
    """Under runsc the sandbox's host pid is gVisor's own process in the host's pid namespace: no
    host process ever carries the workload's marker, so LF-08 judges by that process alone."""
    import os

    from contain.probe.cases_lifecycle import _workload_visible

    assert _workload_visible(os.getpid()) is False
    assert _workload_visible(2**22 + 12345) is True  # no such pid: assume visible, wait for the marker
