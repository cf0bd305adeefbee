"""Benchmarks: start-up, throughput; reported as medians and ratios against baselines."""

from contain.bench.startup import StartupReport, Summary, measure_startup, measure_throughput, render_startup

__all__ = ["StartupReport", "Summary", "measure_startup", "measure_throughput", "render_startup"]
