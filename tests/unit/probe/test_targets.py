"""Targets: boundary merging, the kind cases are looked up by, and the bounded host runner (real
short host commands: exit status, output, the timeout, and a detached child that holds the pipes)."""

from __future__ import annotations

import time

import pytest

from contain.probe.targets import (
    DEFAULT_PROBE_BOUNDARY,
    RELAXED_CONTROL_BOUNDARY,
    ContainTarget,
    HostControlTarget,
    WrapTarget,
    deep_merge,
    is_restorable_override,
    target_kind,
)


def test_deep_merge_merges_mappings_replaces_lists_and_copies():
    base = {"resources": {"pids_max": 32, "memory_bytes": 1}, "files": [{"path": "/a"}]}
    merged = deep_merge(base, {"resources": {"pids_max": 99}, "files": [{"path": "/x"}]})
    assert merged == {"resources": {"pids_max": 99, "memory_bytes": 1}, "files": [{"path": "/x"}]}
    merged["resources"]["memory_bytes"] = 2
    assert base["resources"] == {"pids_max": 32, "memory_bytes": 1}  # the base is never mutated
    assert deep_merge(base, None) == base and deep_merge(base, None) is not base


def test_a_contain_target_starts_every_run_from_the_probe_default_boundary():
    target = ContainTarget("process")
    assert target.boundary_for(None) == DEFAULT_PROBE_BOUNDARY
    run = target.boundary_for({"resources": {"pids_max": 5}})
    assert run["resources"]["pids_max"] == 5
    assert run["resources"]["memory_bytes"] == DEFAULT_PROBE_BOUNDARY["resources"]["memory_bytes"]
    assert (target.kind, target.name, target.has_contain_hooks) == ("process", "contain:process", True)


def test_the_relaxed_control_raises_every_budget_it_names():
    base = DEFAULT_PROBE_BOUNDARY["resources"]
    for key, value in RELAXED_CONTROL_BOUNDARY["resources"].items():
        assert value > base[key], key


def test_target_kind_prefers_the_declared_kind_then_the_hooks():
    class Hooked:
        has_contain_hooks = True

    class Bare:
        has_contain_hooks = False

    assert [target_kind(WrapTarget(["env"])), target_kind(HostControlTarget())] == ["wrap", "host"]
    assert [target_kind(Hooked()), target_kind(Bare())] == ["contain", "wrap"]


def test_a_wrap_target_needs_a_prefix():
    with pytest.raises(ValueError, match="needs a command prefix"):
        WrapTarget([])


