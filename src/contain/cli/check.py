"""`contain check MANIFEST [--format text|json|sarif] [--broker-config broker.yaml]`.

Exit status: 0 when no finding is an error, 1 when one is, 125 when the manifest cannot be read
or validated (rendered by contain.cli.main from BoundaryInvalid).

Terminal output: findings quote manifest values (paths, names), so ``render_check_text`` passes
every field through ``contain.visible_text.for_terminal``; json and sarif stay exact.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path

from contain.inventory import check_manifest, render_check_text, report_to_json, report_to_sarif


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("manifest", help="path to contain.yaml")
    parser.add_argument(
        "--format", choices=("text", "json", "sarif"), default="text", help="output format (default: text)"
    )
    parser.add_argument("--broker-config", metavar="FILE", help="check records against this broker's actions")


def execute(args: argparse.Namespace) -> int:
    report = check_manifest(args.manifest, home=Path(os.path.expanduser("~")), broker_config=args.broker_config)
    if args.format == "text":
        sys.stdout.write(render_check_text(report))
    else:
        data = report_to_json(report) if args.format == "json" else report_to_sarif(report, version=_contain_version())
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 1 if report.has_errors else 0


def _contain_version() -> str:
    try:
        return package_version("contain")
    except PackageNotFoundError:
        return "0"
