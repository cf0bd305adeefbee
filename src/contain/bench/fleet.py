"""`contain bench fleet`: contain on Ray against bare Ray tasks, one node and two, warm and cold.

Each variant runs every workload of ``WORKLOADS``. For each node count (default 1 and 2) one local
cluster is started (``LocalCluster``: each node
1 Ray CPU and ``slots`` sandbox slots) and, on that same cluster:

  - ``bare``: ``jobs`` Ray tasks, each running the command with ``subprocess.run``, no sandbox;
    at most nodes x slots in flight (the same cap the fleet's slots give), each task asking one
    ``contain_backend_process`` unit so tasks spread over the nodes as the fleet's jobs do;
  - ``contain-warm``: the same command as ``jobs`` fleet jobs, the manifest keeping ``slots`` warm
    sandboxes per node (``fleet.warm_sandboxes``), on one ``FleetSession`` per cluster: its pool
    actors are started once (``session_open_s``, reported apart), as bare Ray's workers are
    started before its tasks, and serve every round's batch;
  - ``contain-cold``: the same with ``warm_sandboxes: 0`` (every job starts its sandbox);
  - ``contain-oneshot``: as ``contain-warm`` but each batch through ``run_batch`` alone, which
    starts its own pool actors and stops them at its end (the cost a one-batch run pays);
  - ``latency-warm`` / ``latency-cold``: ``latency_jobs`` fleet jobs (first workload) one at a time
    (``max_in_flight=1``) on the session, so each job's latency is its own and not a queue's.

The variants take turns: each one's jobs are split into ``rounds`` batches run round-robin with
the order rotating, so load from other work on a shared host hits every variant alike.
Throughput is jobs/s over the whole batches. ``steady`` counts from the moment the batch's
actors were ready (for ``contain-oneshot``, after its own actors' start; for the session variants
the same as jobs/s). Latency is a job's first send to its report.

Does not assert anything: benchmarks report; tests judge.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contain.fleet.summary import percentile

if TYPE_CHECKING:
    from contain.fleet.session import FleetSession

__all__ = ["FleetBenchReport", "RunFigures", "measure_fleet", "render_fleet"]

# The short jobs measured: one that is nearly all start-up (a shell echo, about 3 ms bare), and
# one with about 0.1 s of CPU work (a short evaluation step), where start-up is amortised.
# Absolute paths, so the bare task and the sandbox run the same binary: on this host a bare
# `python3` on a Ray worker's PATH is a pyenv shim (a shell script) that costs 0.2 s more.
WORKLOADS: dict[str, list[str]] = {
    "echo": ["/bin/sh", "-c", "echo ok"],
    "cpu-100ms": ["/usr/bin/python3", "-c", "sum(i * i for i in range(2_500_000))"],
}


@dataclass(frozen=True)
class RunFigures:
    """One variant on one cluster."""

    variant: str
    workload: str
    nodes: int
    jobs: int
    ok: int
    elapsed_s: float
    steady_s: float  # from the pool actors' answer (bare: the same as elapsed_s)
    p50_s: float
    p99_s: float

    @property
    def jobs_per_s(self) -> float:
        return self.ok / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def steady_jobs_per_s(self) -> float:
        return self.ok / self.steady_s if self.steady_s > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "variant": self.variant, "workload": self.workload, "nodes": self.nodes, "jobs": self.jobs, "ok": self.ok,
            "elapsed_s": round(self.elapsed_s, 3), "jobs_per_s": round(self.jobs_per_s, 2),
            "steady_jobs_per_s": round(self.steady_jobs_per_s, 2),
            "p50_ms": round(self.p50_s * 1e3, 1), "p99_ms": round(self.p99_s * 1e3, 1),
        }


@dataclass(frozen=True)
class FleetBenchReport:
    slots: int
    runs: tuple[RunFigures, ...] = field(default=())
    session_open_s: dict[int, float] = field(default_factory=dict)  # nodes -> the session's actor start

    def get(self, variant: str, workload: str, nodes: int) -> RunFigures | None:
        return next(
            (r for r in self.runs if (r.variant, r.workload, r.nodes) == (variant, workload, nodes)), None
        )

    def ratios(self) -> dict[str, float]:
        """contain jobs/s over bare jobs/s, per workload and node count (whole run, and steady)."""
        out: dict[str, float] = {}
        for workload in dict.fromkeys(r.workload for r in self.runs):
            for nodes in sorted({r.nodes for r in self.runs}):
                bare = self.get("bare", workload, nodes)
                for variant in ("contain-warm", "contain-cold", "contain-oneshot"):
                    run = self.get(variant, workload, nodes)
                    if bare and run and bare.jobs_per_s:
                        out[f"{workload} {variant} {nodes}n"] = run.jobs_per_s / bare.jobs_per_s
                        out[f"{workload} {variant} {nodes}n steady"] = run.steady_jobs_per_s / bare.jobs_per_s
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "slots": self.slots,
            "session_open_s": {str(n): round(v, 3) for n, v in self.session_open_s.items()},
            "runs": [r.to_dict() for r in self.runs],
            "ratios": {k: round(v, 3) for k, v in self.ratios().items()},
        }


def measure_fleet(
    *,
    node_counts: tuple[int, ...] = (1, 2),
    workloads: tuple[str, ...] = tuple(WORKLOADS),
    jobs: int = 200,
    latency_jobs: int = 40,
    slots: int = 2,
    rounds: int = 4,
) -> FleetBenchReport:
    """Run every variant on a fresh local cluster per node count (see the module docstring).

    Each variant's jobs are split into ``rounds`` batches, and the variants take turns round by
    round (the order rotating), so that load from other work on a shared host hits them alike.
    Latency runs use the first workload only.
    """
    from contain.fleet.local_cluster import LocalCluster
    from contain.fleet.ray_nodes import RayDispatcher
    from contain.fleet.session import FleetSession

    runs: list[RunFigures] = []
    opened: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="contain-bench-fleet-") as folder:
        base = Path(folder)
        for nodes in node_counts:
            with LocalCluster(nodes=nodes, num_cpus=1, resources={"contain_backend_process": float(slots)}):
                began = time.monotonic()
                with FleetSession(dispatcher=RayDispatcher()) as session:
                    opened[nodes] = time.monotonic() - began
                    for workload in workloads:
                        argv = WORKLOADS[workload]
                        variants = {
                            "bare": _bare_runner(argv, in_flight=nodes * slots),
                            "contain-warm": _fleet_runner(base, argv, warm=slots, max_in_flight=None, session=session),
                            "contain-cold": _fleet_runner(base, argv, warm=0, max_in_flight=None, session=session),
                            "contain-oneshot": _fleet_runner(base, argv, warm=slots, max_in_flight=None, session=None),
                        }
                        runs += _interleaved(variants, workload, nodes, jobs, rounds)
                    first = WORKLOADS[workloads[0]]
                    latency = {
                        "latency-warm": _fleet_runner(base, first, warm=1, max_in_flight=1, session=session),
                        "latency-cold": _fleet_runner(base, first, warm=0, max_in_flight=1, session=session),
                    }
                    runs += _interleaved(latency, workloads[0], nodes, latency_jobs, rounds)
    return FleetBenchReport(slots, tuple(runs), opened)


@dataclass
class _Sample:
    ok: int = 0
    elapsed_s: float = 0.0
    steady_s: float = 0.0
    latencies: list[float] = field(default_factory=list)


Runner = Callable[[int], _Sample]


def _interleaved(variants: dict[str, Runner], workload: str, nodes: int, jobs: int, rounds: int) -> list[RunFigures]:
    names = list(variants)
    totals = {name: _Sample() for name in names}
    per_round = [jobs // rounds + (1 if r < jobs % rounds else 0) for r in range(rounds)]
    for number, count in enumerate(per_round):
        for name in names[number % len(names):] + names[: number % len(names)]:  # rotate the order
            sample = variants[name](count)
            total = totals[name]
            total.ok += sample.ok
            total.elapsed_s += sample.elapsed_s
            total.steady_s += sample.steady_s
            total.latencies += sample.latencies
    return [
        RunFigures(name, workload, nodes, jobs, t.ok, t.elapsed_s, t.steady_s,
                   percentile(t.latencies, 50), percentile(t.latencies, 99))
        for name, t in totals.items()
    ]


def _run_bare(argv: list[str]) -> tuple[int, float]:
    began = time.perf_counter()
    status = subprocess.run(argv, capture_output=True, check=False).returncode
    return status, time.perf_counter() - began


def _bare_runner(argv: list[str], *, in_flight: int) -> Runner:
    import ray

    task = ray.remote(_run_bare).options(num_cpus=0, resources={"contain_backend_process": 1})
    ray.get([task.remote(argv) for _ in range(in_flight)])  # start the workers, as the fleet's actors are

    def run(jobs: int) -> _Sample:
        began = time.monotonic()
        pending: dict[Any, float] = {}
        sample = _Sample()
        sent = 0
        while sent < jobs or pending:
            while sent < jobs and len(pending) < in_flight:
                pending[task.remote(argv)] = time.monotonic()
                sent += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                status, _ = ray.get(ref)
                sample.latencies.append(time.monotonic() - pending.pop(ref))
                sample.ok += status == 0
        sample.elapsed_s = sample.steady_s = time.monotonic() - began
        return sample

    return run


def _fleet_runner(
    base: Path, argv: list[str], *, warm: int, max_in_flight: int | None, session: FleetSession | None
) -> Runner:
    from contain.fleet.batch import run_batch
    from contain.fleet.jobs import prepare_jobs, read_job_lines
    from contain.fleet.ray_nodes import RayDispatcher

    def run(jobs: int) -> _Sample:
        folder = Path(tempfile.mkdtemp(dir=base))
        (folder / "m.json").write_text(json.dumps({"version": 1, "task": "bench", "fleet": {"warm_sandboxes": warm}}))
        lines = folder / "jobs.jsonl"
        lines.write_text("".join(
            json.dumps({"id": f"j{i}", "manifest": "m.json", "command": argv}) + "\n" for i in range(jobs)
        ))
        items = list(prepare_jobs(read_job_lines(lines), base_dir=folder))
        began = time.monotonic()
        if session is not None:
            batch = session.run_batch(items, max_in_flight=max_in_flight)
        else:
            batch = run_batch(items, dispatcher=RayDispatcher(), max_in_flight=max_in_flight)
        reports = list(batch)
        ended = time.monotonic()
        return _Sample(
            ok=sum(r.status == "done" and r.result is not None and r.result.exit_code == 0 for r in reports),
            elapsed_s=ended - began,
            steady_s=ended - (batch.nodes_ready_at or began),
            latencies=[r.latency_s for r in reports if r.status == "done"],
        )

    return run


def render_fleet(report: FleetBenchReport) -> str:
    """A table of every run, then the ratios the target (>= 0.7x bare) is stated in."""
    lines = [
        f"fleet bench: {report.slots} sandbox slots per node; "
        + "; ".join(f"{name}: {' '.join(argv)}" for name, argv in WORKLOADS.items()),
        "session open (pool actors started once per cluster): "
        + ", ".join(f"{n} node(s) {v:.2f}s" for n, v in report.session_open_s.items()),
        f"{'variant':<16}{'workload':<11}{'nodes':>6}{'jobs':>6}{'ok':>6}{'jobs/s':>9}{'steady':>9}{'p50':>9}{'p99':>9}",
    ]
    for r in report.runs:
        lines.append(
            f"{r.variant:<16}{r.workload:<11}{r.nodes:>6}{r.jobs:>6}{r.ok:>6}{r.jobs_per_s:>9.1f}{r.steady_jobs_per_s:>9.1f}"
            f"{r.p50_s * 1e3:>7.0f}ms{r.p99_s * 1e3:>7.0f}ms"
        )
    for name, ratio in report.ratios().items():
        lines.append(f"{name:<34} {ratio:.2f}x bare (target >= 0.70x)")
    return "\n".join(lines) + "\n"
