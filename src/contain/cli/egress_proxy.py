"""`contain egress-proxy --config FILE --listen HOST:PORT`: the egress proxy as a service.

The proxy Deployment that ``contain k8s render`` writes runs this (``contain.k8s.proxy
.PROXY_COMMAND``). FILE is a boundary manifest; only its ``network`` section is used. Each
attempt is one JSON line on stderr. Runs until SIGTERM or SIGINT; exit 0 then, 125 when the
configuration is invalid or the address cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="boundary manifest with network.allow")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="numeric address, e.g. 0.0.0.0:3128")


def execute(args: argparse.Namespace) -> int:
    from contain.boundary import load_boundary
    from contain.boundary.plain import plain_boundary
    from contain.egress.standalone import parse_listen, serve_proxy

    listen = parse_listen(args.listen)
    boundary = plain_boundary(load_boundary(args.config))
    asyncio.run(serve_proxy(boundary, listen))
    return 0
