"""Which upstream tools a model may see, and in what form: one listing planned as data.

An upstream's ``tools/list`` is untrusted input on its way to a model. ``plan_listing`` turns it
into a ``ListingPlan``: the definitions that may be offered to the pin store, and a refusal (with a
row of ``EXPOSURE_RULES``) for each tool that may not, or for the whole upstream. ``exposed_tool``
is the one function that builds what a client sees from a *pinned* definition, so a reviewer who
approves a pin approves exactly its exposed form (``contain mcp pins list`` prints that form).

Tool names. MCP (2025-11-25, server/tools, "Tool names") says a name SHOULD be 1-128 characters of
ASCII letters, digits, ``_``, ``-`` and ``.``. We make that a MUST for the upstream name, and hold
the *exposed* name ``server__tool`` to the same 128 characters: a name is both shown to a person
and read by a model, and outside that set it can carry ANSI escapes, bidi controls or tag
characters that no cleaning can remove without renaming the tool (and a renamed tool is one the
upstream did not define). We did not choose 64 (some model APIs' limit): clients that need it can
refuse longer names themselves, and the spec allows 128.

Schemas. Every string value in the input schema (property descriptions, titles, enum values,
defaults, examples, at any depth) is cleaned with ``contain.mcp.sanitize``; a definition whose
object *keys* would change when cleaned is refused, because renaming a property changes which
argument the upstream receives. Cleaning an enum value or a pattern can make the exposed schema
ask for something the pinned one refuses; the gate validates against the pinned schema, so that
fails closed (rule ``schema``) rather than forwarding anything unvalidated.

Enforced: only name, cleaned description and cleaned input schema reach the client. ``title``,
``annotations`` (readOnlyHint and friends are claims a client may use to skip confirmation; the
gate, not the upstream, decides), ``outputSchema``, ``icons``, ``execution`` and ``_meta`` are
dropped, and the pin digest covers exactly name, description and input schema.

Not enforced: meaning. Visible words in a description that steer the model pass (a reviewer reads
them in ``contain mcp pins list``); homoglyphs are not folded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from contain.mcp.pins import ToolDefinition
from contain.mcp.sanitize import sanitize_json, sanitize_text

__all__ = [
    "EXPOSURE_RULES",
    "GRANT_ARGUMENT",
    "MAX_EXPOSED_NAME_CHARS",
    "MAX_SCHEMA_DEPTH",
    "NAME_SEPARATOR",
    "TOOL_NAME",
    "ExposedTool",
    "ExposureRule",
    "ListingPlan",
    "Refusal",
    "exposed_definition",
    "exposed_name",
    "exposed_tool",
    "plan_listing",
    "rule",
]

NAME_SEPARATOR = "__"  # server names never contain it (contain.mcp.config)
GRANT_ARGUMENT = "_contain_grant"
# MCP 2025-11-25, server/tools "Tool names": 1-128 of A-Z a-z 0-9 _ - . (a SHOULD there; a MUST here).
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
MAX_EXPOSED_NAME_CHARS = 128
# JSON Schemas written by people nest a few levels; 64 leaves room and keeps walks bounded.
MAX_SCHEMA_DEPTH = 64
_LOGGED_NAME_CHARS = 200  # a refused name can be megabytes; the log keeps its start

_GRANT_PROPERTY = {
    "type": "string",
    "description": "Grant token from a reviewer's approval of this exact call (contain review).",
}


@dataclass(frozen=True)
class ExposureRule:
    """One reason a tool (or a whole upstream) is not exposed."""

    rule_id: str
    scope: str  # "upstream": the whole listing is dropped; "tool": only that tool
    reason: str


EXPOSURE_RULES: tuple[ExposureRule, ...] = (
    ExposureRule(
        "too-many-tools", "upstream",
        "more tools than limits.max_tools: which to keep would be the upstream's choice, and every "
        "new name would grow the pin store (20,000 names a listing once added 10 MB each time)",
    ),
    ExposureRule(
        "duplicate-name", "tool",
        "the upstream lists the name more than once: which definition would it run? neither is exposed",
    ),
    ExposureRule(
        "tool-name", "tool",
        "the name is not 1-128 of [A-Za-z0-9_.-] (MCP tool-name rule), or server__tool is longer than "
        "128: outside that set a name carries escapes or invisible text that cleaning would rename",
    ),
    ExposureRule(
        "schema-too-deep", "tool",
        f"the input schema nests deeper than {MAX_SCHEMA_DEPTH} levels: walking it is unbounded work",
    ),
    ExposureRule(
        "not-json", "tool",
        "the definition is not canonical JSON (e.g. NaN, a lone surrogate): it cannot be digested or pinned",
    ),
    ExposureRule(
        "definition-too-large", "tool",
        "name + description + schema exceed limits.max_definition_bytes: bounds the pin store and the "
        "text a model is handed",
    ),
    ExposureRule(
        "schema-key-hidden-text", "tool",
        "an object key in the schema (e.g. a property name) carries invisible or terminal-control "
        "characters; cleaning would rename it and change which argument the upstream receives",
    ),
    ExposureRule(
        "reserved-argument", "tool",
        f"the schema declares {GRANT_ARGUMENT}, which the gateway takes out of every call",
    ),
)

_RULES = {row.rule_id: row for row in EXPOSURE_RULES}


def rule(rule_id: str) -> ExposureRule:
    """The row of ``EXPOSURE_RULES`` with this id (KeyError for an unknown id: a programming error)."""
    return _RULES[rule_id]


@dataclass(frozen=True)
class Refusal:
    """A tool (or a whole upstream when ``tool`` is None) that is not exposed, and why."""

    server: str
    tool: str | None  # the raw name, cut to _LOGGED_NAME_CHARS
    rule: ExposureRule
    detail: str

    def to_log(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "upstream_tool": self.tool,
            "rule_id": self.rule.rule_id,
            "reason": f"{self.rule.reason} ({self.detail})" if self.detail else self.rule.reason,
        }


@dataclass(frozen=True)
class ListingPlan:
    """One upstream listing, decided: what goes to the pin store, and what is refused."""

    server: str
    offered: tuple[ToolDefinition, ...]
    refused: tuple[Refusal, ...]
    dropped: Refusal | None  # set: the whole upstream is left out of this listing


def exposed_name(server: str, tool: str) -> str:
    """The name a client sees: ``server__tool`` (server names never contain ``__``)."""
    return f"{server}{NAME_SEPARATOR}{tool}"


def _walk_schema(value: Any) -> tuple[int, int]:
    """(depth, number of object keys that cleaning would change), without recursion.

    Stops early once the depth passes ``MAX_SCHEMA_DEPTH`` (enough to refuse).
    """
    deepest = 0
    unsafe_keys = 0
    work: list[tuple[Any, int]] = [(value, 1)]
    while work:
        item, depth = work.pop()
        deepest = max(deepest, depth)
        if depth > MAX_SCHEMA_DEPTH:
            return depth, unsafe_keys
        if isinstance(item, dict):
            unsafe_keys += sum(1 for key in item if not isinstance(key, str) or sanitize_text(key).changed)
            work.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            work.extend((child, depth + 1) for child in item)
    return deepest, unsafe_keys


def _check_tool(server: str, definition: ToolDefinition, *, max_definition_bytes: int) -> tuple[str, str] | None:
    """(rule id, detail) when the definition may not be exposed; None when it may."""
    name = definition.name
    if not TOOL_NAME.fullmatch(name) or len(exposed_name(server, name)) > MAX_EXPOSED_NAME_CHARS:
        return "tool-name", f"{len(name)} characters"
    depth, unsafe_keys = _walk_schema(definition.input_schema)
    if depth > MAX_SCHEMA_DEPTH:
        return "schema-too-deep", f"deeper than {MAX_SCHEMA_DEPTH}"
    try:
        size = len(definition.to_json().encode("utf-8"))
    except ValueError as exc:
        return "not-json", str(exc)
    if size > max_definition_bytes:
        return "definition-too-large", f"{size} bytes, limit {max_definition_bytes}"
    if unsafe_keys:
        return "schema-key-hidden-text", f"{unsafe_keys} key(s)"
    properties = definition.input_schema.get("properties")
    if isinstance(properties, dict) and GRANT_ARGUMENT in properties:
        return "reserved-argument", ""
    return None


def plan_listing(
    server: str, tools: Sequence[types.Tool], *, max_tools: int, max_definition_bytes: int
) -> ListingPlan:
    """Decide which tools of one upstream listing may go on to the pin store.

    Args:
        server: the upstream's name in the gateway config.
        tools: the listing as the upstream sent it.
        max_tools: more tools than this drops the whole upstream (rule ``too-many-tools``).
        max_definition_bytes: a larger canonical definition is refused (``definition-too-large``).

    Returns:
        The plan: definitions offered (raw, in listing order), per-tool refusals, or the drop.
    """
    if len(tools) > max_tools:
        drop = Refusal(server, None, rule("too-many-tools"), f"{len(tools)} tools, limit {max_tools}")
        return ListingPlan(server, (), (), drop)
    counts: dict[str, int] = {}
    for tool in tools:
        counts[tool.name] = counts.get(tool.name, 0) + 1
    offered: list[ToolDefinition] = []
    refused: list[Refusal] = []
    for tool in tools:
        logged_name = tool.name[:_LOGGED_NAME_CHARS]
        if counts[tool.name] > 1:
            refused.append(Refusal(server, logged_name, rule("duplicate-name"), ""))
            continue
        definition = ToolDefinition(tool.name, tool.description or "", dict(tool.input_schema))
        problem = _check_tool(server, definition, max_definition_bytes=max_definition_bytes)
        if problem is not None:
            refused.append(Refusal(server, logged_name, rule(problem[0]), problem[1]))
            continue
        offered.append(definition)
    return ListingPlan(server, tuple(offered), tuple(refused), None)


def exposed_definition(definition: ToolDefinition) -> tuple[ToolDefinition, dict[str, int]]:
    """The definition as a model sees it: description and every schema string cleaned.

    Returns:
        The cleaned definition (same name) and the removals per rule id.
    """
    description = sanitize_text(definition.description)
    schema = sanitize_json(dict(definition.input_schema))
    removed = dict(description.removed)
    for rule_id, count in schema.removed.items():
        removed[rule_id] = removed.get(rule_id, 0) + count
    return ToolDefinition(definition.name, description.text, schema.value), removed


@dataclass(frozen=True)
class ExposedTool:
    """What a client is sent for one pinned definition, and what cleaning removed."""

    tool: types.Tool
    removed: dict[str, int]


def exposed_tool(server: str, pinned: ToolDefinition) -> ExposedTool:
    """Build the client's ``Tool`` from a pinned definition: namespaced, cleaned, grant advertised."""
    cleaned, removed = exposed_definition(pinned)
    schema = dict(cleaned.input_schema)
    declared = schema.get("properties")
    properties = dict(declared) if isinstance(declared, dict) else {}
    properties[GRANT_ARGUMENT] = _GRANT_PROPERTY
    schema["properties"] = properties
    tool = types.Tool(name=exposed_name(server, pinned.name), description=cleaned.description, input_schema=schema)
    return ExposedTool(tool, removed)
