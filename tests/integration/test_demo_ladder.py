"""`make demo` part 3 (examples/demo/ladder.py): which backends run is doctor's call, a skip quotes
doctor, and the task's one line comes back from a real sandbox."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "demo"
sys.path.insert(0, str(EXAMPLE))

from ladder import LADDER, Step, plan_ladder, run_step, short_layers  # noqa: E402

OK = ("ok", "works", "")


def test_every_backend_with_an_ok_verdict_runs_in_ladder_order():
    verdicts = {verdict: OK for _, verdict in LADDER}
    assert plan_ladder(verdicts) == [Step(spec, None) for spec, _ in LADDER]
    assert [spec for spec, _ in LADDER] == ["process", "container:runc", "container:runsc", "microvm"]


def test_a_backend_doctor_does_not_call_ok_is_skipped_with_doctors_detail_and_fix():
    verdicts = {verdict: OK for _, verdict in LADDER}
    verdicts["microvm backend"] = ("warn", "qemu: not installed; accelerator: TCG", "apt-get install qemu-system-x86")
    verdicts["container:runsc"] = ("fail", "runsc refused: no usable platform", "")
    steps = {s.spec: s.skip_reason for s in plan_ladder(verdicts)}
    assert steps["microvm"] == (
        "doctor: microvm backend: warn: qemu: not installed; accelerator: TCG (fix: apt-get install qemu-system-x86)"
    )
    assert steps["container:runsc"] == "doctor: container:runsc: fail: runsc refused: no usable platform"
    assert steps["process"] is None and steps["container:runc"] is None


def test_a_backend_doctor_gave_no_verdict_for_is_skipped_not_run():
    steps = plan_ladder({"process backend": OK})
    assert [s.spec for s in steps if s.skip_reason is None] == ["process"]
    assert all("doctor gave no verdict" in (s.skip_reason or "") for s in steps[1:])


def test_layer_lines_are_cut_to_their_first_clause():
    layers = {
        "seccomp": "applied",
        "accelerator": "tcg (software emulation: KVM does not boot the guest here)",
        "cgroups": "memory, pids, cpu; v1",
        "namespaces": "a guest kernel of its own (QEMU -M microvm)",
    }
    assert short_layers(layers) == (
        "seccomp=applied accelerator=tcg cgroups=memory, pids, cpu namespaces=a guest kernel of its o~"
    )


@pytest.mark.needs_bwrap
@pytest.mark.needs_root
def test_the_task_runs_on_the_process_backend_and_prints_its_summary_line():
    line = run_step("process")
    assert line.startswith("process          exit 0 ")
    assert "'6 invoices, 13765.75 EUR'" in line
    assert "seccomp=applied" in line
