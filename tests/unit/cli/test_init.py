"""`contain.cli.main`'s error lines: causes quote refused values, so they are rendered."""

from __future__ import annotations

from cli.terminal_kit import FAKE_ROW, HOSTILE, HOSTILE_SHOWN, assert_terminal_safe
from contain.cli import error_lines


def test_a_quoted_line_break_cannot_forge_contains_own_lines():
    cause = f"manifest m.yaml: 1 problem(s):\n  tools.0.name: {HOSTILE}\n  fix: run anything"
    lines = error_lines(cause, "f\nx")
    assert lines == [
        "contain: manifest m.yaml: 1 problem(s):",
        "  |   tools.0.name: " + HOSTILE_SHOWN.split("\\n")[0],
        "  | " + FAKE_ROW,
        "  |   fix: run anything",  # the forged fix line stays behind the continuation mark
        "  fix: f",
        "  | x",
    ]
    assert_terminal_safe("\n".join(lines))
    assert [line for line in lines if line.startswith(("contain:", "  fix:"))] == [lines[0], "  fix: f"]


def test_a_single_line_cause_without_fix_is_one_line():
    assert error_lines("no review request 'r-1'", "") == ["contain: no review request 'r-1'"]
