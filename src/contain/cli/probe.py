"""`contain probe [--backend SPEC] [--cases GLOBS] [--json] [--report FILE.html] [--wrap 'CMD ...']`.

``--backend`` takes the backend spec strings of ``contain run`` (``process``, ``container``,
``container:runc``, ``container:runsc``). The spec is parsed and the backend constructed (which
probes its runtime binary) before any case runs: an unknown spec or a missing runtime exits 125
with the cause and the fix instead of turning every case into an ERROR. A bare ``container``
is reported as the runtime it resolves to (``container:runc``).

Runs the escape-and-recovery battery and judges it from outside. While it runs, one progress
line per case goes to stderr; at the end a summary table goes to stderr (stdout with no --json).
With --json, stdout is exactly the JSON document. Exit status: 0 only when every selected case is
CONTAINED or NOT_APPLICABLE, 1 otherwise, 2 for a usage error (e.g. a --cases glob that matches
nothing).

Terminal output: a case's summary can quote what the workload printed or created, so every
progress line, the summary table, leftovers and errors go through
``contain.visible_text.for_terminal`` (one line each; the table keeps its line breaks). --json
and the HTML report (escaped there) stay exact.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from contain.visible_text import for_terminal


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument(
        "--backend",
        default="process",
        help="contain backend spec to test: process, container, container:runc, container:runsc (default: process)",
    )
    parser.add_argument("--cases", default=None, help="comma-separated id globs, e.g. 'FS-*,NE-01' (default: all)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document on stdout")
    parser.add_argument("--report", metavar="FILE.html", default=None, help="write a self-contained HTML report")
    parser.add_argument(
        "--wrap",
        metavar="'CMD ...'",
        default=None,
        help="test a third-party sandbox given as a command prefix instead of contain, e.g. 'bwrap --unshare-all ...'",
    )
    parser.add_argument("--case-timeout", type=float, default=120.0, help="seconds per case before ERROR")


def execute(args: argparse.Namespace) -> int:
    from contain.probe.case import CaseResult
    from contain.probe.context import RunContext
    from contain.probe.registry import load_cases
    from contain.probe.report import render_html, render_json, render_summary, render_table_line
    from contain.probe.runner import run_battery
    from contain.probe.targets import ContainTarget, WrapTarget

    cases = load_cases()
    infos = {c.id: c for c in cases}
    target = WrapTarget(shlex.split(args.wrap)) if args.wrap else ContainTarget(_checked_backend(args.backend))
    ctx = RunContext(target)

    def progress(index: int, count: int, result: CaseResult) -> None:
        case = infos.get(result.case_id)
        from contain.probe.report import CaseInfo

        info = CaseInfo(case.id, case.category.value, case.title, case.expected) if case else None
        print(f"[{index:>3}/{count}] {for_terminal(render_table_line(result, info))}", file=sys.stderr, flush=True)

    print(f"contain probe: target {for_terminal(target.name)}, run {ctx.run_id}", file=sys.stderr, flush=True)
    try:
        report = run_battery(cases, ctx, patterns=args.cases, case_timeout_s=args.case_timeout, progress=progress)
    except ValueError as exc:
        print(f"contain: {for_terminal(exc)}", file=sys.stderr)
        return 2
    finally:
        for leftover in ctx.close():
            print(f"contain: probe could not remove {for_terminal(leftover)}", file=sys.stderr)
    if args.report:
        Path(args.report).write_text(render_html(report), encoding="utf-8")
        print(f"HTML report: {for_terminal(args.report)}", file=sys.stderr)
    summary = for_terminal(render_summary(report), keep_newlines=True)
    if args.json:
        sys.stdout.write(render_json(report))
        print(summary, file=sys.stderr, end="")
    else:
        sys.stdout.write(summary)
    return report.exit_code


def _checked_backend(text: str) -> str:
    """The full spec of ``--backend`` once its backend could be constructed here.

    Raises:
        UnknownBackend: not a spec of ``backend_names.BACKEND_KINDS`` (exit 125).
        UnsupportedHost: the kind is not available in this version, or its runtime binary is
            missing or unusable (exit 125).
    """
    from contain.boundary import Boundary
    from contain.probe.targets import DEFAULT_PROBE_BOUNDARY
    from contain.runtime import Sandbox

    sandbox = Sandbox(Boundary.model_validate(DEFAULT_PROBE_BOUNDARY), backend=text)  # constructed, never started
    return sandbox.backend
