"""gateway.yaml: which upstream MCP servers the gateway fronts, and where it keeps its state.

Strict like the boundary manifest: unknown keys are errors, every error names the file and the key
path. Relative paths are resolved against the directory of the config file, so a config can be
moved with its state. The gateway's *policy* is not here: tool rules live in the boundary
manifest's ``tools:`` section (``boundary:`` names the file), so the gate, the broker and the
gateway read one policy.

Not enforced here: that an upstream command is trustworthy. ``sandbox: true`` launches a stdio
upstream inside contain's runtime with the manifest's boundary; without it the upstream runs as a
plain host process with the gateway's privileges, and with the SDK's default environment (HOME,
LOGNAME, PATH, SHELL, TERM, USER) plus ``env``, never the gateway's whole environment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contain.boundary.documents import read_config_document
from contain.boundary.model import ToolVerdict
from contain.errors import BoundaryInvalid
from contain.mcp.pins import NewToolPolicy

__all__ = [
    "GatewayConfig",
    "HttpUpstream",
    "ReviewSettings",
    "StdioUpstream",
    "Upstream",
    "UpstreamLimits",
    "load_gateway_config",
]

_STRICT = ConfigDict(extra="forbid", frozen=True)
# Namespacing joins server and tool with "__", so a server name may not contain it.
_SERVER_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]|_(?!_)){0,30}[a-z0-9]|[a-z0-9]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UpstreamLimits(BaseModel):
    """How long the gateway waits for one upstream and how much of its listing it accepts.

    A limit an upstream exceeds costs that upstream alone: a listing that times out or breaks a
    limit leaves it out of ``tools/list`` (logged), the other upstreams are still listed.
    """

    model_config = _STRICT
    list_timeout_s: float = Field(
        default=10.0, gt=0.0, le=600.0,
        description="Seconds for the handshake and each tools/list (all pages); then the upstream is dropped, e.g. 10.",
    )
    call_timeout_s: float = Field(
        default=120.0, gt=0.0, le=86400.0,
        description="Seconds a forwarded tools/call may take before the agent gets an error result, e.g. 120.",
    )
    max_tools: int = Field(
        default=256, ge=1, le=4096,
        description="A listing with more tools drops the whole upstream (bounds the pin store), e.g. 256.",
    )
    max_definition_bytes: int = Field(
        default=65536, ge=1024, le=4 * 1024 * 1024,
        description="Canonical JSON bytes of name + description + schema; larger tools are refused, e.g. 65536.",
    )


class StdioUpstream(BaseModel):
    """An upstream started as a child process speaking MCP on stdin/stdout."""

    model_config = _STRICT
    limits: UpstreamLimits = Field(default_factory=UpstreamLimits, description="Timeouts and listing bounds.")
    transport: Literal["stdio"] = Field(description="stdio: the gateway starts the command.")
    command: str = Field(description="Program to run, e.g. node or /usr/bin/npx.")
    args: tuple[str, ...] = Field(default=(), description="Arguments, e.g. [server.js, /data].")
    env: dict[str, str] = Field(
        default_factory=dict, description="The only extra variables the upstream gets, e.g. {LOG_LEVEL: info}."
    )
    cwd: str | None = Field(default=None, description="Working directory (inside the sandbox when sandbox: true).")
    sandbox: bool = Field(
        default=False, description="Launch inside contain's runtime with the manifest's boundary, e.g. true."
    )

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: str) -> str:
        if not value or "\x00" in value:
            raise ValueError("command must be a non-empty program name or path")
        return value

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"env name {name!r} is not a valid variable name")
        return value


class HttpUpstream(BaseModel):
    """An upstream reached over MCP streamable HTTP."""

    model_config = _STRICT
    transport: Literal["http"] = Field(description="http: streamable HTTP at url.")
    limits: UpstreamLimits = Field(default_factory=UpstreamLimits, description="Timeouts and listing bounds.")
    url: str = Field(description="Endpoint, e.g. http://127.0.0.1:8931/mcp.")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url {value!r} must be http:// or https:// with a host, e.g. http://127.0.0.1:8931/mcp")
        if parts.username or parts.password:
            raise ValueError("url must not carry credentials; they would be logged")
        return value


Upstream = Annotated[StdioUpstream | HttpUpstream, Field(discriminator="transport")]


class ReviewSettings(BaseModel):
    """Where review requests and grant state live, and how long a call waits for a reviewer."""

    model_config = _STRICT
    store: str = Field(description="Review queue (SQLite), shared with `contain review`, e.g. review.db.")
    grant_key: str = Field(description="HMAC key file for grants (0600, created if missing), e.g. grant.key.")
    wait_s: float = Field(
        default=0.0, ge=0.0, le=3600.0,
        description="Seconds a review call waits for a decision; 0 returns 'pending' at once, e.g. 30.",
    )
    poll_interval_s: float = Field(default=0.25, gt=0.0, le=10.0, description="Store polling period, e.g. 0.25.")


class GatewayConfig(BaseModel):
    """The whole gateway.yaml."""

    model_config = _STRICT
    version: Literal[1] = Field(default=1, description="Config format version; only 1 exists.")
    boundary: str = Field(description="Boundary manifest whose tools: rules the gate applies, e.g. contain.yaml.")
    principal: str = Field(default="agent", description="On whose behalf calls are made, e.g. alice.")
    unknown_tool: ToolVerdict = Field(
        default=ToolVerdict.DENY, description="Verdict for a tool no rule names: deny (default) or review."
    )
    new_tools: NewToolPolicy = Field(
        default=NewToolPolicy.WITHHOLD,
        description=(
            "A tool an upstream adds after its first listing was pinned: withhold (default: until "
            "`contain mcp pins approve`) or trust_on_first_use (exposed at once), e.g. withhold."
        ),
    )
    upstreams: dict[str, Upstream] = Field(description="Upstream servers by name, e.g. {fs: {transport: stdio, ...}}.")
    review: ReviewSettings = Field(description="Review queue, grant key and waiting.")
    pins: str = Field(description="Pin store (SQLite) of tool definitions seen on first use, e.g. pins.db.")
    log: str = Field(description="JSON-lines log of every call and decision, e.g. gateway.log.jsonl.")

    @field_validator("upstreams")
    @classmethod
    def _check_upstreams(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("name at least one upstream server")
        for name in value:
            if not _SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"upstream name {name!r} must be 1-32 lowercase letters, digits, - or single _ "
                    "(\"__\" separates server and tool in exposed names)"
                )
        return value

    @field_validator("unknown_tool")
    @classmethod
    def _check_unknown_tool(cls, value: ToolVerdict) -> ToolVerdict:
        if value is ToolVerdict.ALLOW:
            raise ValueError("unknown_tool may be deny or review; allowing tools no rule names is not offered")
        return value

    @field_validator("principal")
    @classmethod
    def _check_principal(cls, value: str) -> str:
        if not value or len(value) > 128 or any(ch.isspace() or ord(ch) < 32 for ch in value):
            raise ValueError("principal must be 1-128 characters without spaces or controls, e.g. alice")
        return value


def _resolve(base: Path, value: str) -> str:
    path = Path(os.path.expanduser(value))
    return str(path if path.is_absolute() else (base / path).resolve())


def load_gateway_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read and validate gateway.yaml; relative paths are made absolute against its directory.

    Raises:
        BoundaryInvalid: the file is missing, not YAML, or fails validation (key path named).
    """
    source = Path(path)
    try:
        data = read_config_document(source, what="gateway config").data
    except OSError as exc:
        raise BoundaryInvalid(f"cannot read gateway config {source}: {exc.strerror}", "check the path") from exc
    except yaml.YAMLError as exc:
        raise BoundaryInvalid(f"{source}: not valid YAML: {exc}", "fix the YAML syntax") from exc
    if not isinstance(data, dict):
        raise BoundaryInvalid(f"{source}: the top level must be a mapping", "see examples/mcp/gateway.yaml")
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise BoundaryInvalid(
            f"{source}: {where}: {first['msg']}", "see examples/mcp/gateway.yaml and docs/mcp.md"
        ) from exc
    base = source.resolve().parent
    review = config.review.model_copy(
        update={"store": _resolve(base, config.review.store), "grant_key": _resolve(base, config.review.grant_key)}
    )
    return config.model_copy(
        update={
            "boundary": _resolve(base, config.boundary),
            "pins": _resolve(base, config.pins),
            "log": _resolve(base, config.log),
            "review": review,
        }
    )
