"""`contain bench startup [--backend a,b] [--html FILE]`: sandbox start-up per backend beside its raw
runtime (raw bwrap; raw `runc run` / `runsc run` of contain's bundle), session runs, the ladder of
cold and warm (pool) starts per backend with the microvm rows against their targets, and
throughput. ``--html`` also writes the self-contained page of bench/report_html.py.
`contain bench fleet`: jobs/s and latency of contain on Ray beside bare Ray tasks (contain.bench.fleet).

Exit status: 0 after the report; 2 for bad numbers; 125 (cause and fix, rendered by
``contain.cli.main``) for a backend ``parse_backend_spec`` refuses or the bench has no baseline
for, or a runtime that is missing.

Terminal output: contain's own variant names and measured numbers, and one line contain did not
write: the microvm accelerator decision, which quotes QEMU's own output. The whole report
therefore goes through ``contain.visible_text.for_terminal`` (the rule for every CLI module:
values contain did not write go through it; see ``contain.cli``); ``--json`` stays exact. The
``--html`` page escapes the same text for HTML (bench/report_html.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contain.bench.pool import PoolMeasurement
    from contain.bench.startup import Summary


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("what", choices=["startup", "fleet"], help="what to measure")
    parser.add_argument("--rounds", type=int, default=30, help="samples per variant (default 30)")
    parser.add_argument(
        "--throughput-count", type=int, default=100, help="commands for the throughput run (0: skip it)"
    )
    parser.add_argument("--concurrency", type=int, default=2, help="parallel sandboxes in the throughput run")
    parser.add_argument("--no-cli", action="store_true", help="skip the `contain run` CLI variant")
    parser.add_argument(
        "--backend",
        default="process",
        help="comma list of backends to measure in one interleaved run: process, container (the "
        "manifest default, runc), container:runc, container:runsc, microvm (default: process)",
    )
    parser.add_argument("--html", metavar="FILE", help="also write the report as a self-contained HTML page")
    parser.add_argument(
        "--pool-size", type=int, default=2, help="warm pool for the pool-vs-cold rows (0: skip them; default 2)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--jobs", type=int, default=200, help="fleet: jobs per throughput run (default 200)")
    parser.add_argument("--latency-jobs", type=int, default=40, help="fleet: jobs per latency run (default 40)")
    parser.add_argument("--nodes", default="1,2", help="fleet: node counts, comma-separated (default 1,2)")
    parser.add_argument("--slots", type=int, default=2, help="fleet: sandbox slots per node (default 2)")
    parser.add_argument("--fleet-rounds", type=int, default=4, help="fleet: turns the variants take (default 4)")
    parser.add_argument(
        "--workloads", default="echo,cpu-100ms", help="fleet: workloads, comma-separated (default echo,cpu-100ms)"
    )


def execute(args: argparse.Namespace) -> int:
    if args.what == "fleet":
        return _fleet(args)
    import os

    from contain.bench.ladder import render_ladder
    from contain.bench.pool import PoolMeasurement, measure_pool_startup, pool_ratios, render_pool
    from contain.bench.startup import (
        StartupReport,
        bench_backends,
        default_contain_cli,
        measure_startup,
        measure_throughput,
        render_startup,
    )
    from contain.visible_text import for_terminal

    if args.rounds < 1 or args.throughput_count < 0 or args.concurrency < 1:
        print(
            "contain bench: --rounds and --concurrency must be 1 or more, --throughput-count 0 or more", file=sys.stderr
        )
        return 2
    if args.pool_size < 0:
        print("contain bench: --pool-size must be 0 (no pool rows) or more", file=sys.stderr)
        return 2
    backends = bench_backends(args.backend)
    load_before = os.getloadavg()
    print(f"bench: {args.rounds} interleaved rounds of every variant of {', '.join(backends)} ...", file=sys.stderr)
    summaries = measure_startup(
        rounds=args.rounds, contain_cli=default_contain_cli(), include_cli=not args.no_cli, backends=backends
    )
    pooled = PoolMeasurement({})
    if args.pool_size:
        print(f"bench: warm pool (size {args.pool_size}) against cold starts ...", file=sys.stderr)
        pooled = measure_pool_startup(rounds=args.rounds, backends=backends, size=args.pool_size)
        summaries.update(pooled.summaries)
    throughput: dict[str, float] = {}
    if args.throughput_count:
        print(
            f"bench: throughput, {args.throughput_count} commands at concurrency {args.concurrency} ...",
            file=sys.stderr,
        )
        throughput = measure_throughput(count=args.throughput_count, concurrency=args.concurrency)
    report = StartupReport(summaries, throughput)
    ladder = render_ladder(summaries, pooled.accelerators, pooled.memory)
    text = "\n".join([render_startup(report), *render_pool(summaries), *ladder])
    if args.json:
        document = {
            **report.to_dict(),
            "pool_over_cold": pool_ratios(summaries),
            "accelerators": pooled.accelerators,
            "vmm_memory": {name: m.to_dict() for name, m in pooled.memory.items()},
            "load_average_before": list(load_before),
            "load_average_after": list(os.getloadavg()),
        }
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(for_terminal(text, keep_newlines=True))
    if args.html:
        _write_html(args.html, summaries, backends, pooled, text, load_before)
    return 0


def _write_html(
    path: str,
    summaries: dict[str, Summary],
    backends: tuple[str, ...],
    pooled: PoolMeasurement,
    text: str,
    load_before: tuple[float, float, float],
) -> None:
    import shlex

    from contain.bench.report_html import gather_run_facts, render_bench_html
    from contain.visible_text import for_terminal

    facts = gather_run_facts(command=shlex.join(["contain", *sys.argv[1:]]), load_before=load_before)
    page = render_bench_html(
        summaries=summaries,
        backends=backends,
        facts=facts,
        text_report=text,
        accelerators=pooled.accelerators,
        memory=pooled.memory,
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"bench: wrote {for_terminal(path)}", file=sys.stderr)


def _fleet(args: argparse.Namespace) -> int:
    from contain.bench.fleet import WORKLOADS, measure_fleet, render_fleet

    try:
        nodes = tuple(int(n) for n in args.nodes.split(","))
    except ValueError:
        nodes = ()
    workloads = tuple(args.workloads.split(","))
    if not nodes or min(nodes) < 1 or min(args.jobs, args.latency_jobs, args.slots, args.fleet_rounds) < 1:
        print(
            "contain bench fleet: --nodes, --jobs, --latency-jobs, --slots and --fleet-rounds must be 1 or more",
            file=sys.stderr,
        )
        return 2
    if not set(workloads) <= set(WORKLOADS):
        print(f"contain bench fleet: --workloads takes {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    print(f"bench: fleet on {', '.join(map(str, nodes))} node(s), {args.jobs} jobs per run ...", file=sys.stderr)
    report = measure_fleet(
        node_counts=nodes, workloads=workloads, jobs=args.jobs, latency_jobs=args.latency_jobs, slots=args.slots,
        rounds=args.fleet_rounds,
    )
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_fleet(report))
    return 0
