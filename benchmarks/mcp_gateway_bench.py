"""Per-call latency of server-everything's echo: direct vs through `contain mcp gateway`
(upstream on the host, and upstream inside the sandbox). Not a test: it prints numbers.

Run: .venv/bin/python benchmarks/mcp_gateway_bench.py [CALLS]   (after `make setup`)
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

REPO = str(Path(__file__).resolve().parents[1])
EV = f"{REPO}/tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def gateway_params(root, sandbox):
    os.chmod(root, 0o755)
    manifest = {
        "version": 1,
        "files": [{"host": f"{REPO}/tests/npm/node_modules", "path": "/opt/npm/node_modules", "access": "read"}],
        "resources": {"wall_s": "600s", "memory_bytes": "1GiB", "pids_max": 256},
        "tools": [{"name": "ev__echo", "verdict": "allow"}],
    }
    open(f"{root}/contain.yaml", "w").write(json.dumps(manifest))
    args = ["/opt/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js" if sandbox else EV, "stdio"]
    config = {
        "boundary": "contain.yaml",
        "upstreams": {"ev": {"transport": "stdio", "command": "node", "args": args, "sandbox": sandbox}},
        "review": {"store": "review.db", "grant_key": "grant.key"},
        "pins": "pins.db",
        "log": "log.jsonl",
    }
    open(f"{root}/gateway.yaml", "w").write(json.dumps(config))
    return StdioServerParameters(
        command=f"{REPO}/.venv/bin/contain", args=["mcp", "gateway", "--config", f"{root}/gateway.yaml"]
    )


async def measure(label, params, tool):
    t0 = time.perf_counter()
    async with Client(params, read_timeout_seconds=60) as c:
        await c.list_tools()
        start = time.perf_counter() - t0
        for _ in range(10):
            await c.call_tool(tool, {"message": "warm"})
        lat = []
        for i in range(N):
            t = time.perf_counter()
            r = await c.call_tool(tool, {"message": f"m{i}"})
            lat.append((time.perf_counter() - t) * 1000)
            assert not r.is_error, r
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    print(f"{label:32s} start+list {start * 1000:7.1f} ms   call p50 {p(0.5):6.2f} ms  p99 {p(0.99):6.2f} ms  (n={N})")


async def main():
    await measure("direct (no gateway)", StdioServerParameters(command="node", args=[EV, "stdio"]), "echo")
    with tempfile.TemporaryDirectory() as root:
        await measure("gateway, host upstream", gateway_params(root, False), "ev__echo")
    with tempfile.TemporaryDirectory() as root:
        await measure("gateway, sandboxed upstream", gateway_params(root, True), "ev__echo")


anyio.run(main)
