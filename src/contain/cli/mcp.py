"""`contain mcp gateway | serve | pins`.

- ``contain mcp gateway --config gateway.yaml [--http HOST:PORT]``: the MCP gateway, serving one
  client over stdio (default) or streamable HTTP on a loopback address.
- ``contain mcp serve [--manifest contain.yaml] [--http HOST:PORT]``: the sandbox as MCP tools;
  without a manifest, the default boundary (nothing bound, no network, default budgets), as
  ``contain run`` does, and a line on stderr says so.
- ``contain mcp pins list --config gateway.yaml [--json]`` and
  ``contain mcp pins approve SERVER TOOL --config gateway.yaml --digest D [--reviewer NAME]``.

Human-readable output passes every upstream-written string (tool names, descriptions, schemas)
through ``contain.visible_text.for_terminal``: an escape sequence in a tool name shows as
``\x1b[2J`` instead of clearing the screen and faking a listing. ``--json`` output is exact.
``approve`` requires the digest that ``list`` showed: approving "whatever is current" would let an
upstream swap the definition between the listing and the approval.

Exit status: 0 on success, 125 for errors rendered by contain.cli.main (cause and fix).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from typing import Any

import anyio


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND", required=True)
    gateway = sub.add_parser("gateway", help="run the MCP gateway in front of upstream servers")
    gateway.add_argument("--config", required=True, help="gateway.yaml")
    gateway.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP here (loopback only)")
    serve = sub.add_parser("serve", help="offer run_command and run_code in the sandbox as MCP tools")
    serve.add_argument(
        "--manifest", help="boundary manifest (contain.yaml); default: the deny-all default boundary, as contain run"
    )
    serve.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP here (loopback only)")
    pins = sub.add_parser("pins", help="list or approve pinned tool definitions")
    pins_sub = pins.add_subparsers(dest="pins_command", metavar="ACTION", required=True)
    listing = pins_sub.add_parser("list", help="show every pin and any changed definition waiting")
    listing.add_argument("--config", required=True, help="gateway.yaml")
    listing.add_argument("--json", action="store_true", help="print JSON")
    approve = pins_sub.add_parser("approve", help="accept a changed definition or a new tool as the pin")
    approve.add_argument("server")
    approve.add_argument("tool")
    approve.add_argument("--config", required=True, help="gateway.yaml")
    approve.add_argument(
        "--digest", required=True, help="the candidate digest `pins list` showed; refused if it is no longer current"
    )
    approve.add_argument("--reviewer", default=None, help="who approves (default: the login name)")


def execute(args: argparse.Namespace) -> int:
    if args.mcp_command == "gateway":
        return _gateway(args)
    if args.mcp_command == "serve":
        return _serve(args)
    return _pins(args)


def _listen(text: str | None) -> tuple[str, int] | None:
    from contain.mcp.transport import parse_listen_address

    return parse_listen_address(text) if text else None


def _gateway(args: argparse.Namespace) -> int:
    from contain.mcp.config import load_gateway_config
    from contain.mcp.gateway_runner import run_gateway

    config = load_gateway_config(args.config)
    listen = _listen(args.http)
    anyio.run(lambda: run_gateway(config, listen=listen))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from contain.boundary import load_boundary
    from contain.mcp.sandbox_tools import SandboxTools
    from contain.mcp.transport import build_server, serve_http, serve_stdio

    if args.manifest is None:
        from contain.boundary import Boundary

        boundary = Boundary()
        print(
            "contain: no --manifest: serving the default boundary (no host files, no network, default budgets)",
            file=sys.stderr,
            flush=True,
        )
    else:
        boundary = load_boundary(args.manifest)
    listen = _listen(args.http)
    tools = SandboxTools(boundary)
    server = build_server("contain-sandbox", list_tools=tools.list_tools, call_tool=tools.call_tool)
    if listen is None:
        anyio.run(serve_stdio, server)
    else:
        anyio.run(lambda: serve_http(server, *listen))
    return 0


def _definition(definition: Any) -> dict[str, Any]:
    return {"description": definition.description, "input_schema": dict(definition.input_schema)}


def _pin_row(pin: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "server": pin.server,
        "tool": pin.tool,
        "state": "changed" if pin.candidate is not None else "pinned",
        "digest": pin.digest,
        "pinned_at": pin.pinned_at,
        "approved_by": pin.approved_by,
        "changed_digest": pin.candidate_digest,
        "candidate_digest": pin.candidate_digest,
        "pinned_definition": _definition(pin.definition),
    }
    if pin.candidate is not None:
        row["changed_definition"] = _definition(pin.candidate)
    return row


def _new_row(new: Any) -> dict[str, Any]:
    return {
        "server": new.server,
        "tool": new.tool,
        "state": "new",
        "candidate_digest": new.digest,
        "first_seen_at": new.first_seen_at,
        "new_definition": _definition(new.definition),
    }


def _shown(label: str, definition: Any) -> list[str]:
    """What the model sees of a definition, and the raw form when cleaning changed it."""
    from contain.mcp.exposure import exposed_definition

    exposed, removed = exposed_definition(definition)
    lines = [f"  {label}: " + json.dumps(_definition(exposed), ensure_ascii=False, sort_keys=True)]
    if removed:
        raw = json.dumps(_definition(definition), ensure_ascii=False, sort_keys=True)
        lines.append(f"  {label}, as the upstream sent it (removed {removed}): {raw}")
    return lines


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(seconds))


def _listing_lines(store: Any, config_path: str) -> list[str]:
    """The human-readable listing; every line goes through for_terminal before it is printed."""
    lines: list[str] = []
    for pin in store.list():
        state = "CHANGED (withheld)" if pin.candidate is not None else "pinned"
        lines.append(f"{pin.server} {pin.tool}  {state}  {pin.digest}  {_when(pin.pinned_at)} UTC by {pin.approved_by}")
        if pin.candidate is not None:
            lines.append(f"  changed to {pin.candidate_digest}")
            lines.extend(_shown("was", pin.definition))
            lines.extend(_shown("now", pin.candidate))
            lines.append(_approve_hint(pin.server, pin.tool, config_path, pin.candidate_digest))
    for new in store.list_new():
        seen = _when(new.first_seen_at)
        lines.append(f"{new.server} {new.tool}  NEW (withheld)  {new.digest}  first seen {seen} UTC")
        lines.extend(_shown("now", new.definition))
        lines.append(_approve_hint(new.server, new.tool, config_path, new.digest))
    return lines


def _approve_hint(server: str, tool: str, config_path: str, digest: str) -> str:
    return f"  approve: contain mcp pins approve {server} {tool} --config {config_path} --digest {digest}"


def _pins(args: argparse.Namespace) -> int:
    from contain.mcp.config import load_gateway_config
    from contain.mcp.pins import PinStore
    from contain.visible_text import for_terminal

    config = load_gateway_config(args.config)
    store = PinStore(config.pins)
    if args.pins_command == "list":
        if args.json:
            rows = [_pin_row(pin) for pin in store.list()] + [_new_row(new) for new in store.list_new()]
            json.dump(rows, sys.stdout, indent=2, ensure_ascii=True)
            sys.stdout.write("\n")
            return 0
        for line in _listing_lines(store, args.config):
            print(for_terminal(line))
        return 0
    reviewer = args.reviewer or getpass.getuser()
    pin = store.approve(args.server, args.tool, reviewer=reviewer, candidate_digest=args.digest)
    print(for_terminal(f"{pin.server} {pin.tool} pinned at {pin.digest} (approved by {reviewer})"))
    return 0
