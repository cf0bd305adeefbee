"""`contain ledger show|verify|export|anchor`: which writes succeeded, is the record intact, and is it anchored.

``verify`` reads the ledger (from broker.yaml's storage, or an exported JSONL file), the signed
checkpoints, the public key and any external anchors, and judges it with
``contain.broker.verification.verify_ledger``. Exit status (``VERDICT_EXIT_CODES``):

  0  verified: nothing wrong, and every entry but at most the bound is vouched for;
  1  tampered: one line per problem, by seq;
  3  unanchored: nothing wrong was found, but the ledger cannot be shown complete (no public key,
     no checkpoint file or no checkpoint in it, or a longer unsigned tail than the broker leaves);
  125 a file named on the command line cannot be read (``LedgerAnchorError``).

``show`` judges the ledger the same way, says so at the top and at the bottom, and lists each
write with its final status (same exit status). ``anchor`` signs the verified head and appends it
to a file outside the broker's state directory (or prints it with ``--to -``), after checking the
ledger against the anchors already there.

Every human-readable line passes through ``contain.visible_text.for_terminal``: task, principal,
action, key, arguments and reasons are written by callers we do not trust. ``--json`` output is exact.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contain.errors import BoundaryInvalid, LedgerAnchorError
from contain.visible_text import for_terminal

if TYPE_CHECKING:
    from contain.broker.config import BrokerConfig
    from contain.broker.verification import LedgerVerdict

VERDICT_EXIT_CODES = {"verified": 0, "tampered": 1, "unanchored": 3}


def _expected_head(text: str) -> Any:
    from contain.broker.verification import parse_expected_head

    try:
        return parse_expected_head(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="ledger_command", metavar="SUBCOMMAND", required=True)
    show = sub.add_parser("show", help="which writes succeeded")
    verify = sub.add_parser("verify", help="check the hash chain, the signed checkpoints and external anchors")
    export = sub.add_parser("export", help="print the ledger as JSON lines")
    anchor = sub.add_parser("anchor", help="sign the verified head and append it outside the state directory")
    for child in (show, verify, export, anchor):
        child.add_argument("--config", help="path to broker.yaml")
    for child in (show, verify, anchor):
        child.add_argument("--entries", help="an exported ledger (JSON lines) instead of the database")
        child.add_argument("--checkpoints", help="checkpoint file (default: from the config)")
        child.add_argument("--public-key", help="checkpoint public key (default: <checkpoint_key_file>.pub)")
        child.add_argument("--anchors", action="append", default=[], metavar="FILE",
                           help="external anchors (checkpoint lines kept outside the state directory); repeatable")
        child.add_argument("--expect-head", action="append", default=[], type=_expected_head, metavar="SEQ:HASH",
                           help="a head recorded earlier (verify prints it); the ledger must contain it; repeatable")
        child.add_argument("--max-unanchored-entries", type=int, default=None, metavar="N",
                           help="entries allowed after the newest vouched-for head (default: checkpoint_every_entries)")
    verify.add_argument("--json", action="store_true", help="machine-readable verdict")
    show.add_argument("--task", help="only this task")
    show.add_argument("--principal", help="only this principal")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.add_argument("--all", action="store_true", help="also list refusals and pending reviews")
    anchor.add_argument("--to", required=True, metavar="FILE",
                        help="append the signed head to FILE (outside the state directory); '-' prints it")
    anchor.add_argument("--accept-unanchored", action="store_true",
                        help="anchor even when the ledger is unanchored now (the anchor then vouches for a "
                             "head nobody checked against an earlier one)")


@dataclass(frozen=True)
class _Judged:
    rows: list[dict[str, Any]]
    verdict: LedgerVerdict
    config: BrokerConfig | None


def _say(text: str, *, err: bool = False) -> None:
    print(for_terminal(text), file=sys.stderr if err else sys.stdout)


def _load_rows(args: argparse.Namespace, config: BrokerConfig | None) -> list[dict[str, Any]]:
    from contain.broker.storage import open_store

    if args.entries:
        try:
            text = Path(args.entries).read_text()
        except OSError as exc:
            raise LedgerAnchorError(f"cannot read the ledger export {args.entries}: {exc.strerror}",
                                    "check the path") from exc
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if config is not None:
        if "sqlite" in config.storage and not Path(config.storage["sqlite"]).exists():
            raise BoundaryInvalid(f"ledger database {config.storage['sqlite']} does not exist",
                                  "start the broker once, or check storage in broker.yaml")
        return open_store(config.storage).raw_rows()
    raise BoundaryInvalid("no ledger named", "pass --config broker.yaml or --entries ledger.jsonl")


def _read_points(path: str, what: str) -> list[Any]:
    from contain.broker.ledger import read_checkpoints

    try:
        return read_checkpoints(path)
    except (OSError, ValueError) as exc:
        raise LedgerAnchorError(f"cannot read the {what} {path}: {exc}", f"restore the {what} from a copy") from exc


def _judge(args: argparse.Namespace, *, extra_anchor_file: str | None = None) -> _Judged:
    """Gather the files (facts), then judge them with the pure ``verify_ledger``."""
    from contain.broker.config import BrokerConfig, load_config
    from contain.broker.ledger import load_public_key
    from contain.broker.verification import verify_ledger

    config = load_config(args.config) if args.config else None
    rows = _load_rows(args, config)
    checkpoint_file = args.checkpoints or (config.ledger_checkpoints if config else None)
    checkpoint_exists = bool(checkpoint_file) and Path(str(checkpoint_file)).is_file()
    checkpoints = _read_points(str(checkpoint_file), "checkpoint file") if checkpoint_exists else []
    key_file = args.public_key or (config.checkpoint_key_file + ".pub" if config else None)
    if args.public_key and not Path(args.public_key).is_file():
        raise LedgerAnchorError(f"the public key {args.public_key} does not exist", "name the key you kept")
    try:
        public_key = load_public_key(key_file) if key_file and Path(key_file).is_file() else None
    except ValueError as exc:
        raise LedgerAnchorError(f"the public key {key_file} is not an Ed25519 key ({exc})",
                                "restore it from a copy kept outside the state directory") from exc
    anchors = []
    for name in args.anchors:
        if not Path(name).is_file():
            raise LedgerAnchorError(f"the anchor file {name} does not exist", "name the file anchors were written to")
        anchors.extend(_read_points(name, "anchor file"))
    if extra_anchor_file is not None and Path(extra_anchor_file).is_file():
        anchors.extend(_read_points(extra_anchor_file, "anchor file"))
    bound = args.max_unanchored_entries
    if bound is None:
        default = BrokerConfig.model_fields["checkpoint_every_entries"].default
        bound = config.checkpoint_every_entries if config else int(default)
    verdict = verify_ledger(
        rows,
        checkpoints=checkpoints,
        checkpoint_file=str(checkpoint_file) if checkpoint_file else None,
        checkpoint_file_exists=checkpoint_exists,
        public_key=public_key,
        max_unanchored_entries=bound,
        anchors=anchors,
        expected_heads=args.expect_head,
    )
    return _Judged(rows, verdict, config)


def _summary_line(verdict: LedgerVerdict) -> str:
    signed = (f"signatures checked with key {verdict.public_key_fingerprint}" if verdict.public_key_fingerprint
              else "NO public key: signatures not checked")
    state = {
        "verified": "ledger verifies",
        "tampered": f"ledger does NOT verify ({len(verdict.problems)} problem(s))",
        "unanchored": f"ledger is UNANCHORED ({len(verdict.unanchored)} reason(s)), no tampering found",
    }[verdict.state]
    return (f"{state}: {verdict.entry_count} entries, head {verdict.head_seq}:{verdict.head_hash or '-'}, "
            f"vouched for up to seq {verdict.vouched_seq} ({verdict.checkpoint_count} checkpoints, "
            f"{verdict.anchor_count} external anchors, {signed})")


def _print_findings(verdict: LedgerVerdict, *, err: bool = False) -> None:
    for problem in verdict.problems:
        _say(f"ledger: {problem}", err=err)
    for finding in verdict.unanchored:
        _say(f"ledger: unanchored: {finding}", err=err)


def execute(args: argparse.Namespace) -> int:
    if args.ledger_command == "export":
        from contain.broker.config import load_config
        from contain.broker.storage import open_store

        if not args.config:
            raise BoundaryInvalid("export needs --config", "pass --config broker.yaml")
        for row in open_store(load_config(args.config).storage).raw_rows():
            sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
        return 0
    if args.ledger_command == "anchor":
        return _anchor(args)
    judged = _judge(args)
    verdict = judged.verdict
    if args.ledger_command == "verify":
        if args.json:
            json.dump(verdict.to_dict(), sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
        else:
            _print_findings(verdict)
            _say(_summary_line(verdict))
        return VERDICT_EXIT_CODES[verdict.state]
    return _show(args, judged.rows, verdict)


def _anchor(args: argparse.Namespace) -> int:
    from contain.broker.anchors import FileAnchorSink
    from contain.broker.ledger import Checkpointer, load_checkpoint_key

    if not args.config:
        raise BoundaryInvalid("anchor needs --config (the checkpoint key signs the head)", "pass --config broker.yaml")
    to_stdout = args.to == "-"
    judged = _judge(args, extra_anchor_file=None if to_stdout else args.to)
    verdict, config = judged.verdict, judged.config
    assert config is not None
    _print_findings(verdict, err=to_stdout)  # with --to -, stdout carries the anchor line only
    if verdict.state == "tampered" or (verdict.state == "unanchored" and not args.accept_unanchored):
        _say(_summary_line(verdict) + "; nothing anchored", err=to_stdout)
        return VERDICT_EXIT_CODES[verdict.state]
    if verdict.head_seq == 0:
        raise BoundaryInvalid("the ledger is empty: there is no head to anchor", "anchor after the first write")
    try:
        key = load_checkpoint_key(config.checkpoint_key_file, create=False)
    except (OSError, ValueError) as exc:
        raise LedgerAnchorError(f"cannot load the checkpoint key {config.checkpoint_key_file}: {exc}",
                                "run this where the broker's checkpoint key is readable (as its owner)") from exc
    point = Checkpointer(key, config.ledger_checkpoints).sign((verdict.head_seq, verdict.head_hash))
    line = (json.dumps(asdict(point), sort_keys=True) + "\n").encode()
    if to_stdout:
        sys.stdout.write(line.decode())
        print(f"anchored head {point.seq}:{point.hash}", file=sys.stderr)
    else:
        FileAnchorSink(args.to).send(line)
        _say(f"anchored head {point.seq}:{point.hash} to {args.to}; check later with "
             f"--anchors {args.to} or --expect-head {point.seq}:{point.hash}")
    return 0


def _show(args: argparse.Namespace, rows: list[dict[str, Any]], verdict: LedgerVerdict) -> int:
    from contain.broker.ledger import LedgerEntry
    from contain.broker.report import summarize

    entries = []
    for row in rows:
        try:
            entries.append(LedgerEntry.from_dict(row))
        except (KeyError, TypeError, ValueError):
            continue
    summary = summarize(entries, task=args.task, principal=args.principal)
    code = VERDICT_EXIT_CODES[verdict.state]
    if args.json:
        data = {
            "verified": verdict.state == "verified",
            "state": verdict.state,
            "problems": [str(p) for p in verdict.problems],
            "unanchored": [str(u) for u in verdict.unanchored],
            "writes": [w.to_dict() for w in summary.writes],
            "refusals": [e.to_dict() for e in summary.refusals],
            "pending_reviews": [e.to_dict() for e in summary.pending_reviews],
        }
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return code
    warning = _warning(verdict)
    _say(warning)
    t = for_terminal
    succeeded = sum(1 for w in summary.writes if w.status == "succeeded")
    print(f"{len(summary.writes)} writes ({succeeded} succeeded), {len(summary.refusals)} refusals, "
          f"{len(summary.pending_reviews)} pending reviews")
    print(f"{'seq':>5}  {'time (UTC)':19}  {'status':11}  {'principal':10} {'task':14} {'action':16} key / arguments")
    for w in summary.writes:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(w.time))
        flag = " (reconciled)" if w.reconciled else ""
        _say(f"{w.intent_seq:>5}  {stamp}  {t(w.status):11}  {t(w.principal):10} {t(w.task):14} {t(w.action):16} "
             f"{t(w.idempotency_key)} {t(json.dumps(w.arguments, sort_keys=True))}{flag}")
    if args.all:
        for e in summary.refusals:
            d = dict(e.detail)
            _say(f"{e.seq:>5}  refused {t(d.get('status'))} {t(d.get('code'))}: {t(e.principal)} {t(e.action)}: "
                 f"{t(d.get('reason'))}")
        for e in summary.pending_reviews:
            _say(f"{e.seq:>5}  pending review: {t(e.principal)} {t(e.action)} {t(e.argument_digest)}")
    if verdict.state != "verified":
        _say(warning)  # again below the rows, so a long listing cannot push it out of view
    return code


def _warning(verdict: LedgerVerdict) -> str:
    if verdict.state == "tampered":
        return f"WARNING: ledger does NOT verify: {verdict.problems[0]}"
    if verdict.state == "unanchored":
        return f"WARNING: ledger is UNANCHORED (it may have been truncated): {verdict.unanchored[0]}"
    return "ledger verifies"
