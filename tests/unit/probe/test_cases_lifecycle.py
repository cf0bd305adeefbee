"""Pure judges of the LF/XT cases fire on planted readings."""

from __future__ import annotations

from contain.probe.cases_lifecycle import _orphan_breaches


def test_orphans_judge_flags_exhaustion_and_zombies():
    assert _orphan_breaches({"spawned": {"value": 2000}, "zombies": {"value": 0}}, 2000) == []
    found = _orphan_breaches({"spawned": {"value": 900}, "zombies": {"value": 900}}, 2000)
    assert found == [
        "pid exhaustion: fork failed after 900 of 2000 short-lived children",
        "900 zombies were left unreaped",
    ]


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
