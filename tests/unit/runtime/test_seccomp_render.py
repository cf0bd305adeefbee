"""Unit tests for contain.runtime.seccomp_render: docs/seccomp.md's table is the rendered table."""

from __future__ import annotations

from pathlib import Path

from contain.runtime import seccomp_render
from contain.runtime.seccomp_render import render_rules_markdown
from contain.runtime.seccomp_rules import SECCOMP_RULES

DOC = Path(__file__).resolve().parents[3] / "docs" / "seccomp.md"


def test_docs_table_is_generated_from_the_rules() -> None:
    text = DOC.read_text(encoding="utf-8")
    begin, end = "<!-- BEGIN SECCOMP_RULES -->\n", "<!-- END SECCOMP_RULES -->"
    assert begin in text and end in text
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert table == render_rules_markdown(), (
        "docs/seccomp.md is out of date; regenerate the table with "
        "python -c 'from contain.runtime.seccomp_render import render_rules_markdown as r; print(r(), end=\"\")'"
    )


def test_docs_table_names_every_syscall_of_the_table() -> None:
    table = render_rules_markdown()
    for rule in SECCOMP_RULES:
        assert f"| `{rule.syscall}` |" in table


def test_module_exports_what_it_says() -> None:
    for name in seccomp_render.__all__:
        assert hasattr(seccomp_render, name), name
