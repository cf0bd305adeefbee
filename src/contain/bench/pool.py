"""Warm-pool and cold-start rows of the start-up bench (the ladder), per backend, in one run.

For each backend spec, interleaved sample by sample:
  - ``<label>-pool/true``: ``SandboxPool.acquire()`` then ``run(["/bin/true"])``: the time from asking
    for a sandbox to the command's result (the **warm** start);
  - ``<label>-pool-acquire``: the ``acquire()`` part of that sample alone;
  - ``<label>-cold/true`` and ``<label>-cold/python``: ``Sandbox(boundary, backend=spec)``,
    ``start()``, then ``run`` of the command: the same span for a sandbox started on demand (the
    **cold** start, to the first exec's result).
Before each timed sample, pooled or cold, the pool is full again (the refill waited for, untimed),
so no background start shares the CPUs with a timed sample. Both close their sandbox after the
clock stops: close costs the same either way (the pooled sandbox is closed, never returned) and
stays on the caller's thread in both.

For the microvm backend (``MEMORY_BACKENDS``) each sample also reads the VMM's host memory, after
the clock stopped: QEMU's ``/proc/<pid>/smaps_rollup`` (Rss, Pss) for the cold-booted VM right
after its first command, and for the restored (pooled) VM right after ``acquire()``, before it ran
anything: one figure per idle VM. Only the QEMU process is counted (the guest's RAM is QEMU's
memory); a socat connector (egress only; the default boundary has none) is not.

The microvm rows are measured under the accelerator ``accel: auto`` decides
(``microvm/accel.decide_accelerator``; the label is ``microvm``). Only where that decision picked
KVM is the same set measured again with ``runtime.microvm.accel: tcg`` (label ``microvm[tcg]``), so
the KVM figures stand beside TCG ones; where it picked TCG there are no KVM figures, and the
decision's reason is what the report shows instead (``PoolMeasurement.accelerators``).

What it does NOT show: throughput. The refill starts a sandbox on the same CPUs, so a pool
moves start-up off the task's critical path; it does not make a start cheaper. Does not assert
anything: benchmarks report; tests judge.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from contain.bench.startup import COMMANDS, Summary, _summarise
from contain.boundary import Boundary
from contain.errors import PoolUnavailable
from contain.runtime import Sandbox
from contain.runtime.pool import SandboxPool

__all__ = [
    "MemorySummary",
    "PoolMeasurement",
    "extra_accelerator_labels",
    "measure_pool_startup",
    "pool_ratios",
    "read_vmm_memory_kib",
    "render_pool",
]

COMMAND = COMMANDS["true"]
READY_TIMEOUT_S = 120.0  # a microVM's cold boot under TCG is seconds; nothing here should take minutes
MEMORY_BACKENDS = ("microvm",)  # whose sandbox's host_pid is a VMM worth weighing


@dataclass(frozen=True)
class MemorySummary:
    """Host memory of one kind of idle VM's VMM (medians over samples, KiB)."""

    name: str  # e.g. "microvm-cold", "microvm-pool"
    samples: int
    rss_kib: float
    pss_kib: float

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "samples": self.samples, "rss_kib": self.rss_kib, "pss_kib": self.pss_kib}


@dataclass(frozen=True)
class PoolMeasurement:
    """What ``measure_pool_startup`` measured: time rows, VMM memory rows, and per label the
    accelerator line the sandboxes reported (``RunResult.layers["accelerator"]``; microvm only)."""

    summaries: dict[str, Summary]
    memory: dict[str, MemorySummary] = field(default_factory=dict)
    accelerators: dict[str, str] = field(default_factory=dict)


def read_vmm_memory_kib(pid: int) -> tuple[int, int]:
    """``(Rss, Pss)`` in KiB of process ``pid``, from ``/proc/<pid>/smaps_rollup``.

    Raises:
        OSError: the process is gone or the file cannot be read.
    """
    rss = pss = 0
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                value = int(rest.split()[0])
                rss, pss = (value, pss) if key == "Rss" else (rss, value)
    return rss, pss


def extra_accelerator_labels(spec: str, accelerator_line: str) -> tuple[tuple[str, str], ...]:
    """``(label, accel)`` sets measured besides ``spec`` under ``accel: auto``: a TCG set only
    where auto picked KVM (so KVM figures stand beside TCG ones). Pure.

    ``accelerator_line`` is the started sandbox's ``layers["accelerator"]``, which starts with the
    accelerator's name (``microvm/accel.AccelChoice.reason``).
    """
    if spec == "microvm" and accelerator_line.startswith("kvm"):
        return ((f"{spec}[tcg]", "tcg"),)
    return ()


def _check(result_exit: int | None, what: str) -> None:
    if result_exit != 0:
        raise RuntimeError(f"{what}: the command exited {result_exit}")


def _wait_full(pool: SandboxPool, label: str) -> None:
    """Untimed: no refill may run on the CPUs while a sample (pooled or cold) is timed."""
    if not pool.wait_ready(timeout_s=READY_TIMEOUT_S):
        raise PoolUnavailable(
            f"the {label} pool did not fill within {READY_TIMEOUT_S:g}s: {pool.stats().last_error}",
            "run `contain doctor`",
        )


