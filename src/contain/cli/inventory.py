"""`contain inventory [--json] [--draft-manifest FILE [--force]]`.

Probes this host as seen from the current directory, user and environment, and prints what a
task started here could reach. Values of secrets are never printed (see contain.inventory).

Terminal output: locations and reasons name paths, sockets and processes anyone on the host may
have named, so ``render_inventory_text`` passes them through ``contain.visible_text.for_terminal``
(as this module does for the draft path); --json stays exact.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from contain.inventory import (
    draft_manifest,
    inventory_to_json,
    render_inventory_text,
    take_inventory,
    write_draft_manifest,
)
from contain.visible_text import for_terminal


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--json", action="store_true", help="print the items as JSON")
    parser.add_argument(
        "--draft-manifest",
        metavar="FILE",
        type=Path,
        help="also write a draft boundary manifest with the proposed verdicts",
    )
    parser.add_argument("--force", action="store_true", help="overwrite the --draft-manifest file if it exists")


def execute(args: argparse.Namespace) -> int:
    inventory = take_inventory(home=Path(os.path.expanduser("~")), environ=dict(os.environ), cwd=Path.cwd())
    if args.draft_manifest is not None:
        write_draft_manifest(args.draft_manifest, draft_manifest(inventory), force=args.force)
    if args.json:
        json.dump(inventory_to_json(inventory), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_inventory_text(inventory))
        if args.draft_manifest is not None:
            shown = for_terminal(args.draft_manifest)
            sys.stdout.write(
                f"\nDraft manifest written to {shown}; run `contain check {shown}` next.\n"
            )
    return 0
