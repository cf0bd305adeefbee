"""Bench summaries and the report: percentiles, ratios and the rendered targets (no sandbox run)."""

from __future__ import annotations

from contain.bench.startup import StartupReport, Summary, _raw_bwrap_argv, _summarise, render_startup


def test_a_summary_has_the_median_and_the_nearest_rank_p95():
    summary = _summarise("x", [float(n) for n in range(20, 0, -1)])  # unsorted on purpose
    assert summary == Summary("x", 20, 10.5, 19.0)
    assert summary.to_dict() == {"name": "x", "samples": 20, "median_ms": 10500.0, "p95_ms": 19000.0}
    assert _summarise("one", [0.5]) == Summary("one", 1, 0.5, 0.5)


def _report(throughput: dict[str, float] | None = None) -> StartupReport:
    def s(name: str, median: float) -> Summary:
        return Summary(name, 3, median, median)

    summaries = {
        "bwrap/true": s("bwrap/true", 0.010),
        "bwrap/python": s("bwrap/python", 0.040),
        "bwrap-minimal/true": s("bwrap-minimal/true", 0.005),
        "contain-api/true": s("contain-api/true", 0.015),
        "contain-api/python": s("contain-api/python", 0.050),
        "contain-cli/true": s("contain-cli/true", 0.080),
    }
    return StartupReport(summaries, throughput or {})


def test_the_report_ratios_compare_medians():
    ratios = _report().to_dict()["ratios"]
    assert ratios == {
        "api_true_over_bwrap_true": 1.5,
        "api_python_over_bwrap_python": 1.25,
        "api_true_over_bwrap_minimal_true": 3.0,
    }


def test_the_rendered_report_states_each_ratio_beside_its_target():
    text = render_startup(_report())
    assert "contain-api/true vs bwrap/true: 1.50x (target <= 2x)" in text
    assert "contain-api/true vs bwrap-minimal/true: 3.00x" in text
    assert "contain-cli/true median: 80.0 ms (target <= 120 ms)" in text
    assert "throughput" not in text  # none measured: no line


def test_the_rendered_report_includes_throughput_when_measured():
    throughput = {
        "bare_per_s": 100.0,
        "bwrap_per_s": 50.0,
        "bwrap_ratio": 0.5,
        "contain_per_s": 40.0,
        "ratio": 0.4,
        "contain_session_per_s": 70.0,
        "session_ratio": 0.7,
    }
    assert "a session per worker 70.0/s = 0.70x (target >= 0.6x)" in render_startup(_report(throughput))


def test_raw_bwrap_minimal_has_no_etc_and_unshares_everything():
    argv = _raw_bwrap_argv(["/bin/true"], etc_tree=None)
    assert argv[:4] == ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    assert "/etc" not in argv
    assert argv[-1] == "/bin/true"
