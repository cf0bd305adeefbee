"""Canonical JSON and the two digests the gate binds decisions and grants to.

What is enforced: one byte string per JSON value. Keys are sorted (by code point, as Python sorts
``str``), there is no insignificant whitespace, text is UTF-8 (``ensure_ascii=False``), integral
floats become integers (``1.0`` and ``1`` have the same digest, as they are the same JSON number to
every JSON Schema validator), other floats use Python's shortest round-trip ``repr``. NaN and the
infinities are refused: they are not JSON, and a validator and a tool may read them differently.
Only ``dict`` (with ``str`` keys), ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None`` are
accepted, by exact type: a tuple, a ``Decimal`` or an ``IntEnum`` raises rather than being silently
coerced, because a digest over a coerced value would approve something other than what was shown.
Lone surrogates in strings are refused (they cannot be encoded as UTF-8).

What is not: this is not RFC 8785 (JCS). JCS sorts keys by UTF-16 code units and formats numbers
the ECMAScript way; the two agree for ASCII keys and for integers, not always otherwise. Digests are
only compared with digests made by this module, so the difference does not matter inside contain.

The tool digest covers name, description and input schema: a changed description (a common carrier
for injected instructions) changes the digest, so the MCP gateway's pin and every grant bound to
the old definition stop matching.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["argument_digest", "canonical_json", "tool_digest"]

DIGEST_PREFIX = "sha256:"


def _normalise(value: Any) -> Any:
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is int:
        return value
    if kind is float:
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{value!r} is not a JSON number; NaN and Infinity are refused")
        if value.is_integer():
            return int(value)
        return value
    if kind is list:
        return [_normalise(item) for item in value]
    if kind is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError(f"object key {key!r} is a {type(key).__name__}; JSON keys are strings")
            out[key] = _normalise(item)
        return out
    raise ValueError(
        f"a {kind.__name__} is not a JSON value; use dict, list, str, int, float, bool or None"
    )


def canonical_json(value: Any) -> bytes:
    """Return the canonical UTF-8 JSON encoding of ``value``.

    Args:
        value: a tree of dict (str keys), list, str, int, float, bool and None.

    Returns:
        The canonical bytes: sorted keys, no whitespace, integral floats as integers.

    Raises:
        ValueError: for NaN/Infinity, non-JSON types, non-string keys, lone surrogates or nesting
            too deep to walk.
    """
    try:
        normalised = _normalise(value)
        text = json.dumps(
            normalised, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return text.encode("utf-8")
    except RecursionError as exc:
        raise ValueError("the value is nested too deeply to canonicalise") from exc
    except UnicodeEncodeError as exc:
        raise ValueError(f"a string cannot be encoded as UTF-8: {exc.reason}") from exc


def _digest(data: bytes) -> str:
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def argument_digest(arguments: Mapping[str, Any]) -> str:
    """Return ``"sha256:" + hex`` of the canonical JSON of a call's arguments.

    Args:
        arguments: the arguments object of a tool call (any Mapping; copied to a dict at the top).

    Raises:
        ValueError: when the arguments are not a JSON object (see ``canonical_json``).
    """
    if not isinstance(arguments, Mapping):
        raise ValueError(f"arguments must be a JSON object, not a {type(arguments).__name__}")
    return _digest(canonical_json(dict(arguments)))


def tool_digest(*, name: str, description: str, input_schema: Mapping[str, Any]) -> str:
    """Return ``"sha256:" + hex`` of the canonical JSON of a tool definition.

    Args:
        name: the tool's name as the upstream defines it.
        description: the tool's description, byte for byte (clean it before, if you clean it).
        input_schema: the tool's JSON Schema for its arguments.

    Raises:
        ValueError: when a part is not JSON (see ``canonical_json``).
    """
    if not isinstance(input_schema, Mapping):
        raise ValueError(f"input_schema must be a JSON object, not a {type(input_schema).__name__}")
    definition = {"name": name, "description": description, "input_schema": dict(input_schema)}
    return _digest(canonical_json(definition))
