"""``contain mcp serve`` end to end: the official ``mcp`` client runs commands and code in the real
sandbox and gets the RunResult back (exit status, output, violations)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

CONTAIN = [sys.executable, "-c", "import sys; from contain.cli import main; sys.exit(main())"]


def _manifest(root: Path) -> Path:
    (root / "data").mkdir()
    (root / "data" / "input.txt").write_text("from the host\n")
    (root / "data" / "input.txt").chmod(0o644)
    manifest = {
        "version": 1,
        "files": [
            {"host": str(root / "data"), "path": "/inputs", "access": "read"},
            {"path": "/work", "access": "scratch"},
        ],
        "resources": {"wall_s": "20s", "cpu_s": "10s", "memory_bytes": "256MiB", "pids_max": 64},
    }
    path = root / "contain.yaml"
    path.write_text(json.dumps(manifest))
    return path


def _serve(manifest: Path | None) -> StdioServerParameters:
    options = ["--manifest", str(manifest)] if manifest is not None else []
    return StdioServerParameters(command=CONTAIN[0], args=[*CONTAIN[1:], "mcp", "serve", *options])


def _data(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


def test_run_command_and_run_code_return_the_run_result(host_tmp: Path) -> None:
    manifest = _manifest(host_tmp)

    async def scenario() -> None:
        async with Client(_serve(manifest), read_timeout_seconds=60) as client:
            assert {t.name for t in (await client.list_tools()).tools} == {"run_command", "run_code"}
            cat = await client.call_tool("run_command", {"argv": ["cat", "/inputs/input.txt"]})
            assert not cat.is_error and _data(cat)["stdout"] == "from the host\n", cat
            piped = await client.call_tool("run_command", {"argv": ["tr", "a-z", "A-Z"], "stdin": "shout"})
            assert _data(piped)["stdout"] == "SHOUT"
            code = (
                "import os, pathlib\n"
                "print(pathlib.Path('d/values.csv').read_text().strip())\n"
                "print(os.getuid(), os.path.exists('/etc/shadow'), sorted(os.listdir('/inputs')))\n"
            )
            ran = await client.call_tool(
                "run_code", {"language": "python", "code": code, "files": {"d/values.csv": "a,b\n1,2\n"}}
            )
            lines = _data(ran)["stdout"].splitlines()
            assert lines[:2] == ["a,b", "1,2"] and lines[2].endswith("False ['input.txt']"), ran
            failed = await client.call_tool("run_code", {"language": "sh", "code": "echo no >&2; exit 3"})
            assert failed.is_error and _data(failed)["exit_code"] == 3 and _data(failed)["stderr"] == "no\n"
            written = await client.call_tool("run_command", {"argv": ["sh", "-c", "echo x > /inputs/new"]})
            assert written.is_error and _data(written)["exit_code"] != 0
            leftover = await client.call_tool("run_command", {"argv": ["ls", "/work"]})
            assert _data(leftover)["stdout"] == ""  # every call gets a fresh sandbox
            invalid = await client.call_tool("run_command", {"argv": []})
            assert invalid.is_error and "invalid arguments" in invalid.content[0].text  # type: ignore[union-attr]

    anyio.run(scenario)
    assert not (host_tmp / "data" / "new").exists()


def test_without_a_manifest_the_default_boundary_is_served_and_said() -> None:
    async def scenario() -> None:
        async with Client(_serve(None), read_timeout_seconds=60) as client:
            ran = await client.call_tool(
                "run_code",
                {"language": "python", "code": "import os; print(os.path.exists('/inputs'), os.getuid() != 0)"},
            )
            assert _data(ran)["stdout"] == "False True\n", ran
            net = await client.call_tool("run_command", {"argv": ["curl", "-sS", "--max-time", "3", "http://a.test/"]})
            assert net.is_error  # the default boundary allows no destination

    anyio.run(scenario)
    said = subprocess.run(
        [*CONTAIN, "mcp", "serve"], stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False
    )
    assert "serving the default boundary" in said.stderr.decode(), said.stderr


def test_a_command_past_its_wall_clock_is_reported_as_timed_out(host_tmp: Path) -> None:
    manifest = _manifest(host_tmp)
    data = json.loads(manifest.read_text())
    data["resources"]["wall_s"] = "1s"
    manifest.write_text(json.dumps(data))

    async def scenario() -> None:
        async with Client(_serve(manifest), read_timeout_seconds=60) as client:
            result = await client.call_tool("run_command", {"argv": ["sleep", "30"]})
            assert result.is_error and _data(result)["timed_out"] is True, result
            assert "timed out" in result.content[0].text  # type: ignore[union-attr]

    anyio.run(scenario)


def test_serve_over_streamable_http_on_loopback(host_tmp: Path) -> None:
    manifest = _manifest(host_tmp)
    process = subprocess.Popen(
        [*CONTAIN, "mcp", "serve", "--manifest", str(manifest), "--http", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"serving MCP at (http://127\.0\.0\.1:\d+/mcp)", line)
        assert match, line

        async def scenario() -> None:
            async with Client(match.group(1), read_timeout_seconds=60) as client:
                result = await client.call_tool("run_command", {"argv": ["echo", "over http"]})
                assert _data(result)["stdout"] == "over http\n", result

        anyio.run(scenario)
    finally:
        process.terminate()
        process.wait(timeout=20)
