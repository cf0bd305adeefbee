"""Validate a call's arguments against the tool's input schema, before any rule is consulted.

What is enforced: the arguments are a JSON object (canonicalisable, see ``digests``) and satisfy the
tool's JSON Schema under Draft 2020-12 (``jsonschema.Draft202012Validator``). A schema that is
itself invalid, or that refers to anything outside itself (``$ref`` to a remote document is never
fetched; it fails to resolve and the call is denied), makes the call malformed: fail closed.

What is not: ``format`` keywords are annotations only (Draft 2020-12's default), so ``"format":
"uri"`` does not check URLs; use the gate's ``hosts`` or ``pattern`` constraints for that.
Validators are cached per canonical schema (bounded), so a pinned schema is compiled once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from threading import Lock
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator

from contain.gate.digests import canonical_json

__all__ = ["SchemaCheck", "validate_arguments"]

_CACHE_SIZE = 256
_MESSAGE_CHARS = 300  # jsonschema quotes the offending value; a reason should not carry megabytes
_cache: OrderedDict[bytes, Draft202012Validator] = OrderedDict()
_cache_lock = Lock()


@dataclass(frozen=True)
class SchemaCheck:
    """Whether the arguments are well formed, and a sentence saying what is wrong when not."""

    ok: bool
    reason: str = ""


def _validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    key = canonical_json(dict(schema))
    with _cache_lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    Draft202012Validator.check_schema(dict(schema))
    validator = Draft202012Validator(dict(schema))
    with _cache_lock:
        _cache[key] = validator
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return validator


def _where(path: Any) -> str:
    parts = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return "$" + parts


def validate_arguments(arguments: Any, schema: Mapping[str, Any] | None) -> SchemaCheck:
    """Check ``arguments`` is a JSON object and, when a schema is given, that it satisfies it.

    Args:
        arguments: the call's arguments as received.
        schema: the tool's (pinned) input schema, or None when the caller has none.

    Returns:
        SchemaCheck(ok=True) or SchemaCheck(ok=False, reason=<sentence for the agent>).
    """
    if not isinstance(arguments, Mapping):
        return SchemaCheck(False, f"arguments must be a JSON object, not a {type(arguments).__name__}")
    plain = dict(arguments)
    try:
        canonical_json(plain)
    except ValueError as exc:
        return SchemaCheck(False, f"arguments are not plain JSON: {exc}")
    if schema is None:
        return SchemaCheck(True)
    try:
        validator = _validator(schema)
    except (ValueError, jsonschema.SchemaError) as exc:
        message = exc.message if isinstance(exc, jsonschema.SchemaError) else str(exc)
        return SchemaCheck(False, f"the tool's input schema is itself invalid ({message}); no call can be checked")
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(plain))
    except Exception as exc:  # a $ref that cannot be resolved, a pathological schema: fail closed
        return SchemaCheck(False, f"the tool's input schema could not be applied: {type(exc).__name__}: {exc}")
    if error is None:
        return SchemaCheck(True)
    message = error.message if len(error.message) <= _MESSAGE_CHARS else error.message[: _MESSAGE_CHARS - 3] + "..."
    return SchemaCheck(
        False,
        f"arguments do not match the tool's input schema at {_where(error.absolute_path)}: "
        f"{message}; fix the arguments and call again",
    )
