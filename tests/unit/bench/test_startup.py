"""Bench summaries and the report: percentiles, ratios and the rendered targets (no sandbox run)."""

from __future__ import annotations

import pytest

from contain.bench.startup import (
    BACKEND_TARGETS,
    StartupReport,
    Summary,
    _raw_bwrap_argv,
    _summarise,
    backend_rows,
    bench_backends,
    render_startup,
)
from contain.errors import UnknownBackend, UnsupportedHost


def test_a_summary_has_the_median_and_the_nearest_rank_p95():
    summary = _summarise("x", [float(n) for n in range(20, 0, -1)])  # unsorted on purpose
    assert summary == Summary("x", 20, 10.5, 19.0)
    assert summary.values_s == tuple(float(n) for n in range(20, 0, -1))  # kept in measurement order
    assert summary.to_dict() == {
        "name": "x",
        "samples": 20,
        "median_ms": 10500.0,
        "p95_ms": 19000.0,
        "samples_ms": [float(n) * 1e3 for n in range(20, 0, -1)],
    }
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


def _container_report() -> StartupReport:
    def s(name: str, median: float) -> Summary:
        return Summary(name, 3, median, median)

    names = {
        "raw-runc/true": 0.040,
        "contain-api[container:runc]/true": 0.050,
        "contain-session[container:runc]/true": 0.005,
        "raw-runsc/true": 0.200,
        "contain-api[container:runsc]/true": 0.300,
        "contain-session[container:runsc]/true": 0.030,
    }
    return StartupReport({n: s(n, v) for n, v in names.items()}, {})


def test_each_measured_backend_gets_a_row_with_its_baseline_api_and_session():
    rows = {(r.backend, r.command): r for r in backend_rows(_container_report())}
    assert set(rows) == {("container:runc", "true"), ("container:runsc", "true")}  # process not measured
    runc, runsc = rows["container:runc", "true"], rows["container:runsc", "true"]
    assert (runc.ratio, runc.max_ratio, runc.session_over_fresh) == (pytest.approx(1.25), 1.5, pytest.approx(0.1))
    assert (runsc.ratio, runsc.max_ratio) == (pytest.approx(1.5), 1.3)
    assert runc.to_dict()["baseline"] == "raw `runc run` of contain's bundle"


def test_without_the_process_backend_the_process_ratios_are_left_out():
    document = _container_report().to_dict()
    assert document["ratios"] == {}
    assert [b["backend"] for b in document["backends"]] == ["container:runc", "container:runsc"]  # type: ignore[index]


def test_the_rendered_report_states_each_backend_beside_its_target():
    text = render_startup(_container_report())
    assert "contain-api[container:runc]/true vs raw-runc/true: 1.25x (target <= 1.5x)" in text
    assert "contain-api[container:runsc]/true vs raw-runsc/true: 1.50x (target <= 1.3x)" in text
    assert "bwrap" not in text


def test_the_process_backend_row_compares_the_api_with_raw_bwrap_and_the_session():
    report = _report()
    report.summaries["contain-session/true"] = Summary("contain-session/true", 3, 0.003, 0.003)
    row = next(r for r in backend_rows(report) if (r.backend, r.command) == ("process", "true"))
    assert (row.baseline_s, row.api_s, row.session_s) == (0.010, 0.015, 0.003)
    assert row.max_ratio == 2.0


def test_bench_backends_resolves_container_to_runc_and_keeps_order_without_repeats():
    assert bench_backends("container:runsc, process,container,container:runc") == (
        "container:runsc",
        "process",
        "container:runc",
    )


@pytest.mark.parametrize("text", ["container:crun", "", "process,bwrap"])
def test_bench_backends_refuses_unknown_backends_as_the_runtime_does(text: str):
    with pytest.raises(UnknownBackend):
        bench_backends(text)


def test_bench_backends_takes_microvm_for_its_absolute_targets():
    assert bench_backends("process,microvm") == ("process", "microvm")


def test_bench_backends_refuses_a_backend_it_has_neither_a_baseline_nor_targets_for(monkeypatch):
    import contain.bench.startup as startup

    monkeypatch.setattr(startup, "ABSOLUTE_TARGET_BACKENDS", ())
    with pytest.raises(UnsupportedHost, match="no start-up baseline for backend 'microvm'"):
        bench_backends("process,microvm")


@pytest.mark.parametrize("target", BACKEND_TARGETS, ids=lambda t: t.backend)
def test_every_backend_target_names_the_baseline_variant_the_bench_measures_for_it(target):
    # measure_startup names the raw runtime "raw-<runtime>"; the process backend's is raw bwrap
    expected = "bwrap" if target.backend == "process" else f"raw-{target.backend.partition(':')[2]}"
    assert target.baseline == expected
    assert bench_backends(target.backend) == (target.backend,)
