"""MCP: a gateway in front of MCP servers (pins, the gate, review, grants) and the sandbox as tools.

See docs/mcp.md. The gateway (``Gateway``, run by ``run_gateway``) exposes upstream tools as
``server__tool``; ``SandboxTools`` is what ``contain mcp serve`` offers.
"""

from contain.mcp.config import (
    GatewayConfig,
    HttpUpstream,
    ReviewSettings,
    StdioUpstream,
    UpstreamLimits,
    load_gateway_config,
)
from contain.mcp.exposure import EXPOSURE_RULES, ExposureRule, plan_listing
from contain.mcp.gateway import GRANT_ARGUMENT, CallLog, Gateway, UpstreamSession, exposed_name, split_exposed_name
from contain.mcp.gateway_runner import open_gateway, run_gateway
from contain.mcp.pins import NewTool, NewToolPolicy, Pin, PinCheck, PinState, PinStore, ToolDefinition
from contain.mcp.review import MemoryReviewQueue, ReviewQueue, ReviewState, ReviewStatus, StoreReviewQueue
from contain.mcp.sandbox_tools import LANGUAGES, SandboxTools
from contain.mcp.sanitize import STRIPPED_RANGES, SanitizeReport, StrippedRange, sanitize_text
from contain.mcp.status import RESERVED_CHANNEL_RULES, STATUS_META_KEY, ChannelRule
from contain.mcp.stdio_in_sandbox import (
    HostProcessLauncher,
    ProcessLauncher,
    SandboxLauncher,
    SpawnedProcess,
    process_stdio_transport,
)
from contain.mcp.upstreams import McpUpstream, connect_upstreams

__all__ = [
    "EXPOSURE_RULES",
    "GRANT_ARGUMENT",
    "LANGUAGES",
    "RESERVED_CHANNEL_RULES",
    "STATUS_META_KEY",
    "STRIPPED_RANGES",
    "CallLog",
    "ChannelRule",
    "ExposureRule",
    "Gateway",
    "GatewayConfig",
    "HostProcessLauncher",
    "HttpUpstream",
    "McpUpstream",
    "MemoryReviewQueue",
    "NewTool",
    "NewToolPolicy",
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
    "UpstreamLimits",
    "UpstreamSession",
    "connect_upstreams",
    "exposed_name",
    "load_gateway_config",
    "open_gateway",
    "plan_listing",
    "process_stdio_transport",
    "run_gateway",
    "sanitize_text",
    "split_exposed_name",
]
