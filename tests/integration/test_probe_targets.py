"""Targets: the bounded host runner does not wait for leftovers; contain targets merge boundaries."""

from __future__ import annotations

import time

import pytest

from contain.probe.snapshot import kill_marked, marked_processes
from contain.probe.targets import ContainTarget, HostControlTarget, WrapTarget

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

_DETACH = (
    "import subprocess, sys\n"
    "subprocess.Popen(['setsid', 'python3', '-c', 'import time; time.sleep(15)', sys.argv[1]])\n"
    "print('parent done', flush=True)\n"
)


def test_host_runner_returns_when_the_command_exits_even_if_a_child_holds_its_pipes():
    marker = f"probe-target-test-{time.monotonic_ns()}"
    try:
        run = HostControlTarget().run_argv(["python3", "-c", _DETACH, marker], timeout_s=10)
        assert b"parent done" in run.stdout
        assert run.exit_code == 0 and not run.timed_out
        assert run.duration_s < 3
        assert marked_processes([marker]), "the detached child should still be alive: it left the group"
    finally:
        kill_marked([marker])


def test_host_runner_kills_the_process_group_at_the_deadline():
    run = HostControlTarget().run_python("import time; time.sleep(30)", timeout_s=0.5)
    assert run.timed_out
    assert run.signal == 9
    assert run.duration_s < 3


def test_wrap_target_prefixes_the_command_and_ignores_the_boundary():
    run = WrapTarget(["env", "PROBE_WRAPPED=1"]).run_python(
        "import os; print(os.environ['PROBE_WRAPPED'])", boundary={"resources": {"pids_max": 8}}
    )
    assert run.stdout.strip() == b"1"
    assert run.run_result is None


def test_contain_target_merges_the_case_boundary_and_reports_the_sandbox_pid():
    target = ContainTarget("process")
    run = target.run_python(
        "import os; print(os.environ['PROBE_VAR'], open('/proc/1/comm').read().strip())",
        boundary={"env": {"PROBE_VAR": "merged"}},
    )
    assert run.stdout.split() == [b"merged", b"supervisor"]
    assert run.host_pid is not None and run.run_result is not None
    assert target.boundary_for({"env": {"X": "1"}})["resources"]["pids_max"] == 32
