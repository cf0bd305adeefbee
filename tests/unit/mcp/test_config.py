"""gateway.yaml: strict, paths resolved against the file, and the shipped example loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from contain.boundary import ToolVerdict
from contain.errors import BoundaryInvalid
from contain.mcp.config import HttpUpstream, StdioUpstream, load_gateway_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "mcp"

MINIMAL = """
boundary: contain.yaml
upstreams:
  fs: {transport: stdio, command: node, args: [server.js, /data], sandbox: true}
  web: {transport: http, url: "http://127.0.0.1:8931/mcp"}
review: {store: state/review.db, grant_key: state/grant.key, wait_s: 30}
pins: state/pins.db
log: /var/log/gateway.jsonl
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return path


def test_minimal_config_loads_with_paths_resolved_against_its_directory(tmp_path):
    config = load_gateway_config(_write(tmp_path, MINIMAL))
    assert config.boundary == str(tmp_path / "contain.yaml")
    assert config.review.store == str(tmp_path / "state" / "review.db")
    assert config.log == "/var/log/gateway.jsonl"
    assert config.unknown_tool is ToolVerdict.DENY and config.principal == "agent"
    assert isinstance(config.upstreams["fs"], StdioUpstream) and config.upstreams["fs"].sandbox
    assert isinstance(config.upstreams["web"], HttpUpstream)


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (MINIMAL + "typo_key: 1\n", "typo_key"),
        (MINIMAL.replace("sandbox: true", "sandbox: true, extra: 1"), "upstreams.fs"),
        (MINIMAL.replace("fs:", "my__fs:"), "upstreams"),
        (MINIMAL.replace("fs:", "FS:"), "upstreams"),
        (MINIMAL.replace("http://127.0.0.1:8931/mcp", "ftp://x/mcp"), "upstreams.web"),
        (MINIMAL.replace("http://127.0.0.1:8931/mcp", "http://user:pw@h/mcp"), "upstreams.web"),
        (MINIMAL.replace("transport: http", "transport: sse"), "upstreams.web"),
        (MINIMAL.replace("wait_s: 30", "wait_s: -1"), "review.wait_s"),
        (MINIMAL.replace("pins: state/pins.db\n", ""), "pins"),
        (MINIMAL + "unknown_tool: allow\n", "unknown_tool"),
    ],
)
def test_invalid_configs_name_the_key(tmp_path, change, where):
    with pytest.raises(BoundaryInvalid) as info:
        load_gateway_config(_write(tmp_path, change))
    assert where in info.value.cause and "gateway.yaml" in info.value.cause


def test_unreadable_or_non_mapping_files_are_errors(tmp_path):
    with pytest.raises(BoundaryInvalid, match="cannot read"):
        load_gateway_config(tmp_path / "missing.yaml")
    with pytest.raises(BoundaryInvalid, match="mapping"):
        load_gateway_config(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(BoundaryInvalid, match="YAML"):
        load_gateway_config(_write(tmp_path, "a: [\n"))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("gateway*.yaml")), ids=lambda p: p.name)
def test_every_example_gateway_config_loads(path):
    config = load_gateway_config(path)
    assert config.upstreams


def test_the_example_boundary_builds_a_gate_for_the_example_tools():
    from contain.boundary import load_boundary
    from contain.gate import Gate, ToolCall

    config = load_gateway_config(EXAMPLES / "gateway.yaml")
    gate = Gate.from_boundary(load_boundary(config.boundary), unknown=config.unknown_tool)
    workspace = "/tmp/contain-mcp-example/workspace"

    def verdict(tool: str, arguments: dict[str, object]) -> str:
        return str(gate.evaluate(ToolCall("alice", tool.split("__")[0], tool, "sha256:x", arguments)).verdict)

    assert verdict("fs__write_file", {"path": f"{workspace}/.git/hooks/pre-commit", "content": ""}) == "deny"
    assert verdict("fs__write_file", {"path": f"{workspace}/notes.txt", "content": ""}) == "review"
    assert verdict("fs__write_file", {"path": "/etc/passwd", "content": ""}) == "deny"
    assert verdict("ev__echo", {"message": "hi"}) == "allow"
    assert verdict("ev__get-env", {}) == "deny"


def test_new_tools_are_withheld_and_upstreams_have_bounded_limits_by_default(tmp_path):
    from contain.mcp.config import UpstreamLimits
    from contain.mcp.pins import NewToolPolicy

    config = load_gateway_config(_write(tmp_path, MINIMAL))
    assert config.new_tools is NewToolPolicy.WITHHOLD
    assert config.upstreams["fs"].limits == UpstreamLimits()
    assert (UpstreamLimits().list_timeout_s, UpstreamLimits().call_timeout_s) == (10.0, 120.0)
    custom = MINIMAL.replace("sandbox: true}", "sandbox: true, limits: {list_timeout_s: 2, max_tools: 8}}")
    limits = load_gateway_config(_write(tmp_path, custom + "new_tools: trust_on_first_use\n")).upstreams["fs"].limits
    assert (limits.list_timeout_s, limits.max_tools, limits.call_timeout_s) == (2.0, 8, 120.0)


@pytest.mark.parametrize(
    "bad",
    ["limits: {list_timeout_s: 0}", "limits: {call_timeout_s: -1}", "limits: {max_tools: 0}", "limits: {nope: 1}"],
)
def test_limits_are_checked(tmp_path, bad):
    with pytest.raises(BoundaryInvalid, match=r"upstreams\.fs.*limits"):
        load_gateway_config(_write(tmp_path, MINIMAL.replace("sandbox: true}", f"sandbox: true, {bad}}}")))


def test_an_unknown_new_tools_policy_is_refused(tmp_path):
    with pytest.raises(BoundaryInvalid, match="new_tools"):
        load_gateway_config(_write(tmp_path, MINIMAL + "new_tools: allow\n"))
