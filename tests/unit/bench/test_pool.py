"""The warm-pool bench rows: ratios and the rendered lines (no sandbox run)."""

from __future__ import annotations

from contain.bench.pool import pool_ratios, render_pool
from contain.bench.startup import Summary


def s(name: str, median: float) -> Summary:
    return Summary(name, 5, median, median * 1.5)


SUMMARIES = {
    "contain-api/true": s("contain-api/true", 0.010),
    "process-pool/true": s("process-pool/true", 0.002),
    "process-cold/true": s("process-cold/true", 0.008),
    "microvm-pool/true": s("microvm-pool/true", 0.300),  # no cold row measured: no ratio
}


def test_the_pool_ratio_is_the_pool_median_over_the_cold_median_per_backend():
    assert pool_ratios(SUMMARIES) == {"process": 0.25}


def test_one_rendered_line_per_backend_names_both_medians_and_the_ratio():
    assert render_pool(SUMMARIES) == [
        "process: warm pool acquire + /bin/true 2.00 ms vs cold start + /bin/true 8.00 ms = 0.25x"
    ]