@dataclass
class _Samples:
    times: dict[str, list[float]] = field(default_factory=dict)
    memory: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.times.setdefault(name, []).append(seconds)

    def weigh(self, name: str, sandbox: Sandbox) -> None:
        pid = sandbox.supervisor_pid
        if pid is not None:
            self.memory.setdefault(name, []).append(read_vmm_memory_kib(pid))


def _pooled_sample(pool: SandboxPool, label: str, out: _Samples, *, weigh: bool) -> None:
    """``<label>-pool/true`` (acquire to /bin/true's result) and ``<label>-pool-acquire``; the
    memory read between them is not timed."""
    began = time.perf_counter()
    lease = pool.acquire(timeout_s=READY_TIMEOUT_S)
    acquired_s = time.perf_counter() - began
    try:
        if weigh:
            out.weigh(f"{label}-pool", lease.sandbox)
        began = time.perf_counter()
        _check(lease.sandbox.run(COMMAND).exit_code, f"{label}-pool")
        out.add(f"{label}-pool/true", acquired_s + time.perf_counter() - began)
        out.add(f"{label}-pool-acquire", acquired_s)
    finally:
        lease.close()


def _cold_sample(boundary: Boundary, spec: str, label: str, command: str, out: _Samples, *, weigh: bool) -> str:
    """``<label>-cold/<command>``: creating a sandbox to the command's result. Returns the sandbox's
    accelerator line (empty for backends without one)."""
    began = time.perf_counter()
    sandbox = Sandbox(boundary, backend=spec)
    try:
        sandbox.start()
        _check(sandbox.run(COMMANDS[command]).exit_code, f"{label}-cold/{command}")
        out.add(f"{label}-cold/{command}", time.perf_counter() - began)
        if weigh and command == "true":
            out.weigh(f"{label}-cold", sandbox)
        return sandbox.layers.get("accelerator", "")
    finally:
        sandbox.close()


def _measure_one(boundary: Boundary, spec: str, label: str, *, rounds: int, size: int, out: _Samples) -> str:
    """Every row of one label; returns the accelerator line of its warm-up cold start."""
    weigh = spec in MEMORY_BACKENDS
    scratch = _Samples()
    with SandboxPool(boundary, backend=spec, size=size) as pool:
        _wait_full(pool, label)
        _pooled_sample(pool, label, scratch, weigh=False)  # warm the caches once, untimed
        accelerator = _cold_sample(boundary, spec, label, "true", scratch, weigh=False)
        for _ in range(rounds):
            _wait_full(pool, label)
            _pooled_sample(pool, label, out, weigh=weigh)
            for command in COMMANDS:
                _wait_full(pool, label)  # the replacement's start must not overlap the cold sample
                _cold_sample(boundary, spec, label, command, out, weigh=weigh)
    return accelerator


def _with_accel(accel: str) -> Boundary:
    return Boundary.model_validate({"runtime": {"microvm": {"accel": accel}}})


def measure_pool_startup(*, rounds: int, backends: Sequence[str] = ("process",), size: int = 2) -> PoolMeasurement:
    """Sample the pool and cold rows ``rounds`` times per backend (see the module docstring).

    Args:
        rounds: samples per row.
        backends: backend specs (as ``Sandbox`` takes them).
        size: the pool's size.

    Raises:
        PoolUnavailable: the pool could not start a sandbox (its cause is the start's).
    """
    boundary = Boundary()
    out = _Samples()
    accelerators: dict[str, str] = {}
    for spec in backends:
        accelerator = _measure_one(boundary, spec, spec, rounds=rounds, size=size, out=out)
        if accelerator:
            accelerators[spec] = accelerator
        for label, accel in extra_accelerator_labels(spec, accelerator):
            accelerators[label] = _measure_one(_with_accel(accel), spec, label, rounds=rounds, size=size, out=out)
    summaries = {name: _summarise(name, values) for name, values in out.times.items()}
    memory = {
        name: MemorySummary(
            name,
            len(pairs),
            statistics.median(p[0] for p in pairs),
            statistics.median(p[1] for p in pairs),
        )
        for name, pairs in out.memory.items()
    }
    return PoolMeasurement(summaries, memory, accelerators)


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
    """One line per backend: acquire + run from a warm pool against start + run, medians, and
    ``acquire()`` alone where it was measured."""
    lines = []
    for backend, ratio in pool_ratios(summaries).items():
        pool, cold = summaries[f"{backend}-pool/true"], summaries[f"{backend}-cold/true"]
        acquire = summaries.get(f"{backend}-pool-acquire")
        alone = "" if acquire is None else f"; acquire() alone {acquire.median_s * 1e3:.2f} ms"
        lines.append(
            f"{backend}: warm pool acquire + /bin/true {pool.median_s * 1e3:.2f} ms vs cold start + /bin/true "
            f"{cold.median_s * 1e3:.2f} ms = {ratio:.2f}x{alone}"
        )
    return lines
