"""Connect the gateway to its upstream MCP servers with the official ``mcp`` client.

One ``mcp.Client`` per upstream: stdio (a host child process, via the SDK's ``stdio_client``),
stdio inside contain's sandbox (``contain.mcp.stdio_in_sandbox``), or streamable HTTP. All are
entered on one ``AsyncExitStack`` so closing the gateway closes every upstream (and tears down
every sandbox).

Every request to an upstream has a deadline at the SDK level too (``read_timeout_seconds``: the
handshake and listings get ``limits.list_timeout_s``, calls ``limits.call_timeout_s``); the gateway
enforces the same limits itself around each request, so a fake or another ``UpstreamSession`` is
bounded the same way.

Not enforced here: anything about calls (``contain.mcp.gateway``). A host-process stdio upstream
runs with the gateway's privileges; its environment is the SDK's default set (HOME, LOGNAME, PATH,
SHELL, TERM, USER) plus the upstream's ``env:``, never the gateway's whole environment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters

from contain._log import LazyLogger
from contain.boundary.model import Boundary
from contain.errors import ContainError, GateError
from contain.mcp.config import HttpUpstream, StdioUpstream, Upstream, UpstreamLimits
from contain.mcp.stdio_in_sandbox import SandboxLauncher, process_stdio_transport

__all__ = ["McpUpstream", "connect_upstreams"]

log = LazyLogger(__name__)

_MAX_PAGES = 100  # a server that paginates forever is cut off


class McpUpstream:
    """``UpstreamSession`` over a connected ``mcp.Client``."""

    def __init__(self, client: Client, limits: UpstreamLimits | None = None) -> None:
        self.client = client
        self.limits = limits or UpstreamLimits()

    async def list_tools(self) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await self.client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None or len(tools) > self.limits.max_tools:
                break  # past max_tools the gateway drops this listing anyway: fetch no more pages
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await self.client.call_tool(name, arguments, read_timeout_seconds=self.limits.call_timeout_s)


def _client_for(name: str, upstream: Upstream, boundary: Boundary) -> Client:
    timeout_s = upstream.limits.list_timeout_s  # the handshake and every listing
    if isinstance(upstream, HttpUpstream):
        return Client(upstream.url, cache=None, read_timeout_seconds=timeout_s)
    assert isinstance(upstream, StdioUpstream)
    if upstream.sandbox:
        transport = process_stdio_transport(
            SandboxLauncher(boundary),
            [upstream.command, *upstream.args],
            env=upstream.env,
            cwd=upstream.cwd,
            label=name,
        )
        return Client(transport, cache=None, read_timeout_seconds=timeout_s)
    params = StdioServerParameters(
        command=upstream.command, args=list(upstream.args), env=dict(upstream.env) or None, cwd=upstream.cwd
    )
    return Client(params, cache=None, read_timeout_seconds=timeout_s)


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside nested exception groups (anyio task groups wrap errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _leaf_message(exc: BaseException) -> str:
    """The innermost message of an exception, with its cause when that says more."""
    exc = _leaf(exc)
    cause = exc.__cause__ or exc.__context__
    text = f"{type(exc).__name__}: {exc}"
    if cause is None or str(cause) == str(exc):
        return text
    return f"{text} ({type(cause).__name__}: {cause})"


@asynccontextmanager
async def connect_upstreams(
    upstreams: Mapping[str, Upstream], boundary: Boundary
) -> AsyncIterator[dict[str, McpUpstream]]:
    """Connect every upstream (in config order); close them all on exit.

    Raises:
        GateError: an upstream could not be started or did not complete the MCP handshake.
        SandboxStartError, UnsupportedHost: a sandboxed upstream's sandbox could not start.
    """
    failed: tuple[str, Exception] | None = None
    async with AsyncExitStack() as stack:
        sessions: dict[str, McpUpstream] = {}
        for name, upstream in upstreams.items():
            try:
                client = await stack.enter_async_context(_client_for(name, upstream, boundary))
            except (ContainError, OSError, MCPError, ExceptionGroup, TimeoutError) as exc:  # groups: anyio
                failed = (name, exc)
                break
            log.info("connected upstream %s", name)
            sessions[name] = McpUpstream(client, upstream.limits)
        if failed is None:
            yield sessions
    if failed is not None:
        # Raised after the stack closed the upstreams already started, so it is not wrapped in
        # their task groups' exception groups.
        name, error = failed
        leaf = _leaf(error)
        if isinstance(leaf, ContainError):
            raise leaf  # e.g. SandboxStartError: its own cause and fix are the useful ones
        raise GateError(
            f"upstream {name!r} could not be connected: {_leaf_message(error)}",
            "check its command/url in the gateway config and run it by hand",
        ) from error
