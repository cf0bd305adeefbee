"""`contain bench startup`: sandbox start-up and throughput beside bare processes and raw bwrap.

Terminal output: only contain's own variant names and measured numbers, no untrusted text, so
nothing here needs ``contain.visible_text.for_terminal`` (the rule for every CLI module: values
contain did not write go through it; see ``contain.cli``).
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("what", choices=["startup"], help="what to measure")
    parser.add_argument("--rounds", type=int, default=30, help="samples per variant (default 30)")
    parser.add_argument(
        "--throughput-count", type=int, default=100, help="commands for the throughput run (0: skip it)"
    )
    parser.add_argument("--concurrency", type=int, default=2, help="parallel sandboxes in the throughput run")
    parser.add_argument("--no-cli", action="store_true", help="skip the `contain run` CLI variant")
    parser.add_argument(
        "--pool-size", type=int, default=2, help="warm pool for the pool-vs-cold rows (0: skip them; default 2)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def execute(args: argparse.Namespace) -> int:
    from contain.bench.pool import measure_pool_startup, pool_ratios, render_pool
    from contain.bench.startup import (
        StartupReport,
        default_contain_cli,
        measure_startup,
        measure_throughput,
        render_startup,
    )

    if args.rounds < 1 or args.throughput_count < 0 or args.concurrency < 1:
        print(
            "contain bench: --rounds and --concurrency must be 1 or more, --throughput-count 0 or more", file=sys.stderr
        )
        return 2
    if args.pool_size < 0:
        print("contain bench: --pool-size must be 0 (no pool rows) or more", file=sys.stderr)
        return 2
    print(f"bench: {args.rounds} interleaved rounds of every variant ...", file=sys.stderr)
    summaries = measure_startup(rounds=args.rounds, contain_cli=default_contain_cli(), include_cli=not args.no_cli)
    if args.pool_size:
        print(f"bench: warm pool (size {args.pool_size}) against cold starts ...", file=sys.stderr)
        summaries.update(measure_pool_startup(rounds=args.rounds, backends=("process",), size=args.pool_size))
    throughput: dict[str, float] = {}
    if args.throughput_count:
        print(
            f"bench: throughput, {args.throughput_count} commands at concurrency {args.concurrency} ...",
            file=sys.stderr,
        )
        throughput = measure_throughput(count=args.throughput_count, concurrency=args.concurrency)
    report = StartupReport(summaries, throughput)
    if args.json:
        json.dump({**report.to_dict(), "pool_over_cold": pool_ratios(summaries)}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n".join([render_startup(report), *render_pool(summaries)]))
    return 0
