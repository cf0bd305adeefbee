"""`contain ledger show|verify|export`: which writes succeeded, and is the record intact.

``verify`` reads the ledger (from broker.yaml's storage, or an exported JSONL file) and the signed
checkpoints, and prints one line per problem with its seq; exit 0 when it verifies, 1 when not.
``show`` verifies first and says so at the top, then lists each write with its final status.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from contain.errors import BoundaryInvalid


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="ledger_command", metavar="SUBCOMMAND", required=True)
    show = sub.add_parser("show", help="which writes succeeded")
    verify = sub.add_parser("verify", help="check the hash chain and the signed checkpoints")
    export = sub.add_parser("export", help="print the ledger as JSON lines")
    for child in (show, verify, export):
        child.add_argument("--config", help="path to broker.yaml")
    for child in (show, verify):
        child.add_argument("--entries", help="an exported ledger (JSON lines) instead of the database")
        child.add_argument("--checkpoints", help="checkpoint file (default: from the config)")
        child.add_argument("--public-key", help="checkpoint public key (default: <checkpoint_key_file>.pub)")
    show.add_argument("--task", help="only this task")
    show.add_argument("--principal", help="only this principal")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.add_argument("--all", action="store_true", help="also list refusals and pending reviews")


def _rows(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[Any], Any]:
    from contain.broker.config import load_config
    from contain.broker.ledger import load_public_key, read_checkpoints
    from contain.broker.storage import open_store

    config = load_config(args.config) if args.config else None
    if args.entries:
        rows = [json.loads(line) for line in Path(args.entries).read_text().splitlines() if line.strip()]
    elif config is not None:
        if "sqlite" in config.storage and not Path(config.storage["sqlite"]).exists():
            raise BoundaryInvalid(f"ledger database {config.storage['sqlite']} does not exist",
                                  "start the broker once, or check storage in broker.yaml")
        rows = open_store(config.storage).raw_rows()
    else:
        raise BoundaryInvalid("no ledger named", "pass --config broker.yaml or --entries ledger.jsonl")
    checkpoint_file = args.checkpoints or (config.ledger_checkpoints if config else None)
    checkpoints = read_checkpoints(checkpoint_file) if checkpoint_file else []
    key_file = args.public_key or (config.checkpoint_key_file + ".pub" if config else None)
    public_key = load_public_key(key_file) if key_file and Path(key_file).exists() else None
    return rows, checkpoints, public_key


def execute(args: argparse.Namespace) -> int:
    if args.ledger_command == "export":
        from contain.broker.config import load_config
        from contain.broker.storage import open_store

        if not args.config:
            raise BoundaryInvalid("export needs --config", "pass --config broker.yaml")
        for row in open_store(load_config(args.config).storage).raw_rows():
            sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
        return 0
    from contain.broker.ledger import verify_entries

    rows, checkpoints, public_key = _rows(args)
    problems = verify_entries(rows, checkpoints, public_key)
    signed = "signatures checked" if public_key is not None else "NO public key: signatures not checked"
    if args.ledger_command == "verify":
        for problem in problems:
            print(f"ledger: {problem}")
        last = max((int(r.get("seq", 0)) for r in rows), default=0)
        covered = max((c.seq for c in checkpoints), default=0)
        state = "verifies" if not problems else f"does NOT verify ({len(problems)} problem(s))"
        print(f"ledger {state}: {len(rows)} entries, head seq {last}, newest signed checkpoint at seq "
              f"{covered} ({len(checkpoints)} checkpoints, {signed})")
        return 0 if not problems else 1
    return _show(args, rows, problems)


def _show(args: argparse.Namespace, rows: list[dict[str, Any]], problems: list[Any]) -> int:
    from contain.broker.ledger import LedgerEntry
    from contain.broker.report import summarize

    entries = []
    for row in rows:
        try:
            entries.append(LedgerEntry.from_dict(row))
        except (KeyError, TypeError, ValueError):
            continue
    summary = summarize(entries, task=args.task, principal=args.principal)
    if args.json:
        data = {
            "verified": not problems,
            "problems": [str(p) for p in problems],
            "writes": [w.to_dict() for w in summary.writes],
            "refusals": [e.to_dict() for e in summary.refusals],
            "pending_reviews": [e.to_dict() for e in summary.pending_reviews],
        }
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0 if not problems else 1
    print("ledger verifies" if not problems else f"WARNING: ledger does NOT verify: {problems[0]}")
    succeeded = sum(1 for w in summary.writes if w.status == "succeeded")
    print(f"{len(summary.writes)} writes ({succeeded} succeeded), {len(summary.refusals)} refusals, "
          f"{len(summary.pending_reviews)} pending reviews")
    print(f"{'seq':>5}  {'time (UTC)':19}  {'status':11}  {'principal':10} {'task':14} {'action':16} key / arguments")
    for w in summary.writes:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(w.time))
        flag = " (reconciled)" if w.reconciled else ""
        print(f"{w.intent_seq:>5}  {stamp}  {w.status:11}  {w.principal:10} {w.task:14} {w.action:16} "
              f"{w.idempotency_key} {json.dumps(w.arguments, sort_keys=True)}{flag}")
    if args.all:
        for e in summary.refusals:
            d = dict(e.detail)
            print(f"{e.seq:>5}  refused {d.get('status')} {d.get('code')}: {e.principal} {e.action}: {d.get('reason')}")
        for e in summary.pending_reviews:
            print(f"{e.seq:>5}  pending review: {e.principal} {e.action} {e.argument_digest}")
    return 0 if not problems else 1
