"""Planning a listing: every EXPOSURE_RULES row refuses its case; the exposed form is a function of the pin."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from contain.mcp.exposure import (
    EXPOSURE_RULES,
    GRANT_ARGUMENT,
    MAX_SCHEMA_DEPTH,
    exposed_definition,
    exposed_tool,
    plan_listing,
)
from contain.mcp.pins import ToolDefinition

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


def _tool(name: str = "read", description: str = "Read.", schema: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or SCHEMA)


def _deep(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


# One attack per row of EXPOSURE_RULES: a listing that row must refuse (a new row without one fails below).
ATTACKS: dict[str, list[types.Tool]] = {
    "too-many-tools": [_tool(f"t{i}") for i in range(9)],
    "duplicate-name": [_tool("read"), _tool("read", "Read, differently.")],
    "tool-name": [_tool("read\x1b[2J")],
    "schema-too-deep": [_tool(schema=_deep(MAX_SCHEMA_DEPTH + 1))],
    "not-json": [_tool(schema={"type": "object", "default": float("inf")})],
    "definition-too-large": [_tool(description="x" * 5000)],
    "schema-key-hidden-text": [_tool(schema={"type": "object", "properties": {"pa\U000e0041th": {}}})],
    "reserved-argument": [_tool(schema={"type": "object", "properties": {GRANT_ARGUMENT: {"type": "string"}}})],
}


def test_every_rule_has_an_attack_and_a_reason():
    assert sorted(ATTACKS) == sorted(row.rule_id for row in EXPOSURE_RULES)
    assert all(row.reason and row.scope in ("upstream", "tool") for row in EXPOSURE_RULES)


@pytest.mark.parametrize("row", EXPOSURE_RULES, ids=lambda row: row.rule_id)
def test_each_rule_refuses_its_attack_and_lets_a_clean_tool_through(row):
    listing = [*ATTACKS[row.rule_id], _tool("fine")] if row.scope == "tool" else ATTACKS[row.rule_id]
    plan = plan_listing("fs", listing, max_tools=8, max_definition_bytes=4096)
    if row.scope == "upstream":
        assert plan.dropped is not None and plan.dropped.rule is row and plan.offered == ()
        return
    assert plan.dropped is None
    assert {refusal.rule.rule_id for refusal in plan.refused} == {row.rule_id}
    assert [definition.name for definition in plan.offered] == ["fine"]


@pytest.mark.parametrize("name", ["read_file", "get-env", "admin.tools.list", "A9", "x" * 123])
def test_names_in_the_mcp_charset_are_offered(name):
    plan = plan_listing("fs", [_tool(name)], max_tools=8, max_definition_bytes=65536)
    assert [d.name for d in plan.offered] == [name] and plan.refused == ()


def test_the_exposed_name_is_held_to_128_characters():
    plan = plan_listing("fs", [_tool("x" * 125)], max_tools=8, max_definition_bytes=65536)
    assert plan.offered == () and plan.refused[0].rule.rule_id == "tool-name"


def test_a_refused_name_is_cut_for_the_log():
    plan = plan_listing("fs", [_tool("\x1b" * 100_000)], max_tools=8, max_definition_bytes=65536)
    assert len(plan.refused[0].to_log()["upstream_tool"]) == 200


def test_the_exposed_form_is_cleaned_everywhere_and_only_name_description_schema_are_sent():
    pinned = ToolDefinition(
        "read", "Read.\u200b", {"type": "object", "properties": {"p": {"description": "P\x1b[2J", "enum": ["a\u2066"]}}}
    )
    cleaned, removed = exposed_definition(pinned)
    assert cleaned == ToolDefinition(
        "read", "Read.", {"type": "object", "properties": {"p": {"description": "P", "enum": ["a"]}}}
    )
    assert removed == {"zero-width": 1, "ansi-escape": 1, "bidi-isolates": 1}
    shown = exposed_tool("fs", pinned).tool
    assert shown.name == "fs__read" and shown.description == "Read."
    assert set(shown.input_schema["properties"]) == {"p", GRANT_ARGUMENT}
    assert shown.model_dump(exclude_none=True).keys() == {"name", "description", "input_schema"}
