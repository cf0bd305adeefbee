"""The warm-pool bench rows: ratios and the rendered lines (no sandbox run)."""

from __future__ import annotations

import os

import pytest

from contain.bench.pool import extra_accelerator_labels, pool_ratios, read_vmm_memory_kib, render_pool
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


def test_the_rendered_line_adds_acquire_alone_when_it_was_measured():
    summaries = {**SUMMARIES, "process-pool-acquire": s("process-pool-acquire", 0.00005)}
    assert render_pool(summaries) == [
        "process: warm pool acquire + /bin/true 2.00 ms vs cold start + /bin/true 8.00 ms = 0.25x; "
        "acquire() alone 0.05 ms"
    ]


@pytest.mark.parametrize(
    ("spec", "line", "extra"),
    [
        ("microvm", "kvm (the guest kernel booted under KVM in 0.9 s)", (("microvm[tcg]", "tcg"),)),
        ("microvm", "tcg (software emulation: KVM does not boot the guest here: ...)", ()),
        ("microvm", "tcg (runtime.microvm.accel: tcg)", ()),
        ("microvm", "", ()),
        ("process", "kvm looking text from elsewhere", ()),
    ],
)
def test_a_tcg_set_is_measured_beside_only_where_accel_auto_picked_kvm(spec, line, extra):
    assert extra_accelerator_labels(spec, line) == extra


def test_vmm_memory_is_read_from_smaps_rollup_rss_and_pss():
    rss, pss = read_vmm_memory_kib(os.getpid())
    assert rss > 0 and 0 < pss <= rss
