"""`contain schema` and `contain check-manifest FILE`."""

from __future__ import annotations

import argparse
import json
import sys

from contain.boundary import boundary_json_schema, load_boundary


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
            f"{args.manifest}: valid (task {boundary.task}, {len(boundary.files)} file rule(s), "
            f"{len(boundary.network.allow)} network rule(s))"
        )
    return 0
