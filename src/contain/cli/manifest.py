"""`contain schema` and `contain check-manifest FILE`.

Terminal output: the manifest path and task name are rendered with
``contain.visible_text.for_terminal``; ``--json`` and the schema stay exact.
"""

from __future__ import annotations

import argparse
import json
import sys

from contain.boundary import boundary_json_schema, load_boundary
from contain.visible_text import for_terminal


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "check-manifest":
        parser.add_argument("manifest", help="path to contain.yaml")
        parser.add_argument("--json", action="store_true", help="print the normalised boundary as JSON")


def execute(args: argparse.Namespace) -> int:
    if args.command == "schema":
        json.dump(boundary_json_schema(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    boundary = load_boundary(args.manifest)
    if args.json:
        print(boundary.model_dump_json(indent=2))
    else:
        print(
            f"{for_terminal(args.manifest)}: valid (task {for_terminal(boundary.task)}, "
            f"{len(boundary.files)} file rule(s), {len(boundary.network.allow)} network rule(s))"
        )
    return 0
