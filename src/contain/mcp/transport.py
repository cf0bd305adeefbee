"""The MCP transport: the SDK's low-level ``Server`` in front of a tool provider, over stdio or HTTP.

Shared by the gateway and ``contain mcp serve``: both are "list tools, call a tool" providers. Over
stdio the server speaks on the process's stdin/stdout (the SDK points fd 1 at stderr meanwhile, so
stray prints cannot corrupt the wire). Over streamable HTTP it listens on a loopback address only:
neither server authenticates its clients, so a non-loopback bind is refused rather than offered
with a warning.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from contain.errors import GateError

__all__ = ["CallTool", "ListTools", "build_server", "parse_listen_address", "serve_http", "serve_stdio"]

ListTools = Callable[[], Awaitable[list[types.Tool]]]
CallTool = Callable[[str, dict[str, Any] | None], Awaitable[types.CallToolResult]]


def build_server(name: str, *, list_tools: ListTools, call_tool: CallTool, instructions: str | None = None) -> Server:
    """A low-level MCP server whose tools/list and tools/call go to the two callables."""

    async def on_list_tools(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await list_tools())

    async def on_call_tool(
        _ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await call_tool(params.name, params.arguments)

    return Server(
        name, version="1", instructions=instructions, on_list_tools=on_list_tools, on_call_tool=on_call_tool
    )


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); only loopback hosts are accepted.

    Raises:
        GateError: not HOST:PORT, or the host is not a loopback address.
    """
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        port = int(port_text)
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        sep, loopback, port = "", False, -1
    if not sep or not 0 <= port <= 65535:
        raise GateError(f"listen address {text!r} is not HOST:PORT", "write e.g. 127.0.0.1:8931")
    if not loopback:
        raise GateError(
            f"listen address {text!r} is not a loopback address; the MCP endpoint has no client authentication",
            "listen on 127.0.0.1 or ::1 and put an authenticating proxy in front for remote clients",
        )
    return host, port


async def serve_stdio(server: Server) -> None:
    """Serve one client on this process's stdin/stdout until it disconnects."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(server: Server, host: str, port: int, *, announce: Callable[[str], None] | None = None) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until cancelled.

    The socket is bound here (port 0 picks a free port), then ``announce`` receives the URL
    (default: printed to stderr) before the first request is accepted.
    """
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound_port = sock.getsockname()[1]
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    url = f"http://{'[' + host + ']' if family == socket.AF_INET6 else host}:{bound_port}/mcp"
    (announce or (lambda u: print(f"contain: serving MCP at {u}", file=sys.stderr, flush=True)))(url)
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()
