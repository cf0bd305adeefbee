"""The registry: ids are unique, every catalogue id is implemented, selection globs are strict."""

from __future__ import annotations

from pathlib import Path

import pytest

from contain.probe.case import CaseResult, Category, ProbeCase, Verdict
from contain.probe.registry import (
    CATALOGUE_IDS,
    PROJECT_IDS,
    case_modules,
    check_cases,
    load_cases,
    missing_ids,
    parse_catalogue_ids,
    select_ids,
)

REPO = Path(__file__).resolve().parents[3]
SHARED_CATALOGUE = REPO.parent / "shared" / "ESCAPE_CATALOG.md"
FIXTURE = REPO / "tests" / "fixtures" / "escape_catalog_ids.txt"


def _catalogue_ids() -> tuple[str, ...]:
    """The ids of ../shared/ESCAPE_CATALOG.md when present (CI has it beside the clone), else the
    copy kept in tests/fixtures."""
    if SHARED_CATALOGUE.exists():
        return parse_catalogue_ids(SHARED_CATALOGUE.read_text())
    lines = FIXTURE.read_text().splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def _dummy(case_id: str, category: Category) -> ProbeCase:
    return ProbeCase(case_id, category, "t", "e", lambda ctx: CaseResult(case_id, Verdict.CONTAINED, "ok"))


def test_catalogue_ids_constant_matches_the_catalogue_file():
    assert _catalogue_ids() == CATALOGUE_IDS


def test_fixture_copy_matches_the_shared_catalogue_when_present():
    if not SHARED_CATALOGUE.exists():
        pytest.skip("../shared/ESCAPE_CATALOG.md is not beside this clone")
    lines = FIXTURE.read_text().splitlines()
    assert tuple(x for x in lines if x and not x.startswith("#")) == parse_catalogue_ids(SHARED_CATALOGUE.read_text())


def test_every_catalogue_id_is_implemented_by_some_module():
    cases = load_cases()
    assert missing_ids(cases) == ()
    assert {c.id for c in cases} == set(_catalogue_ids()) | set(PROJECT_IDS)


def test_case_ids_are_unique_across_modules():
    ids = [c.id for module in case_modules() for c in load_cases([module])]
    assert len(ids) == len(set(ids))


def test_loaded_cases_come_in_catalogue_category_order():
    cases = load_cases()
    order = [c.category for c in cases]
    assert order == sorted(order, key=list(Category).index)


def test_parse_catalogue_ids_reads_table_rows_only():
    text = "intro FS-99 in prose\n| ID | Attack |\n|---|---|\n| FS-01 | read |\n| PR-02 | x |\n"
    assert parse_catalogue_ids(text) == ("FS-01", "PR-02")


def test_duplicate_ids_are_refused():
    with pytest.raises(ValueError, match="defined twice"):
        check_cases([_dummy("FS-01", Category.FS), _dummy("FS-01", Category.FS)])


def test_ids_outside_the_catalogue_are_refused():
    with pytest.raises(ValueError, match="neither in the escape catalogue nor in PROJECT_IDS"):
        check_cases([_dummy("FS-99", Category.FS)])


def test_id_prefix_must_match_the_category():
    with pytest.raises(ValueError, match="prefix must match"):
        check_cases([_dummy("FS-01", Category.PR)])


def test_malformed_ids_are_refused():
    with pytest.raises(ValueError, match="malformed"):
        check_cases([_dummy("fs1", Category.FS)])


def test_select_ids_takes_comma_separated_globs_case_insensitively():
    ids = ("FS-01", "FS-02", "NE-01", "NE-02")
    assert select_ids(ids, "fs-*, NE-01") == ("FS-01", "FS-02", "NE-01")
    assert select_ids(ids, None) == ids


def test_select_ids_refuses_a_pattern_that_matches_nothing():
    with pytest.raises(ValueError, match="matches no case"):
        select_ids(("FS-01",), "FS-01,XX-*")


def test_every_not_applicable_reason_is_a_sentence():
    for case in load_cases():
        for kind, reason in case.not_applicable.items():
            assert kind in {"process", "wrap", "host", "container", "microvm"}, case.id
            assert len(reason) > 20, (case.id, kind)
