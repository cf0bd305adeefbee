"""Schema validation: malformed arguments and broken schemas are refused with a sentence."""

from contain.gate.schema import validate_arguments

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
    "required": ["path"],
}


def test_valid_arguments_pass():
    assert validate_arguments({"path": "/x", "n": 2}, SCHEMA).ok
    assert validate_arguments({"anything": [1]}, None).ok


def test_invalid_arguments_name_the_place():
    check = validate_arguments({"path": "/x", "n": -1}, SCHEMA)
    assert not check.ok
    assert check.reason.startswith("arguments do not match the tool's input schema at $.n:")
    assert "fix the arguments" in check.reason


def test_missing_required_argument():
    check = validate_arguments({}, SCHEMA)
    assert not check.ok and "'path' is a required property" in check.reason


def test_invalid_schema_refuses_every_call():
    check = validate_arguments({"path": "/x"}, {"type": "not-a-type"})
    assert not check.ok and "schema is itself invalid" in check.reason


def test_remote_refs_are_not_fetched_and_deny():
    check = validate_arguments({"path": "/x"}, {"$ref": "https://example.invalid/schema.json"})
    assert not check.ok and "could not be applied" in check.reason


def test_non_objects_are_refused():
    assert not validate_arguments([1], SCHEMA).ok
    assert not validate_arguments({"x": float("inf")}, None).ok


def test_reasons_do_not_carry_huge_values():
    check = validate_arguments({"path": "x" * 1_000_000}, {"type": "object", "properties": {"path": {"maxLength": 3}}})
    assert not check.ok and len(check.reason) < 500
