"""Canonical JSON and digests: one byte string per value, refusals for non-JSON."""

import hashlib
from decimal import Decimal

import pytest

from contain.gate.digests import argument_digest, canonical_json, tool_digest


def test_canonical_json_sorts_keys_and_drops_whitespace():
    assert canonical_json({"b": [1, 2], "a": {"d": None, "c": True}}) == b'{"a":{"c":true,"d":null},"b":[1,2]}'


def test_integral_floats_become_integers_and_others_stay_shortest():
    assert canonical_json({"x": 1.0, "y": -0.0, "z": 0.1, "w": 1e300}) == (
        b'{"w":' + str(int(1e300)).encode() + b',"x":1,"y":0,"z":0.1}'
    )


def test_text_is_utf8_not_escaped():
    assert canonical_json({"name": "café ✓"}) == '{"name":"café ✓"}'.encode()


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -float("inf"), (1, 2), Decimal("1"), {1: "x"}, b"bytes", {"a": {1, 2}}, "\ud800"],
)
def test_non_json_values_are_refused(value):
    with pytest.raises(ValueError):
        canonical_json(value)


def test_deep_nesting_is_refused_not_crashed():
    value: list = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(ValueError, match="nested too deeply"):
        canonical_json(value)


def test_argument_digest_is_sha256_of_canonical_json_and_order_independent():
    a = argument_digest({"path": "/x", "n": 2})
    assert a == argument_digest({"n": 2.0, "path": "/x"})
    assert a == "sha256:" + hashlib.sha256(b'{"n":2,"path":"/x"}').hexdigest()
    assert a != argument_digest({"n": 3, "path": "/x"})


def test_argument_digest_refuses_non_objects():
    with pytest.raises(ValueError):
        argument_digest(["not", "an", "object"])  # type: ignore[arg-type]


def test_tool_digest_changes_with_description_and_schema():
    base = tool_digest(name="t", description="d", input_schema={"type": "object"})
    assert base == "sha256:" + hashlib.sha256(
        b'{"description":"d","input_schema":{"type":"object"},"name":"t"}'
    ).hexdigest()
    assert base != tool_digest(name="t", description="d ", input_schema={"type": "object"})
    assert base != tool_digest(name="t", description="d", input_schema={"type": "object", "required": []})
    assert base != tool_digest(name="u", description="d", input_schema={"type": "object"})
