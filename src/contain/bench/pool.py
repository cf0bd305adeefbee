"""Warm-pool rows of the start-up bench: a sandbox from a warm pool beside a cold start, per backend.

For each backend spec, interleaved sample by sample in one run:
  - ``<backend>-pool``: ``SandboxPool.acquire()`` then ``run(["/bin/true"])``: the time from asking
    for a sandbox to the command's result;
  - ``<backend>-cold``: ``Sandbox(boundary, backend=spec)``, ``start()``, then the same run: the
    same span for a sandbox started on demand.
Before each timed sample, pooled or cold, the pool is full again (the refill waited for, untimed),
so no background start shares the CPUs with a timed sample. Both close their sandbox after the
clock stops: close costs the same either way (the pooled
sandbox is closed, never returned) and stays on the caller's thread in both.

What it does NOT show: throughput. The refill starts a sandbox on the same CPUs, so a pool
moves start-up off the task's critical path; it does not make a start cheaper. Does not assert
anything: benchmarks report; tests judge.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from contain.bench.startup import Summary, _summarise
from contain.boundary import Boundary
from contain.errors import PoolUnavailable
from contain.runtime import Sandbox
from contain.runtime.pool import SandboxPool

__all__ = ["measure_pool_startup", "pool_ratios", "render_pool"]

COMMAND = ["/bin/true"]
READY_TIMEOUT_S = 120.0  # a microVM's cold boot under TCG is seconds; nothing here should take minutes


def _check(result_exit: int | None, what: str) -> None:
    if result_exit != 0:
        raise RuntimeError(f"{what}: /bin/true exited {result_exit}")


def _wait_full(pool: SandboxPool, spec: str) -> None:
    """Untimed: no refill may run on the CPUs while a sample (pooled or cold) is timed."""
    if not pool.wait_ready(timeout_s=READY_TIMEOUT_S):
        raise PoolUnavailable(
            f"the {spec} pool did not fill within {READY_TIMEOUT_S:g}s: {pool.stats().last_error}",
            "run `contain doctor`",
        )


def _pooled_sample(pool: SandboxPool, spec: str) -> float:
    """Seconds from acquire to /bin/true's result."""
    began = time.perf_counter()
    lease = pool.acquire(timeout_s=READY_TIMEOUT_S)
    try:
        _check(lease.sandbox.run(COMMAND).exit_code, f"{spec}-pool")
        return time.perf_counter() - began
    finally:
        lease.close()


def _cold_sample(boundary: Boundary, spec: str) -> float:
    """Seconds from creating a sandbox to /bin/true's result."""
    began = time.perf_counter()
    sandbox = Sandbox(boundary, backend=spec)
    try:
        sandbox.start()
        _check(sandbox.run(COMMAND).exit_code, f"{spec}-cold")
        return time.perf_counter() - began
    finally:
        sandbox.close()


def measure_pool_startup(*, rounds: int, backends: Sequence[str] = ("process",), size: int = 2) -> dict[str, Summary]:
    """Sample ``<backend>-pool/true`` and ``<backend>-cold/true`` ``rounds`` times per backend.

    Args:
        rounds: samples per row.
        backends: backend specs (as ``Sandbox`` takes them).
        size: the pool's size.

    Raises:
        PoolUnavailable: the pool could not start a sandbox (its cause is the start's).
    """
    boundary = Boundary()
    summaries: dict[str, Summary] = {}
    for spec in backends:
        pooled: list[float] = []
        cold: list[float] = []
        with SandboxPool(boundary, backend=spec, size=size) as pool:
            _wait_full(pool, spec)
            _pooled_sample(pool, spec), _cold_sample(boundary, spec)  # warm the caches once, untimed
            for _ in range(rounds):
                _wait_full(pool, spec)
                pooled.append(_pooled_sample(pool, spec))
                _wait_full(pool, spec)  # the replacement's start must not overlap the cold sample
                cold.append(_cold_sample(boundary, spec))
        for name, values in ((f"{spec}-pool/true", pooled), (f"{spec}-cold/true", cold)):
            summaries[name] = _summarise(name, values)
    return summaries


def pool_ratios(summaries: dict[str, Summary]) -> dict[str, float]:
    """``<backend>`` -> pool median / cold median, for each backend measured."""
    ratios: dict[str, float] = {}
    for name, summary in summaries.items():
        if name.endswith("-pool/true"):
            cold = summaries.get(name.replace("-pool/", "-cold/"))
            if cold is not None and cold.median_s > 0:
                ratios[name.removesuffix("-pool/true")] = summary.median_s / cold.median_s
    return ratios


def render_pool(summaries: dict[str, Summary]) -> list[str]:
    """One line per backend: acquire + run from a warm pool against start + run, medians."""
    lines = []
    for backend, ratio in pool_ratios(summaries).items():
        pool, cold = summaries[f"{backend}-pool/true"], summaries[f"{backend}-cold/true"]
        lines.append(
            f"{backend}: warm pool acquire + /bin/true {pool.median_s * 1e3:.2f} ms vs cold start + /bin/true "
            f"{cold.median_s * 1e3:.2f} ms = {ratio:.2f}x"
        )
    return lines
