"""`contain run [options] -- CMD [ARG...]`: one command in a disposable sandbox.

Exit status: the command's own; 128+N when signal N ended it; 124 on timeout; 125 when contain
refused or failed (the reason on stderr). With --json, stdout is exactly one JSON object.

Terminal output, decided: the command's own stdout and stderr pass through byte for byte, as they
would if the user ran the program directly (rendering them would break binary output, colours
and pipes; the user chose to run that program and reads its output as such). contain's own lines
after it (``contain: <kind>: <message>`` for each violation, ``contain: teardown: ...``) quote
what the workload chose (hosts it tried, paths it created) and go through
``contain.visible_text.for_terminal``, one line each, so a workload cannot forge or hide them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from contain.errors import BoundaryInvalid
from contain.visible_text import for_terminal

if TYPE_CHECKING:
    from contain.runtime.result import Violation


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--manifest", "-m", help="boundary manifest (default: scratch only, no network)")
    parser.add_argument("--backend", help="sandbox backend (default: the manifest's runtime.backend, else process)")
    parser.add_argument("--json", action="store_true", help="print the RunResult as one JSON object")
    parser.add_argument("--timeout", type=float, help="wall-clock seconds")
    parser.add_argument("--memory", help="memory limit, e.g. 256MiB")
    parser.add_argument("--cpu", help="CPU-time budget, e.g. 10s")
    parser.add_argument("--pids", type=int, help="maximum processes and threads")
    parser.add_argument("--read", action="append", default=[], metavar="HOST[:PATH]", help="bind a host path read-only")
    parser.add_argument(
        "--write", action="append", default=[], metavar="HOST[:PATH]", help="bind a host directory read-write"
    )
    parser.add_argument("--env", action="append", default=[], metavar="K=V", help="set a variable inside")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]", help="allow a destination")
    parser.add_argument("--stdin", action="store_true", help="pass this process's stdin to the command")
    parser.add_argument(
        "--broker-config", metavar="FILE", help="broker.yaml of the running broker (for manifests that name records)"
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")


def execute(args: argparse.Namespace) -> int:
    from contain.boundary.cache import load_run_boundary
    from contain.boundary.extend import BoundaryFlags
    from contain.runtime import Sandbox
    from contain.runtime.supervisor_build import supervisor_cache_dir

    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise BoundaryInvalid("no command given", "write the command after --, e.g. contain run -- python3 task.py")
    resources = {
        key: value
        for key, value in (
            ("memory_bytes", args.memory),
            ("cpu_s", args.cpu),
            ("pids_max", args.pids),
            ("wall_s", args.timeout),
        )
        if value is not None
    }
    flags = BoundaryFlags(args.read, args.write, args.env, args.allow_host, resources)
    # Validated once per distinct input; later runs skip pydantic (see contain.boundary.cache).
    cache = None if os.environ.get("CONTAIN_NO_BOUNDARY_CACHE") else supervisor_cache_dir().absolute() / "boundaries"
    boundary = load_run_boundary(args.manifest, flags, cache_dir=cache).boundary
    attachments = []
    if boundary.records:
        if not args.broker_config:
            raise BoundaryInvalid(
                "the manifest names records, which are written only through the broker, but no broker is configured",
                "start `contain broker serve --config broker.yaml` and pass --broker-config broker.yaml",
            )
        from contain.broker.sandbox_link import attachments_from_config

        attachments = attachments_from_config(boundary, args.broker_config, ttl_s=boundary.resources.wall_s + 60)
    stdin = sys.stdin.buffer.read() if args.stdin else None
    with Sandbox(boundary, backend=args.backend, attachments=attachments) as sandbox:
        result = sandbox.run(command, stdin=stdin, timeout=args.timeout)
        teardown = sandbox.close()
    if args.json:
        document = result.to_dict()
        document["timings"]["teardown_s"] = teardown
        document["teardown"] = sandbox.teardown_findings
        document["export"] = {path: report.to_dict() for path, report in sandbox.export_reports.items()}
        json.dump(document, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.buffer.write(result.stdout.data)  # the command's own output: raw, as run directly
        sys.stdout.flush()
        sys.stderr.buffer.write(result.stderr.data)
        sys.stderr.flush()
    for line in contain_lines(() if args.json else result.violations, sandbox.teardown_findings):
        print(line, file=sys.stderr)
    return result.status


def contain_lines(violations: Sequence[Violation], teardown_findings: Sequence[str]) -> list[str]:
    """contain's own stderr lines after a run, every quoted value rendered for the terminal.

    Args:
        violations: what the boundary stopped (messages quote hosts and paths the workload chose).
        teardown_findings: what closing the sandbox had to undo (paths the workload created).

    Returns:
        One line per violation (``contain: <kind>: <message>``) and per finding
        (``contain: teardown: <finding>``), with no control, bidi or line-break character left.
    """
    lines = [f"contain: {for_terminal(v.kind)}: {for_terminal(v.message)}" for v in violations]
    lines += [f"contain: teardown: {for_terminal(finding)}" for finding in teardown_findings]
    return lines
