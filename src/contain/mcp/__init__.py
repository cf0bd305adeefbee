"""MCP: a gateway in front of MCP servers (pins, the gate, review, grants) and the sandbox as tools.

See docs/mcp.md. The gateway (``Gateway``, run by ``run_gateway``) exposes upstream tools as
``server__tool``; ``SandboxTools`` is what ``contain mcp serve`` offers.
"""

from contain.mcp.config import GatewayConfig, HttpUpstream, ReviewSettings, StdioUpstream, load_gateway_config
from contain.mcp.gateway import GRANT_ARGUMENT, CallLog, Gateway, UpstreamSession, exposed_name, split_exposed_name
from contain.mcp.pins import Pin, PinCheck, PinState, PinStore, ToolDefinition
from contain.mcp.review import MemoryReviewQueue, ReviewQueue, ReviewState, ReviewStatus, StoreReviewQueue
from contain.mcp.sanitize import STRIPPED_RANGES, SanitizeReport, StrippedRange, sanitize_text
from contain.mcp.server import LANGUAGES, SandboxTools
from contain.mcp.service import open_gateway, run_gateway
from contain.mcp.stdio_in_sandbox import (
    HostProcessLauncher,
    ProcessLauncher,
    SandboxLauncher,
    SpawnedProcess,
    process_stdio_transport,
)
from contain.mcp.upstreams import McpUpstream, connect_upstreams

__all__ = [
    "GRANT_ARGUMENT",
    "LANGUAGES",
    "STRIPPED_RANGES",
    "CallLog",
    "Gateway",
    "GatewayConfig",
    "HostProcessLauncher",
    "HttpUpstream",
    "McpUpstream",
    "MemoryReviewQueue",
    "Pin",
    "PinCheck",
    "PinState",
    "PinStore",
    "ProcessLauncher",
    "ReviewQueue",
    "ReviewSettings",
    "ReviewState",
    "ReviewStatus",
    "SandboxLauncher",
    "SandboxTools",
    "SanitizeReport",
    "SpawnedProcess",
    "StdioUpstream",
    "StoreReviewQueue",
    "StrippedRange",
    "ToolDefinition",
    "UpstreamSession",
    "connect_upstreams",
    "exposed_name",
    "load_gateway_config",
    "open_gateway",
    "process_stdio_transport",
    "run_gateway",
    "sanitize_text",
    "split_exposed_name",
]
