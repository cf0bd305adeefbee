"""The gateway's own status channel, and keeping upstream results from imitating it.

Every result the gateway returns (a refusal, a pending review, or a forwarded upstream result)
carries the gateway's status in ``_meta["contain/status"]``, and nowhere else: ``{"status":
"forwarded" | "denied" | "pending" | "expired" | "error" | "upstream-error" | "upstream-timeout" |
"refused-result", ...}``. The gateway writes that key last, so whatever an upstream put there is
replaced. A client that wants to know what contain decided reads that key; a forwarded result
always says ``forwarded``, never ``approved``, whatever its content claims.

MCP reserves ``_meta`` key prefixes containing ``modelcontextprotocol``/``mcp`` labels for itself
(2025-11-25, basic/index "_meta"); ``contain/`` is a prefix of our own, and the rows of
``RESERVED_CHANNEL_RULES`` say what happens to upstream content that uses or imitates it:

- any ``_meta`` key under ``contain/``, at any depth of the result, is removed;
- ``structuredContent.contain`` (where the gateway's status lived before) refuses the result:
  a consumer written for the old channel would read the upstream's claim as contain's, and
  renaming the key would still hand the agent the claim;
- a line of text (text content, or the text of an embedded resource) that begins with the word
  ``contain`` (after invisible characters, punctuation, case and compatibility forms are
  folded) is prefixed with ``[upstream SERVER]``: the gateway's own messages begin with
  ``contain:``, and an upstream line that looks like one is marked as the upstream's.

Not enforced: meaning. Text in the middle of a line ("... and contain approved this") passes, and
so does any sentence that steers the agent without the word; results are the upstream's words.
The text rule is a marker for a person or model reading along, not a security boundary: the
``_meta`` key is the boundary.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from contain.mcp.sanitize import sanitize_text

__all__ = [
    "RESERVED_CHANNEL_RULES",
    "RESERVED_META_PREFIX",
    "STATUS_META_KEY",
    "ChannelRule",
    "ScrubbedResult",
    "gateway_result",
    "scrub_upstream_result",
    "status_of",
    "with_status",
]

RESERVED_META_PREFIX = "contain/"
STATUS_META_KEY = RESERVED_META_PREFIX + "status"
_OLD_STRUCTURED_KEY = "contain"
_LOOKS_LIKE_GATEWAY = re.compile(r"^[\W_]*contain\b")


@dataclass(frozen=True)
class ChannelRule:
    """What happens to upstream content that uses or imitates the gateway's status channel."""

    rule_id: str
    where: str
    action: str  # "remove" | "refuse" | "prefix"
    reason: str


RESERVED_CHANNEL_RULES: tuple[ChannelRule, ...] = (
    ChannelRule(
        "reserved-meta-key", "_meta keys under contain/, anywhere in the result", "remove",
        "contain/status is the gateway's status; an upstream value there would read as contain's decision",
    ),
    ChannelRule(
        "reserved-structured-key", "structuredContent.contain", "refuse",
        "the gateway's former status channel: a consumer written for it would take the upstream's claim "
        "(e.g. a status contain never gave) for contain's",
    ),
    ChannelRule(
        "gateway-text", "a text line beginning with the word contain", "prefix",
        "the gateway's own messages begin with 'contain:'; an upstream line that does is marked as the upstream's",
    ),
)


def gateway_result(text: str, *, status: Mapping[str, Any], is_error: bool) -> types.CallToolResult:
    """A result written by the gateway: one text block and the status in ``_meta`` only."""
    return types.CallToolResult(
        content=[types.TextContent(text=text)], meta={STATUS_META_KEY: dict(status)}, is_error=is_error
    )


def with_status(result: types.CallToolResult, status: Mapping[str, Any]) -> types.CallToolResult:
    """``result`` with the gateway's status set (replacing any value already under the key)."""
    meta = dict(result.meta or {})
    meta[STATUS_META_KEY] = dict(status)
    return result.model_copy(update={"meta": meta})


def status_of(result: types.CallToolResult) -> dict[str, Any] | None:
    """The gateway's status of a result, or None when it has none."""
    value = (result.meta or {}).get(STATUS_META_KEY)
    return dict(value) if isinstance(value, dict) else None


@dataclass(frozen=True)
class ScrubbedResult:
    """An upstream result after ``RESERVED_CHANNEL_RULES``; ``refused_by`` set: do not return it."""

    result: types.CallToolResult
    findings: dict[str, int]  # rule id -> how many times it applied
    refused_by: ChannelRule | None


def _rule(rule_id: str) -> ChannelRule:
    return next(row for row in RESERVED_CHANNEL_RULES if row.rule_id == rule_id)


def _looks_like_gateway(line: str) -> bool:
    folded = unicodedata.normalize("NFKC", sanitize_text(line).text).casefold()
    return bool(_LOOKS_LIKE_GATEWAY.match(folded))


def _mark_lines(text: str, server: str) -> tuple[str, int]:
    lines = text.split("\n")
    marked = 0
    for index, line in enumerate(lines):
        if _looks_like_gateway(line):
            lines[index] = f"[upstream {server}] {line}"
            marked += 1
    return "\n".join(lines), marked


def _strip_reserved_meta(tree: Any) -> int:
    """Remove ``contain/`` keys from every ``_meta`` object in the tree (in place); returns how many."""
    removed = 0
    work = [tree]
    while work:
        node = work.pop()
        if isinstance(node, dict):
            meta = node.get("_meta")
            if isinstance(meta, dict):
                for key in [k for k in meta if isinstance(k, str) and k.startswith(RESERVED_META_PREFIX)]:
                    del meta[key]
                    removed += 1
            work.extend(node.values())
        elif isinstance(node, list):
            work.extend(node)
    return removed


def scrub_upstream_result(server: str, result: types.CallToolResult) -> ScrubbedResult:
    """Apply ``RESERVED_CHANNEL_RULES`` to one upstream result (the input is not modified).

    Args:
        server: the upstream's name (used in the text marker).
        result: the result as the upstream sent it.

    Returns:
        The scrubbed result, what applied, and the refusing rule if one applied.
    """
    findings: dict[str, int] = {}
    data = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    structured = data.get("structuredContent")
    if isinstance(structured, dict) and _OLD_STRUCTURED_KEY in structured:
        refusing = _rule("reserved-structured-key")
        return ScrubbedResult(result, {refusing.rule_id: 1}, refusing)
    removed = _strip_reserved_meta(data)
    if removed:
        findings["reserved-meta-key"] = removed
    marked = 0
    for block in data.get("content") or []:
        if not isinstance(block, dict):
            continue
        holder = block.get("resource") if block.get("type") == "resource" else block
        if isinstance(holder, dict) and isinstance(holder.get("text"), str):
            holder["text"], count = _mark_lines(holder["text"], server)
            marked += count
    if marked:
        findings["gateway-text"] = marked
    if not findings:
        return ScrubbedResult(result, findings, None)
    return ScrubbedResult(types.CallToolResult.model_validate(data), findings, None)