def test_the_host_runner_reports_exit_status_and_both_streams():
    run = HostControlTarget().run_argv(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"], timeout_s=10)
    assert (run.exit_code, run.signal, run.stdout, run.stderr, run.timed_out) == (3, None, b"out\n", b"err\n", False)
    assert run.host_pid is not None


def test_a_wrap_target_runs_the_command_behind_its_prefix_with_the_callers_env():
    run = WrapTarget(["/usr/bin/env"]).run_python("import os; print(os.environ['PROBE_X'])", env={"PROBE_X": "42"})
    assert (run.exit_code, run.stdout) == (0, b"42\n")


def test_a_command_past_its_deadline_is_killed_and_marked_timed_out():
    run = HostControlTarget().run_argv(["/bin/sh", "-c", "exec sleep 30"], timeout_s=0.2)
    assert run.timed_out is True
    assert (run.exit_code, run.signal) == (None, 9)
    assert run.duration_s < 10


def test_a_detached_child_holding_the_pipes_cannot_stall_the_run():
    began = time.perf_counter()
    run = HostControlTarget().run_argv(["/bin/sh", "-c", "sleep 30 & echo parent-done"], timeout_s=20)
    assert (run.exit_code, run.stdout, run.timed_out) == (0, b"parent-done\n", False)
    assert time.perf_counter() - began < 10  # not the child's 30 s: its process group was killed


def test_a_backend_spec_is_looked_up_as_itself_then_as_its_kind():
    from contain.probe.targets import kind_keys

    assert kind_keys("container:runsc") == ("container:runsc", "container")
    assert kind_keys("process") == ("process",)
    assert kind_keys("wrap") == ("wrap",)


def test_a_contain_target_takes_the_spec_as_its_kind_and_name():
    from contain.probe.targets import ContainTarget, target_kind

    target = ContainTarget("container:runsc", label="relaxed control")
    assert (target.backend, target_kind(target), target.name) == (
        "container:runsc",
        "container:runsc",
        "contain:container:runsc (relaxed control)",
    )


def test_the_microvm_target_starts_from_a_boundary_its_backend_does_not_refuse():
    # With the process backend's 128 MiB, QEMU was OOM-killed in its cgroup before the guest
    # printed a byte: every microvm case was an ERROR "the guest did not come up".
    from contain.boundary import Boundary
    from contain.boundary.plain import plain_boundary
    from contain.runtime.microvm.backend import plan_microvm_refusals

    boundary = ContainTarget("microvm").boundary_for(None)
    assert plan_microvm_refusals(plain_boundary(Boundary.model_validate(boundary)), attachments=0) == ()
    assert boundary["resources"]["memory_bytes"] == 320 * 1024**2
    assert ContainTarget("process").boundary_for(None) == DEFAULT_PROBE_BOUNDARY


def test_a_target_without_a_warm_pool_has_nothing_to_close_and_counts_no_sandbox_yet():
    target = ContainTarget("microvm")
    target.close()
    assert (target.warm_pool, target.sandboxes_started) == (False, 0)


@pytest.mark.parametrize(
    ("override", "restorable"),
    [
        (None, False),  # the base boundary: the warm pool's
        ({}, False),
        ({"resources": {"memory_bytes": 512 * 1024**2}}, True),  # a stable template of its own
        ({"network": {"allow": [{"host": "a.test", "ports": [80]}]}}, True),
        ({"files": [{"host": "/tmp/x", "path": "/probe/x", "access": "read"}]}, False),  # imaged by content
        ({"files": [{"host": "/tmp/x", "path": "/probe/x", "access": "write"}]}, False),
        ({"files": [{"host": "/tmp/x", "path": "/probe/x"}]}, False),  # no access given: counted as a bind
        ({"files": [{"path": "/work/out", "access": "scratch", "export": "/tmp/o"}]}, True),  # nothing bound
        ({"files": [], "resources": {"pids_max": 8}}, True),
    ],
)
def test_only_overrides_that_bind_no_host_path_start_through_the_warm_start(override, restorable):
    assert is_restorable_override(override) is restorable


def test_a_warm_target_opens_one_warm_start_for_its_override_runs_and_closes_it(monkeypatch):
    import contain.runtime.sandbox as sandbox_module

    class Warm:
        closed = False

        def start(self, plan):  # pragma: no cover - never started here
            raise AssertionError

        def close(self) -> None:
            self.closed = True

    warm = Warm()

    class Capable:
        name = "microvm"
        opened = 0

        def open_warm_start(self) -> Warm:
            Capable.opened += 1
            return warm

        def start(self, plan):  # pragma: no cover - a warm target's override runs restore instead
            raise AssertionError

        def cgroup_joined_at_exec(self, facts) -> bool:
            return False

    class FakeSandbox:
        def __init__(self, manifest, *, backend=None) -> None:
            self.sandbox_backend = Capable()

    monkeypatch.setattr(sandbox_module, "Sandbox", FakeSandbox)
    target = ContainTarget("microvm", warm_pool=True)
    first, second = target._warm_backend(None), target._warm_backend(None)
    assert first.warm is warm and second.warm is warm and Capable.opened == 1
    assert first.name == "microvm"
    target.close()
    assert warm.closed


def test_the_microvm_pool_warms_up_with_the_attack_preludes_python(monkeypatch):
    import contain.runtime.sandbox as sandbox_module
    from contain.probe.targets import KIND_WARM_UP, _with_warm_up
    from contain.runtime.microvm.warm_start import MicroVMWarmStart

    class Inner:
        name = "microvm"

    class FakeSandbox:
        def __init__(self, manifest, *, backend=None) -> None:
            self.sandbox_backend = Inner()

    monkeypatch.setattr(sandbox_module, "Sandbox", FakeSandbox)
    backend = _with_warm_up("microvm", None)
    assert backend is not None and backend.name == "microvm"
    warm = backend.open_warm_start()
    assert isinstance(warm, MicroVMWarmStart)
    assert warm._warm_up_request.argv == KIND_WARM_UP["microvm"][0] == ("python3", "-c", "import ctypes, errno, json")
    assert (warm._warm_up_request.env, warm._warm_up_request.cwd) == ({}, "/")
    assert _with_warm_up("process", None) is None and _with_warm_up("container:runc", None) is None
