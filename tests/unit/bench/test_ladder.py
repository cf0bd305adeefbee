"""The ladder: microvm rows against their targets, TCG and KVM columns, the chart's series (pure)."""

from __future__ import annotations

import pytest

from contain.bench.ladder import (
    LADDER_KINDS,
    MICROVM_TARGETS,
    ladder_rows,
    ladder_series,
    memory_label,
    render_ladder,
)
from contain.bench.pool import MemorySummary
from contain.bench.startup import Summary, _summarise, session_variant

TCG_LINE = "tcg (software emulation: KVM does not boot the guest here: QEMU exited with status -6)"
KVM_LINE = "kvm (the guest kernel booted under KVM in 0.9 s)"


def _microvm(label: str, scale: float) -> dict[str, Summary]:
    rows = {
        f"{label}-cold/true": [2.0, 2.5, 4.0],
        f"{label}-cold/python": [3.0, 3.5, 4.0],
        f"{label}-pool/true": [0.2, 0.25, 0.4],
        f"{label}-pool-acquire": [0.0001, 0.0001, 0.0001],
        f"contain-session[{label}]/true": [0.02, 0.03, 0.04],
    }
    return {name: _summarise(name, [v * scale for v in values]) for name, values in rows.items()}


def test_under_tcg_every_figure_is_in_the_tcg_column_and_the_kvm_column_says_why_it_is_empty():
    rows = ladder_rows(_microvm("microvm", 1.0), {"microvm": TCG_LINE})
    assert [r.target for r in rows] == list(MICROVM_TARGETS)
    assert all(r.tcg.summary is not None for r in rows)
    assert all(r.kvm.summary is None for r in rows)
    assert {r.kvm.note for r in rows} == {"not measured: accel auto picked TCG here (reason above)"}
    met = {r.target.figure: r.is_met(r.tcg) for r in rows}
    assert met == {
        "cold: start to the first exec of /bin/true": True,  # median 2.5 s <= 3.0 s
        "cold: start to the first exec of python3 -c pass": None,  # reported, no target
        "warm: pool acquire + /bin/true": True,  # 0.25 <= 0.30
        "pool acquire() alone": None,
        "/bin/true in a running VM (session)": False,  # 30 ms > 25 ms
    }


def test_where_auto_picked_kvm_the_tcg_set_fills_the_tcg_column_beside_it():
    summaries = {**_microvm("microvm", 0.1), **_microvm("microvm[tcg]", 1.0)}
    rows = ladder_rows(summaries, {"microvm": KVM_LINE, "microvm[tcg]": "tcg (runtime.microvm.accel: tcg)"})
    cold = rows[0]
    assert cold.kvm.summary is not None and cold.kvm.summary.name == "microvm-cold/true"
    assert cold.tcg.summary is not None and cold.tcg.summary.name == "microvm[tcg]-cold/true"


def test_without_microvm_there_is_no_table():
    assert ladder_rows({"process-cold/true": Summary("process-cold/true", 1, 0.01, 0.01)}, {}) == []
    assert render_ladder({}, {}, {}) == []


def test_every_target_reads_a_row_the_bench_produces():
    # pool.py names "<label>-cold/<cmd>", "<label>-pool/true", "<label>-pool-acquire"; startup.py the session
    produced = {
        "microvm-cold/true",
        "microvm-cold/python",
        "microvm-pool/true",
        "microvm-pool-acquire",
        f"{session_variant('microvm')}/true",
    }
    assert {t.variant.format(label="microvm") for t in MICROVM_TARGETS} == produced
    assert {k.format(label="microvm") for _, k in LADDER_KINDS} <= produced


def test_the_series_lists_cold_then_warm_per_backend_in_the_given_order_and_skips_unmeasured():
    summaries = {**_microvm("microvm", 1.0), "process-cold/true": Summary("process-cold/true", 1, 0.01, 0.01)}
    series = ladder_series(summaries, ["process", "microvm", "container:runc"])
    assert [(b, r) for b, r, _ in series] == [("process", "cold"), ("microvm", "cold"), ("microvm", "warm")]


def test_the_text_table_marks_missed_targets_and_states_the_decision_once():
    memory = {"microvm-pool": MemorySummary("microvm-pool", 3, 180 * 1024, 160 * 1024)}
    lines = render_ladder(_microvm("microvm", 2.0), {"microvm": TCG_LINE}, memory)
    assert lines[0] == f"microvm: accelerator decision: {TCG_LINE}"
    cold = next(line for line in lines if line.startswith("cold: start to the first exec of /bin/true"))
    assert "5000.0 (8000.0) MISSED" in cold and "<= 3000 ms" in cold
    assert sum("KVM column:" in line for line in lines) == 1
    assert lines[-1] == (
        "VMM host memory per idle VM, microvm, restored from the pool (before its first command): "
        "RSS 180.0 MiB, PSS 160.0 MiB (median of 3)"
    )


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("microvm-cold", "microvm, cold-booted (after its first command)"),
        ("microvm[tcg]-pool", "microvm[tcg], restored from the pool (before its first command)"),
    ],
)
def test_memory_rows_say_which_vm_was_weighed(name, label):
    assert memory_label(name) == label
