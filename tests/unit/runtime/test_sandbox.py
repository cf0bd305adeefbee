"""The Sandbox's orchestration against the recording fake backend (no kernel, no bubblewrap), and
its pure helpers. The process backend's own start is covered by
tests/integration/test_sandbox_containment.py and test_sandbox_spawn_and_attachments.py."""

from __future__ import annotations

import builtins
import dataclasses
import errno
import io
import os
import signal
import subprocess
from types import SimpleNamespace

import pytest

from contain.boundary import Boundary
from contain.errors import SandboxLost, SandboxStartError, UnknownBackend, UnsupportedHost
from contain.runtime import sandbox as sandbox_module
from contain.runtime.backend import CommandRequest, RecordingBackend
from contain.runtime.plan import plan_rlimits
from contain.runtime.sandbox import Sandbox, _decode_status, _hidden_sockets_line
from contain.runtime.supervisor_channel import Exited, SpawnFailed
from fake_host import facts_as_user


def test_a_wait_status_decodes_to_exit_code_or_signal():
    assert _decode_status(3 << 8) == (3, None)
    assert _decode_status(0) == (0, None)
    assert _decode_status(signal.SIGKILL) == (None, signal.SIGKILL)
    assert _decode_status(0x137F) == (None, None)  # stopped by SIGSTOP: neither exited nor killed


def test_the_hidden_sockets_line_names_eight_and_counts_the_rest():
    paths = tuple(f"/w/s{n}.sock" for n in range(10))
    line = _hidden_sockets_line(paths)
    assert line.startswith("10 found in binds and hidden (name them in allow_sockets to keep them): /w/s0.sock, ")
    assert line.endswith("/w/s7.sock and 2 more")
    assert _hidden_sockets_line(("/w/a.sock",)).endswith(": /w/a.sock")


FACTS = facts_as_user()
EXITED = Exited(status=3 << 8, utime_us=250_000, stime_us=250_000, maxrss_kb=100)
BOUNDARY = Boundary.model_validate({"hardening": {"cgroups": "off"}, "resources": {"wall_s": 7, "cpu_s": 3, "memory_bytes": 64 * 2**20, "output_bytes": 4096}})


def test_a_sandbox_calls_its_backend_start_spawn_close_in_order_and_reports_the_scripted_exit(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED])
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS) as sb:
        assert sb.supervisor_pid == 4242  # the handle's host pid
        result = sb.run(["/bin/true"])
    assert [call[0] for call in backend.calls] == ["start", "spawn", "close"]
    assert (result.exit_code, result.signal, result.timed_out, result.backend) == (3, None, False, "process")
    assert result.usage.source == "supervisor rusage"  # no cgroup on these facts
    assert sb.supervisor_pid is None  # closed


def test_the_plan_and_each_command_carry_the_boundarys_budgets(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED])
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS, extra_env={"A": "1"}) as sb:
        sb.run(["/bin/true"], env={"B": "2"}, cwd="/work/sub")
    (plan,) = backend.plans
    resources = sb.boundary.resources
    assert plan.boundary is sb.boundary
    assert (resources.wall_s, resources.cpu_s, resources.memory_bytes) == (7, 3, 64 * 2**20)
    assert plan.host_ids == (1000, 1000)  # the caller's ids: these facts are not root
    assert (plan.layers.cgroups, plan.cgroup, plan.bind_sources) == (False, None, {})
    assert plan.resolv_conf == "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
    request = backend.calls[1][1]
    assert isinstance(request, CommandRequest)
    assert request.rlimits == tuple(plan_rlimits(resources, cgroups=False))
    assert (request.argv, request.cwd) == (("/bin/true",), "/work/sub")
    assert (request.env["A"], request.env["B"]) == ("1", "2")


@pytest.mark.parametrize("error", [SandboxStartError("bwrap died", "doctor"), RuntimeError("boom")])
def test_a_failed_backend_start_tears_down_and_the_sandbox_cannot_be_used(wakeup, error):
    backend = RecordingBackend(wakeup_fd=wakeup, start_error=error)
    sb = Sandbox(BOUNDARY, backend=backend, facts=FACTS)
    with pytest.raises(SandboxStartError) as caught:
        sb.start()
    assert "boom" in caught.value.cause if isinstance(error, RuntimeError) else caught.value is error
    assert sb.supervisor_pid is None
    with pytest.raises(SandboxLost):
        sb.run(["/bin/true"])
    sb.close()
    assert backend.calls == [("start",)]  # nothing was spawned; no handle to close


