"""The pipe transport under the sandboxed upstream, driven with plain host processes.

The sandbox itself is exercised in tests/integration/test_mcp_gateway.py (server-everything runs
inside it); here the framing, the teardown and the failure paths are checked without one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from contain.mcp.stdio_in_sandbox import HostProcessLauncher, process_stdio_transport

SERVER = """
import anyio, mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="big", description="x", input_schema={"type": "object"})])

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(text="y" * 300000)])

async def main():
    server = Server("t", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
"""


def test_a_stdio_server_is_reachable_through_the_pipes_and_stopped_on_close(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    launcher = HostProcessLauncher()

    async def scenario() -> None:
        transport = process_stdio_transport(launcher, [sys.executable, str(script)], env={}, label="t")
        async with Client(transport, read_timeout_seconds=30) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["big"]
            result = await client.call_tool("big", {})
            assert result.content[0].text == "y" * 300000  # type: ignore[union-attr]  # spans many reads
            process = launcher._process
            assert process is not None and process.poll() is None

    anyio.run(scenario)
    assert launcher._process is None  # closed: killed, reaped, pipes closed


def test_a_process_that_exits_ends_the_session_instead_of_hanging() -> None:
    launcher = HostProcessLauncher()

    async def scenario() -> None:
        transport = process_stdio_transport(launcher, [sys.executable, "-c", "pass"], env={})
        with anyio.fail_after(20):
            with pytest.raises((MCPError, ExceptionGroup, anyio.BrokenResourceError, anyio.ClosedResourceError)):
                async with Client(transport, read_timeout_seconds=10):
                    pass

    anyio.run(scenario)
