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
