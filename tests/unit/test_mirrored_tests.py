"""Every module in src/contain has a mirrored unit test file, or a row in tests/README.md saying why
not; and every README row still names a module that exists and still lacks a mirrored test.

The check is name-agnostic: it knows no module by name, so a rename (or a split) shows up here
as a module without a test and a README row whose module is gone, until both are brought up to
date.
"""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import contain

TESTS = Path(__file__).resolve().parents[1]
UNIT = TESTS / "unit"
SRC = Path(contain.__file__).resolve().parents[1]
README = TESTS / "README.md"

# A README row: "| `contain/<path>.py` | reason |"
_ROW = re.compile(r"^\|\s*`(contain/[^`]+\.py)`\s*\|\s*(.*?)\s*\|\s*$")
# What a package __init__ may define and still count as "only re-exports" (checked by
# test_exported_members.py instead of a test file of its own).
_REEXPORT_DEFINITIONS = frozenset({"__getattr__", "__dir__"})


def _source_path(name: str, *, is_package: bool) -> str:
    """``contain.runtime.sandbox`` -> ``contain/runtime/sandbox.py`` (packages: their __init__)."""
    parts = name.split(".")
    return "/".join(parts) + ("/__init__.py" if is_package else ".py")


def mirrored_test_files(source: str) -> list[Path]:
    """The test files that mirror ``source`` (a path like ``contain/pkg/_mod.py``)."""
    *packages, filename = source.split("/")[1:]
    stem = filename.removesuffix(".py")
    if stem == "__init__":
        return [UNIT.joinpath(*packages, "test_init.py")]
    names = {f"test_{stem}.py", f"test_{stem.lstrip('_')}.py"}
    return [UNIT.joinpath(*packages, name) for name in sorted(names)]


def only_reexports(source: str) -> bool:
    """True for an __init__ with no function or class of its own (besides a lazy __getattr__)."""
    if not source.endswith("/__init__.py"):
        return False
    tree = ast.parse((SRC / source).read_text(encoding="utf-8"))
    defined = {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    return defined <= _REEXPORT_DEFINITIONS


def modules() -> list[str]:
    found = [_source_path("contain", is_package=True)]
    for info in pkgutil.walk_packages(contain.__path__, "contain."):
        found.append(_source_path(info.name, is_package=info.ispkg))
    return sorted(found)


def readme_rows(text: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            assert match.group(1) not in rows, f"tests/README.md lists {match.group(1)} twice"
            rows[match.group(1)] = match.group(2)
    return rows


def has_mirror(source: str) -> bool:
    return any(path.is_file() for path in mirrored_test_files(source))


def test_every_module_has_a_mirrored_test_or_a_readme_row():
    listed = readme_rows(README.read_text(encoding="utf-8"))
    missing = [
        f"{source}: add {mirrored_test_files(source)[-1].relative_to(TESTS.parent)} or a row in tests/README.md"
        for source in modules()
        if not has_mirror(source) and not only_reexports(source) and source not in listed
    ]
    assert missing == []


def test_every_readme_row_names_an_existing_module_that_still_lacks_a_mirror():
    listed = readme_rows(README.read_text(encoding="utf-8"))
    assert listed, "tests/README.md has no module rows: the table format changed?"
    existing = set(modules())
    stale = [source for source in listed if source not in existing]
    assert stale == [], "tests/README.md lists modules that no longer exist"
    covered = [source for source in listed if has_mirror(source)]
    assert covered == [], "tests/README.md lists modules that now have a mirrored test: remove the rows"
    assert all(reason for reason in listed.values()), "every README row gives a reason"


def test_the_mirror_rule_maps_modules_packages_and_private_modules():
    assert mirrored_test_files("contain/runtime/sandbox.py") == [UNIT / "runtime" / "test_sandbox.py"]
    assert mirrored_test_files("contain/cli/__init__.py") == [UNIT / "cli" / "test_init.py"]
    assert mirrored_test_files("contain/_log.py") == [UNIT / "test__log.py", UNIT / "test_log.py"]
    assert only_reexports("contain/runtime/__init__.py")
    assert not only_reexports("contain/cli/__init__.py")  # main() lives there: tests/unit/cli/test_init.py
    assert not only_reexports("contain/errors.py")


def test_readme_rows_are_read_from_the_table_and_nothing_else():
    text = "\n".join(
        [
            "| module | why |",
            "|---|---|",
            "| `contain/a.py` | integration-only: needs bwrap |",
            "prose mentioning `contain/b.py` is not a row",
            "| `contain/c.py` |  |",
        ]
    )
    assert readme_rows(text) == {"contain/a.py": "integration-only: needs bwrap", "contain/c.py": ""}
