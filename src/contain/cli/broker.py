"""`contain broker serve --config broker.yaml` and `contain broker mint-token ...`.

``serve`` runs the broker in the foreground until SIGTERM or SIGINT: it reconciles intents left in
flight by a previous crash first (printed to stderr), then listens. ``mint-token`` prints a
capability token for a task, principal and actions (or for a manifest's records), for trusted
callers and tests; ``contain run`` mints its own through ``contain.broker.sandbox_link``.

Terminal output: reconciled intents are printed as JSON with ``ensure_ascii`` (every control and
non-ASCII character escaped, values exact); the listening address is rendered with
``contain.visible_text.for_terminal``. The minted token is contain's own base64url text.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from contain.errors import BoundaryInvalid
from contain.visible_text import for_terminal


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="broker_command", metavar="SUBCOMMAND", required=True)
    serve = sub.add_parser("serve", help="run the broker until SIGTERM")
    serve.add_argument("--config", required=True, help="path to broker.yaml")
    mint = sub.add_parser("mint-token", help="print a capability token")
    mint.add_argument("--config", required=True, help="path to broker.yaml (for the token key)")
    mint.add_argument("--manifest", help="take task, principal and records' actions from this contain.yaml")
    mint.add_argument("--task", help="task name")
    mint.add_argument("--principal", help="on whose behalf")
    mint.add_argument("--action", action="append", default=[], help="allowed action (repeat)")
    mint.add_argument("--ttl", type=float, default=3600.0, help="validity in seconds (default 3600)")
    spec = sub.add_parser("openapi", help="print the OpenAPI document")
    spec.add_argument("--config", required=True, help="path to broker.yaml")


def execute(args: argparse.Namespace) -> int:
    from contain.broker.config import load_config

    config = load_config(args.config)
    if args.broker_command == "serve":
        return _serve(config)
    if args.broker_command == "openapi":
        from contain.broker.service import build_broker, openapi_document

        json.dump(openapi_document(build_broker(config)), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    return _mint(config, args)


def _serve(config: object) -> int:
    from contain.broker.config import BrokerConfig
    from contain.broker.service import BrokerServer, build_broker, server_limits

    assert isinstance(config, BrokerConfig)
    broker = build_broker(config)
    for line in reconciled_lines(broker.start()):
        print(line, file=sys.stderr)
    server = BrokerServer(broker, socket_path=config.socket_path, tcp_port=config.tcp_port,
                          socket_mode=config.socket_mode, limits=server_limits(config))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    where = config.socket_path + (f" and http://{server.tcp_address[0]}:{server.tcp_address[1]}"
                                  if server.tcp_address else "")
    print(f"contain broker: listening on {for_terminal(where)}", file=sys.stderr, flush=True)
    stop.wait()
    server.shutdown()
    broker.close()
    return 0


def reconciled_lines(report: Sequence[Mapping[str, Any]]) -> list[str]:
    """One stderr line per intent reconciled at start, as JSON with every non-ASCII character escaped.

    The intents hold values a workload chose (record paths, action arguments); ``ensure_ascii``
    (kept explicit) turns every control, bidi and line-break character into a ``\\uXXXX`` escape, so
    the line is exact and still cannot act on the terminal.
    """
    return [f"contain broker: reconciled {json.dumps(line, sort_keys=True, ensure_ascii=True)}" for line in report]


def _mint(config: object, args: argparse.Namespace) -> int:
    from contain.broker.config import BrokerConfig
    from contain.broker.sandbox_link import token_for
    from contain.broker.tokens import TokenKey, mint_token

    assert isinstance(config, BrokerConfig)
    key = TokenKey.load_or_create(config.token_key_file)
    if args.manifest:
        from contain.boundary import load_boundary

        token = token_for(load_boundary(args.manifest), token_key=key, ttl_s=args.ttl)
    else:
        if not args.task or not args.principal or not args.action:
            raise BoundaryInvalid("mint-token needs --task, --principal and at least one --action",
                                  "or pass --manifest contain.yaml")
        token = mint_token(key, task=args.task, principal=args.principal, actions=args.action, ttl_s=args.ttl)
    print(token)
    return 0