def test_a_failure_after_the_backend_started_closes_the_running_handle(wakeup, monkeypatch):
    def refuse(boundary, *, netns_path):
        raise RuntimeError(f"egress cannot attach to {netns_path}")

    egress = SimpleNamespace(RESOLV_CONF_TEXT="nameserver 127.0.0.53\n", start_egress=refuse)
    monkeypatch.setattr(sandbox_module, "_egress_module", lambda: egress)
    backend = RecordingBackend(wakeup_fd=wakeup)
    networked = Boundary.model_validate({"hardening": {"cgroups": "off"}, "network": {"allow": [{"host": "pypi.org"}]}})
    with pytest.raises(SandboxStartError) as caught:
        Sandbox(networked, backend=backend, facts=FACTS).start()
    assert caught.value.cause == "the sandbox failed to start: egress cannot attach to /fake/netns"
    assert backend.calls == [("start",), ("close",)]
    assert backend.plans[0].resolv_conf == "nameserver 127.0.0.53\n"


def test_a_command_that_cannot_be_executed_exits_127_without_a_second_spawn(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[SpawnFailed("exec", errno.ENOENT)])
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS) as sb:
        result = sb.run(["nope"])
    assert result.exit_code == 127
    assert b"cannot run 'nope' (exec)" in result.stderr.data


def test_files_go_through_the_handle_after_the_scratch_check(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup)
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS) as sb:
        sb.put_file("/work/a/b.txt", b"data", mode=0o4755)
        assert sb.get_file("/work/a/b.txt") == b"data"
    assert ("put_file", "/work", "a/b.txt", 0o755) in backend.calls  # set-id bits never reach the backend


def test_orchestration_never_touches_proc_or_starts_a_process(wakeup, monkeypatch):
    touched: list[str] = []

    def watch(name, real):
        def wrapper(*args, **kwargs):
            touched.extend(str(a) for a in args if isinstance(a, str | bytes | os.PathLike))
            return real(*args, **kwargs)

        monkeypatch.setattr(*name, wrapper)

    for target in (
        (os, "open"), (os, "stat"), (os, "lstat"), (os, "readlink"), (os, "listdir"), (os, "scandir"),
        (builtins, "open"), (io, "open"),
    ):
        watch(target, getattr(*target))

    def no_process(*args, **kwargs):
        raise AssertionError(f"the orchestrator started a process: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr(os, "kill", no_process)
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED])
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS) as sb:
        sb.run(["/bin/true"])
        sb.put_file("/work/x", b"1")
    assert touched, "the watch saw nothing: the test would pass vacuously"
    assert [p for p in touched if p.startswith("/proc/")] == []


def test_destroy_kills_the_running_sandbox_from_outside_and_no_command_runs_after_it(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED])
    sb = Sandbox(BOUNDARY, backend=backend, facts=FACTS)
    sb.start()
    sb.destroy()
    assert [call[0] for call in backend.calls] == ["start", "destroy"]
    with pytest.raises(SandboxLost, match="destroyed from outside"):
        sb.run(["/bin/true"])
    sb.close()
    assert [call[0] for call in backend.calls] == ["start", "destroy", "close"]


def test_destroy_after_close_began_never_reaches_the_stopped_handle(wakeup):
    """A stopped handle's host pids may already belong to other processes: destroy must not signal them."""
    backend = RecordingBackend(wakeup_fd=wakeup)
    sb = Sandbox(BOUNDARY, backend=backend, facts=FACTS)
    sb.start()
    sb.close()
    sb.destroy()
    assert [call[0] for call in backend.calls] == ["start", "close"]


def test_destroy_while_close_is_stopping_the_handle_leaves_the_stop_to_close(wakeup):
    import threading

    entered, gate = threading.Event(), threading.Event()

    class SlowClose(RecordingBackend):
        def start(self, plan):
            handle = super().start(plan)
            plain_close = handle.close

            def close():
                entered.set()
                assert gate.wait(10)
                plain_close()

            handle.close = close
            return handle

    backend = SlowClose(wakeup_fd=wakeup)
    sb = Sandbox(BOUNDARY, backend=backend, facts=FACTS)
    sb.start()
    closer = threading.Thread(target=sb.close)
    closer.start()
    assert entered.wait(10)
    sb.destroy()  # returns at once: close has begun
    gate.set()
    closer.join(10)
    assert [call[0] for call in backend.calls] == ["start", "close"]


@pytest.mark.parametrize(
    ("spec", "cause"),
    [
        ("nosuch", "backend 'nosuch' is unknown"),
        ("container:crun", "container runtime 'crun' is unknown (in 'container:crun')"),
        ("process:runc", "backend 'process' takes no variant (got 'process:runc')"),
    ],
)
def test_an_unknown_backend_spec_is_refused_with_unknown_backend_before_anything_starts(spec, cause):
    with pytest.raises(UnknownBackend) as caught:
        Sandbox(BOUNDARY, backend=spec)
    assert caught.value.cause == cause
    assert caught.value.exit_code == 125


