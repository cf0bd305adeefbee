"""The fleet bench's report: ratios against bare Ray tasks per workload and node count (no cluster)."""

from __future__ import annotations

from contain.bench.fleet import FleetBenchReport, RunFigures, render_fleet


def _run(variant: str, workload: str, nodes: int, elapsed: float, steady: float) -> RunFigures:
    return RunFigures(variant, workload, nodes, 200, 200, elapsed, steady, 0.01, 0.05)


def test_ratios_compare_each_contain_variant_with_bare_on_the_same_workload_and_nodes() -> None:
    report = FleetBenchReport(2, (
        _run("bare", "echo", 1, 2.0, 2.0), _run("contain-warm", "echo", 1, 8.0, 4.0),
        _run("contain-cold", "echo", 1, 10.0, 5.0), _run("bare", "echo", 2, 1.0, 1.0),
        _run("contain-warm", "echo", 2, 2.0, 1.25),
    ))
    assert report.ratios() == {
        "echo contain-warm 1n": 0.25, "echo contain-warm 1n steady": 0.5,
        "echo contain-cold 1n": 0.2, "echo contain-cold 1n steady": 0.4,
        "echo contain-warm 2n": 0.5, "echo contain-warm 2n steady": 0.8,
    }
    text = render_fleet(report)
    assert "echo contain-warm 2n steady" in text and "0.80x bare (target >= 0.70x)" in text
    assert report.to_dict()["runs"][0] == {  # type: ignore[index]
        "variant": "bare", "workload": "echo", "nodes": 1, "jobs": 200, "ok": 200, "elapsed_s": 2.0,
        "jobs_per_s": 100.0, "steady_jobs_per_s": 100.0, "p50_ms": 10.0, "p99_ms": 50.0,
    }


def test_the_oneshot_variant_is_compared_too_and_the_sessions_open_time_is_reported_apart() -> None:
    report = FleetBenchReport(
        2, (_run("bare", "echo", 1, 2.0, 2.0), _run("contain-oneshot", "echo", 1, 4.0, 2.5)), {1: 1.5}
    )
    assert report.ratios() == {"echo contain-oneshot 1n": 0.5, "echo contain-oneshot 1n steady": 0.8}
    assert report.to_dict()["session_open_s"] == {"1": 1.5}
    assert "1 node(s) 1.50s" in render_fleet(report)
