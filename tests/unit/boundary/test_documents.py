import time
from pathlib import Path

import pytest

from contain.boundary.documents import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    UnreadableDocument,
    parse_json_document,
    parse_yaml_document,
    read_config_document,
)
from contain.errors import BoundaryInvalid

# Nine levels of nine aliases: 387 bytes of text, 9**9 list items once expanded.
ALIAS_BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_plain_yaml_becomes_plain_data_with_its_node_tree():
    data, node = parse_yaml_document("a: 1\nb: [2.5, x, null, true]\nc: {d: '2001-02-03'}\n")
    assert data == {"a": 1, "b": [2.5, "x", None, True], "c": {"d": "2001-02-03"}}
    assert node is not None and node.start_mark.line == 0


def test_an_empty_yaml_document_is_none():
    assert parse_yaml_document("") == (None, None)


def test_an_alias_bomb_is_refused_at_once_without_expanding_it():
    assert len(ALIAS_BOMB) < 1024
    started = time.monotonic()
    with pytest.raises(UnreadableDocument, match="line 1: anchors and aliases"):
        parse_yaml_document(ALIAS_BOMB)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: &x 1\n", "anchors and aliases"),
        ("<<: {task: a}\n", "merge keys"),
        ("task: a\ntask: b\n", "line 2: duplicate key 'task'"),
        ("on: 1\n", "is not a string"),
        ("? [a, b]\n: 1\n", "is not a string"),
        ("1: a\n", "is not a string"),
        ("x: !!binary aGk=\n", "tag"),
        ("x: !!timestamp 2001-02-30\n", "tag"),
        ("x: !local 1\n", "tag"),
        ("x: !!bool maybe\n", "cannot be read"),
        ("x: !!int twelve\n", "cannot be read"),
        ('x: "a\x85b"\n', "U\\+0085 is a line break"),  # found by tests/fuzz: read back as "a b"
        ("a: 1\nx: a\u2028b\n", "line 2: raw U\\+2028"),
        ("!!int \n", "needs digits"),  # found by tests/fuzz: PyYAML raised IndexError
        ("x: !!int _\n", "needs digits"),
        ("x: !!float .\n", "needs digits"),
        ("x: .inf\n", "not a finite number"),
        ("x: .nan\n", "not a finite number"),
        ("x: 1.0e+999\n", "not a finite number"),
        ("x: " + "9" * 5000 + "\n", "longer than 64"),
        ("x: " + ":".join(["59"] * 20) + "\n", "does not fit in 64 bits"),
        ("x: 0x1" + "0" * 16 + "\n", "does not fit in 64 bits"),
        ("x: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n", f"deeper than {MAX_DEPTH}"),
        ("x: " + "[" * 5000 + "]" * 5000 + "\n", "deeper than|maximum nesting depth"),
        ("a: 1\n---\nb: 2\n", "not valid YAML"),
        ("a: [1\n", "not valid YAML"),
    ],
)
def test_yaml_that_could_be_read_two_ways_or_costs_too_much_is_refused_with_the_reason(text, fragment):
    with pytest.raises(UnreadableDocument, match=fragment):
        parse_yaml_document(text)


def test_an_escaped_line_separator_is_read_as_the_character():
    assert parse_yaml_document('x: "a\\x85b\\u2028"\n')[0] == {"x": "a\x85b\u2028"}


def test_dates_stay_the_text_that_was_written():
    assert parse_yaml_document("task: 2001-02-30\nwhen: 2001-02-03 10:00:00\n")[0] == {
        "task": "2001-02-30",
        "when": "2001-02-03 10:00:00",
    }


def test_nesting_up_to_the_bound_is_accepted():
    depth = MAX_DEPTH - 1  # the top-level mapping is one level
    assert parse_yaml_document("x: " + "[" * depth + "]" * depth + "\n")[0] is not None
    assert parse_json_document("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": {"b": 1, "b": 1}}', "duplicate key 'b'"),
        ("[" * 5000 + "]" * 5000, "deeper than"),
        ('{"a": ' * 100 + "1" + "}" * 100, "deeper than"),
        ("1" * 5000, "longer than 64"),
        (str(2**64), "does not fit in 64 bits"),
        ("NaN", "not a JSON number"),
        ("-Infinity", "not a JSON number"),
        ("1e999", "not a finite double"),
        ('{"a": 1', "not valid JSON"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_json_with_duplicates_huge_numbers_or_deep_nesting_is_refused(text, fragment):
    with pytest.raises(UnreadableDocument, match=fragment):
        parse_json_document(text)


def test_brackets_inside_json_strings_do_not_count_as_nesting():
    text = '{"a": "' + "[" * 5000 + '\\"{"}'
    assert parse_json_document(text) == {"a": "[" * 5000 + '"{'}


def test_config_files_are_read_through_the_strict_parser_and_refusals_are_boundary_invalid(tmp_path: Path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("a: 1\na: 2\n")
    with pytest.raises(BoundaryInvalid, match="duplicate key") as info:
        read_config_document(yaml_file, what="gateway config")
    assert str(yaml_file) in info.value.cause and info.value.fix
    json_file = tmp_path / "c.json"
    json_file.write_text('{"a": 1, "a": 2}')
    with pytest.raises(BoundaryInvalid, match="duplicate key"):
        read_config_document(json_file, what="manifest")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_DOCUMENT_BYTES + 1))
    with pytest.raises(BoundaryInvalid, match="larger than 1 MiB"):
        read_config_document(big, what="manifest")
    with pytest.raises(BoundaryInvalid, match="cannot read"):
        read_config_document(tmp_path / "missing.yaml", what="manifest")
    (tmp_path / "latin1.yaml").write_bytes(b"a: \xe9\n")
    with pytest.raises(BoundaryInvalid, match="not UTF-8"):
        read_config_document(tmp_path / "latin1.yaml", what="manifest")


@pytest.mark.parametrize("loader", ["contain.mcp.config:load_gateway_config", "contain.broker.config:load_config"])
@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "a: &x 1\nb: *x\n", "a: " + "[" * 5000 + "]" * 5000 + "\n"])
def test_every_config_loader_that_takes_a_user_file_uses_the_strict_reader(tmp_path: Path, loader, text):
    import importlib

    module, _, function = loader.partition(":")
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(BoundaryInvalid, match=r"duplicate key|anchors and aliases|deeper than|nesting depth"):
        getattr(importlib.import_module(module), function)(path)
