"""`contain bench startup`: sandbox start-up and throughput beside bare processes and raw bwrap."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("what", choices=["startup"], help="what to measure")
    parser.add_argument("--rounds", type=int, default=30, help="samples per variant (default 30)")
    parser.add_argument("--throughput-count", type=int, default=100, help="commands for the throughput run")
    parser.add_argument("--concurrency", type=int, default=2, help="parallel sandboxes in the throughput run")
    parser.add_argument("--no-cli", action="store_true", help="skip the `contain run` CLI variant")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def execute(args: argparse.Namespace) -> int:
    from contain.bench.startup import (
        StartupReport,
        default_contain_cli,
        measure_startup,
        measure_throughput,
        render_startup,
    )

    print(f"bench: {args.rounds} interleaved rounds of every variant ...", file=sys.stderr)
    summaries = measure_startup(rounds=args.rounds, contain_cli=default_contain_cli(), include_cli=not args.no_cli)
    print(f"bench: throughput, {args.throughput_count} commands at concurrency {args.concurrency} ...", file=sys.stderr)
    throughput = measure_throughput(count=args.throughput_count, concurrency=args.concurrency)
    report = StartupReport(summaries, throughput)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_startup(report))
    return 0
