"""`contain mcp gateway | serve | pins`.

- ``contain mcp gateway --config gateway.yaml [--http HOST:PORT]``: the MCP gateway, serving one
  client over stdio (default) or streamable HTTP on a loopback address.
- ``contain mcp serve --manifest contain.yaml [--http HOST:PORT]``: the sandbox as MCP tools.
- ``contain mcp pins list --config gateway.yaml [--json]`` and
  ``contain mcp pins approve SERVER TOOL --config gateway.yaml [--digest D] [--reviewer NAME]``.

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
    serve.add_argument("--manifest", required=True, help="boundary manifest (contain.yaml)")
    serve.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP here (loopback only)")
    pins = sub.add_parser("pins", help="list or approve pinned tool definitions")
    pins_sub = pins.add_subparsers(dest="pins_command", metavar="ACTION", required=True)
    listing = pins_sub.add_parser("list", help="show every pin and any changed definition waiting")
    listing.add_argument("--config", required=True, help="gateway.yaml")
    listing.add_argument("--json", action="store_true", help="print JSON")
    approve = pins_sub.add_parser("approve", help="accept a changed definition as the new pin")
    approve.add_argument("server")
    approve.add_argument("tool")
    approve.add_argument("--config", required=True, help="gateway.yaml")
    approve.add_argument("--digest", help="approve only if the changed definition still has this digest")
    approve.add_argument("--reviewer", default=None, help="who approves (default: the login name)")


def execute(args: argparse.Namespace) -> int:
    if args.mcp_command == "gateway":
        return _gateway(args)
    if args.mcp_command == "serve":
        return _serve(args)
    return _pins(args)


def _listen(text: str | None) -> tuple[str, int] | None:
    from contain.mcp.serving import parse_listen_address

    return parse_listen_address(text) if text else None


def _gateway(args: argparse.Namespace) -> int:
    from contain.mcp.config import load_gateway_config
    from contain.mcp.service import run_gateway

    config = load_gateway_config(args.config)
    listen = _listen(args.http)
    anyio.run(lambda: run_gateway(config, listen=listen))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from contain.boundary import load_boundary
    from contain.mcp.server import SandboxTools
    from contain.mcp.serving import build_server, serve_http, serve_stdio

    boundary = load_boundary(args.manifest)
    listen = _listen(args.http)
    tools = SandboxTools(boundary)
    server = build_server("contain-sandbox", list_tools=tools.list_tools, call_tool=tools.call_tool)
    if listen is None:
        anyio.run(serve_stdio, server)
    else:
        anyio.run(lambda: serve_http(server, *listen))
    return 0


def _pin_row(pin: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "server": pin.server,
        "tool": pin.tool,
        "digest": pin.digest,
        "pinned_at": pin.pinned_at,
        "approved_by": pin.approved_by,
        "changed_digest": pin.candidate_digest,
    }
    if pin.candidate is not None:
        row["changed_definition"] = {
            "description": pin.candidate.description,
            "input_schema": dict(pin.candidate.input_schema),
        }
        row["pinned_definition"] = {
            "description": pin.definition.description,
            "input_schema": dict(pin.definition.input_schema),
        }
    return row


def _pins(args: argparse.Namespace) -> int:
    from contain.mcp.config import load_gateway_config
    from contain.mcp.pins import PinStore

    config = load_gateway_config(args.config)
    store = PinStore(config.pins)
    if args.pins_command == "list":
        rows = [_pin_row(pin) for pin in store.list()]
        if args.json:
            json.dump(rows, sys.stdout, indent=2, ensure_ascii=True)
            sys.stdout.write("\n")
            return 0
        for row in rows:
            when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(row["pinned_at"]))
            state = "CHANGED (withheld)" if row["changed_digest"] else "pinned"
            print(f"{row['server']} {row['tool']}  {state}  {row['digest']}  {when} UTC by {row['approved_by']}")
            if row["changed_digest"]:
                # ensure_ascii: invisible characters in a changed description are shown as escapes
                print(f"  changed to {row['changed_digest']}")
                print("  was: " + json.dumps(row["pinned_definition"], ensure_ascii=True, sort_keys=True))
                print("  now: " + json.dumps(row["changed_definition"], ensure_ascii=True, sort_keys=True))
        return 0
    reviewer = args.reviewer or getpass.getuser()
    pin = store.approve(args.server, args.tool, reviewer=reviewer, candidate_digest=args.digest)
    print(f"{pin.server} {pin.tool} pinned at {pin.digest} (approved by {reviewer})")
    return 0