def test_a_container_backend_gets_layers_planned_from_its_runtime_facts_and_reports_its_spec(wakeup, monkeypatch):
    from contain.runtime.backend_names import RuntimeFacts

    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED], name="container:runsc")
    backend.runtime_facts = RuntimeFacts("runsc", "/usr/bin/runsc", "runsc version 0.0~20221219.0", ("ptrace",))  # type: ignore[attr-defined]
    root = dataclasses.replace(FACTS, is_root=True, uid=0, gid=0, bwrap_path=None)
    monkeypatch.setattr(Sandbox, "_choose_host_ids", lambda self, facts: (1611, 1611))  # no lease dir here
    with Sandbox(BOUNDARY, backend=backend, facts=root) as sb:
        result = sb.run(["/bin/true"])
    (plan,) = backend.plans
    assert result.backend == "container:runsc"
    assert plan.layers.report["runtime"] == "runsc (runsc version 0.0~20221219.0): gVisor user-space kernel"
    assert plan.layers.report["platform"].startswith("ptrace")
    assert plan.layers.landlock is None  # gVisor has none; auto says so instead of failing


def test_a_container_backend_without_runtime_facts_is_refused_before_it_starts(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED], name="container:runc")
    root = dataclasses.replace(FACTS, is_root=True, uid=0, gid=0)
    with pytest.raises(UnsupportedHost, match="no facts about the runc binary"):
        Sandbox(BOUNDARY, backend=backend, facts=root).start()
    assert backend.plans == []


def test_layer_lines_a_backend_learns_only_at_start_reach_the_result(wakeup):
    # The microvm backend decides its accelerator by booting; the line must reach RunResult.layers.
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED])
    backend.layer_report = {"accelerator": "tcg (software emulation: KVM does not boot the guest here)"}  # type: ignore[attr-defined]
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS) as sb:
        result = sb.run(["/bin/true"])
    assert result.layers["accelerator"] == "tcg (software emulation: KVM does not boot the guest here)"
    assert result.layers["seccomp"] == "applied"  # the planned lines stay


def test_an_oom_kill_and_a_pids_limit_counted_inside_the_sandbox_are_reported(wakeup):
    """A microVM guest's cgroup is not the host's: its exit report's counts must reach the result."""
    counted = Exited(status=signal.SIGKILL, utime_us=0, stime_us=0, maxrss_kb=0, oom_kills=1, pids_limit_hits=2)
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[counted])
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS) as sb:
        result = sb.run(["/bin/true"])
    assert result.oom_killed
    assert [v.kind for v in result.violations] == ["memory", "pids"]


def test_a_run_whose_deadline_passes_before_the_sandbox_answers_its_start_times_out_and_loses_the_sandbox(
    wakeup, monkeypatch
):
    from contain.errors import DeadlinePassed
    from contain.runtime.backend import RecordingRunning

    seen: list[CommandRequest] = []

    def frozen_spawn(self, request, fds):
        seen.append(request)
        raise DeadlinePassed("the run's deadline passed before the guest agent answered", "raise the limit")

    monkeypatch.setattr(RecordingRunning, "spawn", frozen_spawn)
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[EXITED])
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS) as sb:
        result = sb.run(["/bin/true"], timeout=2)
        assert result.timed_out and result.exit_code is None and result.signal == signal.SIGKILL
        assert [v.kind for v in result.violations] == ["timeout"]
        assert seen[0].deadline is not None  # the backend was told when the run ends
        with pytest.raises(SandboxLost):
            sb.run(["/bin/true"])
    assert ("destroy",) in backend.calls


def test_starting_the_process_path_imports_no_container_microvm_fleet_or_k8s_module():
    """Start-up stays lean: importing the orchestrator must not pull in another backend's package
    (the container package alone cost ~100 ms of a CLI run when sandbox.py imported it)."""
    import subprocess
    import sys

    code = (
        "import sys, contain.runtime.sandbox, contain.cli.run\n"
        "heavy = ('contain.runtime.container', 'contain.runtime.microvm', 'contain.fleet', 'contain.k8s', 'ray')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_only_the_first_result_reports_the_sandboxs_setup_time_even_when_it_is_a_spawn_failure(wakeup):
    backend = RecordingBackend(wakeup_fd=wakeup, replies=[SpawnFailed("exec", errno.ENOENT), EXITED])
    with Sandbox(BOUNDARY, backend=backend, facts=FACTS) as sb:
        failed = sb.run(["nope"])
        ran = sb.run(["/bin/true"])
    assert failed.exit_code == 127 and failed.timings.setup_s > 0.0
    assert ran.exit_code == 3 and ran.timings.setup_s == 0.0
