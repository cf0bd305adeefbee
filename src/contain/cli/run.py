"""`contain run [options] -- CMD [ARG...]`: one command in a disposable sandbox.

Exit status: the command's own; 128+N when signal N ended it; 124 on timeout; 125 when contain
refused or failed (the reason on stderr). With --json, stdout is exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from contain.errors import BoundaryInvalid


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
    from contain.runtime.agent_build import agent_cache_dir

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
    cache = None if os.environ.get("CONTAIN_NO_BOUNDARY_CACHE") else agent_cache_dir().absolute() / "boundaries"
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
        sys.stdout.buffer.write(result.stdout.data)
        sys.stdout.flush()
        sys.stderr.buffer.write(result.stderr.data)
        for violation in result.violations:
            print(f"contain: {violation.kind}: {violation.message}", file=sys.stderr)
    from contain.visible_text import for_terminal

    for finding in sandbox.teardown_findings:  # names in them were chosen by the workload
        print(f"contain: teardown: {for_terminal(finding)}", file=sys.stderr)
    return result.status
