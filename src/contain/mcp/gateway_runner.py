"""Assemble and run the gateway from gateway.yaml: the orchestrator behind ``contain mcp gateway``.

Steps, in order:
  1. load the boundary manifest the config names and build the gate from its ``tools:`` rules
     (a manifest error stops here: no upstream is started for a policy that does not load);
  2. open the pin store, the review store (its grant use counter lives in the same file) and the
     grant key (created 0600 if missing; a group/world-readable key is refused);
  3. open the call log;
  4. connect every upstream (sandboxed ones start their sandbox here; each handshake is bounded
     by that upstream's ``limits.list_timeout_s``, so a silent upstream stops the start with a
     cause instead of hanging it);
  5. serve clients over stdio, or streamable HTTP on a loopback address, until the client leaves
     (stdio) or the process is interrupted (HTTP); then close upstreams and sandboxes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from contain.boundary import load_boundary
from contain.gate.grants import GrantKey
from contain.gate.model import Gate
from contain.gate.store import ReviewStore
from contain.mcp.config import GatewayConfig
from contain.mcp.gateway import CallLog, Gateway
from contain.mcp.pins import PinStore
from contain.mcp.review import StoreReviewQueue
from contain.mcp.transport import build_server, serve_http, serve_stdio
from contain.mcp.upstreams import connect_upstreams

__all__ = ["open_gateway", "run_gateway"]

_INSTRUCTIONS = (
    "Tools are named server__tool and every call passes contain's gate. A call that needs review "
    "returns a pending result with a request id; after a reviewer approves it, call again with the "
    "same arguments (or pass the grant token as _contain_grant)."
)


@asynccontextmanager
async def open_gateway(config: GatewayConfig) -> AsyncIterator[Gateway]:
    """Build the gateway (steps 1-4) and close everything on exit."""
    boundary = load_boundary(config.boundary)
    gate = Gate.from_boundary(boundary, unknown=config.unknown_tool)
    pins = PinStore(config.pins)
    store = ReviewStore(config.review.store)
    key = GrantKey.load_or_create(config.review.grant_key)
    call_log = CallLog(config.log)
    try:
        async with connect_upstreams(config.upstreams, boundary) as upstreams:
            yield Gateway(
                upstreams=upstreams,
                gate=gate,
                pins=pins,
                reviews=StoreReviewQueue(store),
                grant_key=key,
                uses=store.uses,
                principal=config.principal,
                call_log=call_log,
                limits={name: upstream.limits for name, upstream in config.upstreams.items()},
                new_tools=config.new_tools,
                wait_s=config.review.wait_s,
                poll_interval_s=config.review.poll_interval_s,
            )
    finally:
        call_log.close()


async def run_gateway(
    config: GatewayConfig, *, listen: tuple[str, int] | None = None, announce: Callable[[str], None] | None = None
) -> None:
    """Serve the gateway over stdio (``listen`` None) or streamable HTTP at ``listen``."""
    async with open_gateway(config) as gateway:
        server = build_server(
            "contain-gateway", list_tools=gateway.list_tools, call_tool=gateway.call_tool, instructions=_INSTRUCTIONS
        )
        if listen is None:
            await serve_stdio(server)
        else:
            await serve_http(server, *listen, announce=announce)
