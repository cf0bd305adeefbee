"""The egress proxy as a service of its own: ``contain egress-proxy --config FILE --listen ADDR``.

This is what the proxy Deployment of ``contain k8s render`` runs. It is the same policy, resolver
and proxy as a sandbox's egress (``EgressPolicy``, ``Resolver``, ``ProxyServer``, the
``ConnectionLimit`` of ``session.py``); only the listener differs: one TCP socket on ``ADDR``
(the Pod's address) instead of listeners bound inside a sandbox's network namespace.

What it enforces: every request is decided by ``network.allow`` of the configuration file (a
boundary manifest; only ``network`` matters), every resolved address is checked against
``SPECIAL_RANGES`` and this host's own addresses before it is dialled, at most
``MAX_OPEN_CONNECTIONS`` connections are open at once, and each attempt is one JSON line on
stderr (fields clipped with ``clip_text``; ``json.dumps`` escapes control characters).

What it does NOT do, compared with a sandbox's egress: no DNS stub and no transparent capture
(a Pod's clients must use the proxy variables), and no authentication of clients: whoever can
connect to ``ADDR`` can use the allow list. In Kubernetes the NetworkPolicy admits only the
task's sandbox Pod; anywhere else, listen on an address only that client reaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import TextIO

from contain._log import LazyLogger
from contain.boundary.plain import PlainBoundary
from contain.egress.addresses import local_interface_addresses
from contain.egress.log import EgressEvent, clip_text
from contain.egress.policy import EgressPolicy, Via
from contain.egress.proxy import ProxyServer
from contain.egress.resolve import Lookup, Resolver, system_lookup
from contain.egress.session import ConnectionLimit
from contain.errors import SandboxStartError

__all__ = ["ListenAddress", "event_line", "parse_listen", "serve_proxy"]

log = LazyLogger(__name__)

ListenAddress = tuple[str, int]
_LISTEN_FIX = "write HOST:PORT with a numeric address, e.g. 0.0.0.0:3128 or [::]:3128"


def parse_listen(text: str) -> ListenAddress:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) with a numeric host and a port in 1-65535.

    Raises:
        SandboxStartError: anything else (a name would be resolved: listen where you mean).
    """
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        address = ipaddress.ip_address(host)
        port = int(port_text) if port_text.isascii() and port_text.isdigit() else 0
    except ValueError:
        address, port = None, 0
    if not sep or address is None or not 1 <= port <= 65535:
        raise SandboxStartError(f"--listen {text[:80]!r} is not a numeric HOST:PORT", _LISTEN_FIX)
    return str(address), port


def event_line(event: EgressEvent) -> str:
    """One attempt as a JSON line, its text fields clipped (they quote what the client sent)."""
    data = asdict(event)
    for key, value in data.items():
        if isinstance(value, str):
            data[key] = clip_text(value)
    return json.dumps(data, ensure_ascii=True, sort_keys=True)


def _stderr_record(stream: TextIO) -> Callable[[EgressEvent], None]:
    def record(event: EgressEvent) -> None:
        stream.write(event_line(event) + "\n")
        stream.flush()

    return record


async def serve_proxy(
    boundary: PlainBoundary,
    listen: ListenAddress,
    *,
    lookup: Lookup = system_lookup,
    record: Callable[[EgressEvent], None] | None = None,
    started: Callable[[ListenAddress], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is None).

    Steps: build the policy, probe this host's addresses (facts, once), bind, report the bound
    address through ``started``, serve.

    Raises:
        SandboxStartError: the address cannot be bound.
    """
    record = record or _stderr_record(sys.stderr)
    policy = EgressPolicy.from_boundary(boundary)
    resolver = Resolver(policy, host_addresses=local_interface_addresses(), lookup=lookup)
    proxy = ProxyServer(resolver.decide, record)
    limit = ConnectionLimit(record)
    try:
        server = await asyncio.start_server(limit.wrap(proxy.handle, via=str(Via.CONNECT)), listen[0], listen[1])
    except OSError as exc:
        raise SandboxStartError(
            f"the egress proxy cannot listen on {listen[0]}:{listen[1]}: {exc.strerror}",
            "choose a free port on an address of this host",
        ) from exc
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    bound = server.sockets[0].getsockname()
    if started is not None:
        started((str(bound[0]), int(bound[1])))
    log.info("egress proxy listening on %s:%s with %d allow entries", bound[0], bound[1], len(policy.entries))
    try:
        await stop.wait()
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()
