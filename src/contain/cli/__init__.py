"""The `contain` command: parses, calls the library, prints. Errors are rendered in one place.

Each subcommand lives in its own module with ``add_arguments(parser)`` and ``execute(args) -> int``,
and only the module of the command being run is imported, so ``contain run`` does not pay for the
imports of ``contain review`` or ``contain inventory``.

Terminal output rule, for every module here: a value contain did not write itself (tool names,
arguments, reasons, paths and hosts a workload chose, manifest values, error causes that quote
them) is printed only through ``contain.visible_text.for_terminal``; ``--json`` output stays exact.
A command's own stdout/stderr under ``contain run`` is the exception: it passes through raw, as a
program run directly would (see ``contain.cli.run``).
"""

from __future__ import annotations

import argparse
import collections.abc
import importlib
import os
import signal
import sys

__all__ = ["COMMANDS", "error_lines", "main"]

# name -> (module, one-line summary). The summary is here so `contain --help` imports nothing.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("contain.cli.run", "run a command inside a disposable sandbox"),
    "doctor": ("contain.cli.doctor", "show what this host offers and how to fix each gap"),
    "schema": ("contain.cli.manifest", "print the boundary manifest's JSON Schema"),
    "check-manifest": ("contain.cli.manifest", "validate a boundary manifest"),
    "bench": ("contain.cli.bench", "measure sandbox start-up and throughput on this host"),
    "inventory": ("contain.cli.inventory", "list what a task started here could reach"),
    "pool": ("contain.cli.pool", "run tasks from stdin, each in its own sandbox from a warm pool"),
    "check": ("contain.cli.check", "lint a boundary manifest against its declared threats"),
    "review": ("contain.cli.review", "list, approve or deny tool calls waiting for review (CLI or web page)"),
    "broker": ("contain.cli.broker", "run the trusted write broker, mint capability tokens"),
    "ledger": ("contain.cli.ledger", "show which writes succeeded; verify the broker's ledger"),
    "mcp": ("contain.cli.mcp", "MCP gateway (pins, gate, review) and the sandbox as an MCP server"),
    "probe": ("contain.cli.probe", "run the escape-and-recovery battery, judged from outside"),
    "microvm": ("contain.cli.microvm", "build, show or clear the snapshots microVM pools restore from"),
}


def _build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contain", description="Contain what AI agents do.")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, summary) in COMMANDS.items():
        child = sub.add_parser(name, help=summary, description=summary)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(child, name)
    return parser


def _discard_stdout() -> None:
    """Point fd 1 at /dev/null so that nothing flushed later meets the closed pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def error_lines(cause: str, fix: str) -> list[str]:
    """The lines ``main`` prints for a ContainError: ``contain: <cause>``, then ``  fix: <fix>``.

    Causes quote what was refused (a request id, a path, a manifest key, a YAML snippet), so every
    line goes through ``for_terminal``. A multi-line cause or fix keeps its lines, each continuation
    prefixed with ``  | ``: a line break inside a quoted value can add a ``  | `` line but never a
    line that reads as contain's own ``contain:`` or ``  fix:``.
    """
    from contain.visible_text import for_terminal

    def block(first_prefix: str, text: str) -> list[str]:
        head, *rest = text.split("\n")
        return [first_prefix + for_terminal(head)] + ["  | " + for_terminal(line) for line in rest]

    return block("contain: ", cause) + (block("  fix: ", fix) if fix else [])


def main(argv: collections.abc.Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get("CONTAIN_DEBUG"):
        import logging  # only here: the runtime logs without importing it (see contain._log)

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    command = next((a for a in args_list if not a.startswith("-")), None)
    if command not in COMMANDS:
        command = None
    parser = _build_parser(command)
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    from contain.errors import ContainError

    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        status = int(module.execute(args))
        sys.stdout.flush()  # here, so a closed pipe is seen below and not at interpreter exit
        return status
    except BrokenPipeError:
        # The reader went away (`contain check m.yaml --format sarif | head`): stop quietly, as
        # Unix tools do; the exit status is the shell's for a process that SIGPIPE ended.
        _discard_stdout()
        return 128 + signal.SIGPIPE
    except ContainError as exc:
        if args.verbose:
            raise
        print("\n".join(error_lines(exc.cause, exc.fix)), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
