"""`contain review list | show ID | approve ID [--once | --uses N | --for 10m] | deny ID --reason R | serve`.

The review queue from a terminal. Every subcommand takes ``--db`` (default
``<state dir>/review.db``) and, where a grant is minted, ``--key`` (default ``<state dir>/grant.key``,
created 0600 when absent); the state dir is ``$CONTAIN_STATE_DIR``, ``/var/lib/contain`` for root or
``~/.local/state/contain``.

Exit status: 0 on success, 125 when the store, key or request cannot be used (a GateError rendered
by contain.cli.main), 2 for bad options.

Terminal output: every value that came from a request (tool, principal, server, arguments,
reasons, reviewer names) goes through ``contain.visible_text.for_terminal`` before it is printed,
so an ESC sequence, OSC 52, a bidi override or a newline in a tool name shows as an escape and
cannot clear the screen or fake a row. ``--json`` output is exact (JSON escapes controls itself).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from typing import TYPE_CHECKING

from contain.errors import GateError
from contain.visible_text import for_terminal as shown

if TYPE_CHECKING:
    from contain.gate import ReviewStore


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", help="review store (default: <state dir>/review.db)")
    common.add_argument("--key", help="grant key file (default: <state dir>/grant.key)")
    sub = parser.add_subparsers(dest="review_command", metavar="ACTION", required=True)

    listing = sub.add_parser("list", parents=[common], help="list requests (pending by default)")
    listing.add_argument("--all", action="store_true", help="include approved, denied and expired requests")
    listing.add_argument("--json", action="store_true", help="print one JSON array")

    show = sub.add_parser("show", parents=[common], help="show one request with its exact arguments")
    show.add_argument("request_id")
    show.add_argument("--json", action="store_true", help="print one JSON object")

    approve = sub.add_parser("approve", parents=[common], help="approve a pending request and mint a grant")
    approve.add_argument("request_id")
    scope = approve.add_mutually_exclusive_group()
    scope.add_argument("--once", action="store_true", help="one use within an hour (the default)")
    scope.add_argument("--uses", type=int, metavar="N", help="up to N uses within an hour")
    scope.add_argument("--for", dest="duration", metavar="DURATION", help="any number of uses for 90s, 10m, 2h, 1d")
    approve.add_argument("--reason", default="", help="why (recorded and signed into the grant)")
    approve.add_argument("--reviewer", help="name recorded as reviewer (default: your user name)")

    deny = sub.add_parser("deny", parents=[common], help="deny a pending request")
    deny.add_argument("request_id")
    deny.add_argument("--reason", required=True, help="why (the agent is told)")
    deny.add_argument("--reviewer", help="name recorded as reviewer (default: your user name)")

    serve = sub.add_parser("serve", parents=[common], help="serve the review page on 127.0.0.1")
    serve.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0 picks a free one)")
    serve.add_argument("--host", default="127.0.0.1", help="IPv4 loopback address to bind (default 127.0.0.1)")
    serve.add_argument("--reviewer", help="name recorded for decisions made on the page (default: web:<user>)")


def execute(args: argparse.Namespace) -> int:
    from contain.gate import ReviewStore, default_store_path

    store = ReviewStore(args.db or default_store_path())
    action = args.review_command
    if action == "list":
        return _list(store, show_all=args.all, as_json=args.json)
    if action == "show":
        return _show(store, args.request_id, as_json=args.json)
    if action == "approve":
        return _approve(store, args)
    if action == "deny":
        request = store.deny(args.request_id, reviewer=args.reviewer or _user(), reason=args.reason)
        print(f"{shown(request.request_id)} denied: {shown(request.review_reason)}")
        return 0
    return _serve(store, args)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _list(store: ReviewStore, *, show_all: bool, as_json: bool) -> int:
    from contain.gate import ReviewState

    store.expire_stale()
    requests = store.list(None if show_all else ReviewState.PENDING)
    if as_json:
        json.dump([r.as_dict() for r in requests], sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    if not requests:
        print("no pending requests" if not show_all else "no requests")
        return 0
    for r in requests:
        args_text = shown(json.dumps(r.arguments, sort_keys=True, ensure_ascii=True))
        if len(args_text) > 60:
            args_text = args_text[:57] + "..."
        print(
            f"{shown(r.request_id)}  {r.status.value:<8}  {_utc(r.created_at)}  {shown(r.principal)}  "
            f"{shown(r.tool)}  {args_text}"
        )
    return 0


def _show(store: ReviewStore, request_id: str, *, as_json: bool) -> int:
    from contain.gate import describe_scope
    from contain.gate.web import render_arguments

    r = store.get(request_id)
    if as_json:
        json.dump(r.as_dict(), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    args_text, invisible = render_arguments(r.arguments)  # for_terminal of the JSON, layout kept
    lines = [
        f"request     {shown(r.request_id)} ({r.status.value})",
        f"principal   {shown(r.principal)}",
        f"server      {shown(r.server or '-')}",
        f"tool        {shown(r.tool)}",
        f"tool digest {shown(r.tool_digest)}",
        f"arg digest  {shown(r.argument_digest)}",
        f"asked       {_utc(r.created_at)}; expires unanswered {_utc(r.expires_at)}",
        f"why review  {shown(r.rule_id)}: {shown(r.decision_reason)}",
        "arguments (exact):",
        args_text,
    ]
    if invisible:
        lines.append(f"warning: {invisible} invisible or control character(s) in the arguments, shown as escapes")
    if r.scope is not None:
        lines.append(f"approved    by {shown(r.reviewer)}: {describe_scope(r.scope)}; grant {shown(r.grant_id)}")
    elif r.review_reason:
        lines.append(f"denied      by {shown(r.reviewer)}: {shown(r.review_reason)}")
    print("\n".join(lines))
    return 0


def _approve(store: ReviewStore, args: argparse.Namespace) -> int:
    from contain.gate import GrantKey, GrantScope, default_key_path, describe_scope, parse_duration

    now = store.now()
    try:
        if args.uses is not None:
            scope = GrantScope.n_uses(args.uses, now=now)
        elif args.duration is not None:
            scope = GrantScope.until(now + parse_duration(args.duration))
        else:
            scope = GrantScope.once(now=now)
    except ValueError as exc:
        raise GateError(str(exc), "use --once, --uses N (N >= 1) or --for 10m") from exc
    key = GrantKey.load_or_create(args.key or default_key_path())
    request = store.approve(
        args.request_id, key=key, scope=scope, reviewer=args.reviewer or _user(), reason=args.reason
    )
    print(
        f"{shown(request.request_id)} approved: {shown(request.principal)} may call {shown(request.tool)} with "
        f"exactly these arguments {describe_scope(scope)}; grant {shown(request.grant_id)}"
    )
    return 0


def _serve(store: ReviewStore, args: argparse.Namespace) -> int:
    from contain.gate import GrantKey, default_key_path
    from contain.gate.web import make_review_server

    key = GrantKey.load_or_create(args.key or default_key_path())
    try:
        server, app = make_review_server(
            store, key, host=args.host, port=args.port, reviewer=args.reviewer or f"web:{_user()}"
        )
    except OSError as exc:
        raise GateError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror}", "choose another --port (0 picks a free one)"
        ) from exc
    # The one announcement of the capability URL and the token: nothing else prints or logs them.
    print(f"review page: {app.url}", flush=True)
    print(f"token: {app.token}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
