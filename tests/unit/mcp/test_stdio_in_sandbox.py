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


# ---- the upstream's stderr reaches a terminal: rendered line by line, bounded (issue 19 item 2)

HOSTILE_STDERR = b"log: ok\x1b[2J\x1b[H\x1b]52;c;ZXZpbA==\x07\r\xe2\x80\xae spoof\tx\n[gateway] fake\n"


def test_stderr_lines_are_rendered_and_prefixed():
    from contain.mcp.stdio_in_sandbox import StderrLines

    lines = StderrLines("fs\x1b[31m")
    assert lines.feed(HOSTILE_STDERR[:9]) == []  # no newline yet: nothing relayed
    assert lines.feed(HOSTILE_STDERR[9:]) == [
        "[fs\\x1b[31m] log: ok\\x1b[2J\\x1b[H\\x1b]52;c;ZXZpbA==\\x07\\r\\u202e spoof\tx\n",
        "[fs\\x1b[31m] [gateway] fake\n",  # the upstream's line cannot pass for the gateway's own
    ]
    assert lines.feed(b"last words \xff") == [] and lines.finish() == ["[fs\\x1b[31m] last words \ufffd\n"]


def test_a_long_stderr_line_is_cut_and_its_rest_dropped_without_buffering_it():
    from contain.mcp.stdio_in_sandbox import StderrLines

    lines = StderrLines("up", max_line_bytes=8)
    assert lines.feed(b"0123456789abc") == ["[up] 01234567 [line cut at 8 bytes]\n"]
    for _ in range(1000):  # a flood without a newline: nothing more relayed, nothing kept
        assert lines.feed(b"z" * 4096) == []
        assert len(lines._buffer) <= 8
    assert lines.feed(b"zz\nnext\n0123456789\n") == ["[up] next\n", "[up] 01234567 [line cut at 8 bytes]\n"]
    assert lines.finish() == []


def test_a_processs_hostile_stderr_reaches_the_sink_rendered() -> None:
    launcher = HostProcessLauncher()
    script = f"import sys; sys.stderr.buffer.write({HOSTILE_STDERR!r}); sys.stderr.flush()"
    received: list[str] = []

    async def scenario() -> None:
        done = anyio.Event()

        def sink(line: str) -> None:
            received.append(line)
            if "fake" in line:
                done.set()

        transport = process_stdio_transport(launcher, [sys.executable, "-c", script], env={}, label="t",
                                            stderr_sink=sink)
        with anyio.fail_after(20):
            async with transport:
                await done.wait()

    anyio.run(scenario)
    assert received == [
        "[t] log: ok\\x1b[2J\\x1b[H\\x1b]52;c;ZXZpbA==\\x07\\r\\u202e spoof\tx\n",
        "[t] [gateway] fake\n",
    ]
