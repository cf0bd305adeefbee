"""Case vocabulary: verdict values, categories named by the case ids, and the result record."""

from __future__ import annotations

import json

from contain.probe.case import CaseResult, Category, Verdict
from contain.probe.registry import load_cases


def test_verdict_values_are_their_names():
    assert [v.value for v in Verdict] == [v.name for v in Verdict]


def test_every_loaded_case_is_filed_under_the_category_its_id_names():
    for case in load_cases():
        prefix, number = case.id.split("-")
        assert case.category is Category(prefix), case.id
        assert number.isdigit() and len(number) == 2, case.id
        assert case.title and case.expected, case.id


def test_a_result_serialises_to_json_with_its_verdict_value_and_a_rounded_duration():
    result = CaseResult("FS-01", Verdict.CONTAINED, "ok", {"n": 1}, "control saw it", duration_s=1.23456)
    assert json.loads(json.dumps(result.to_dict())) == {
        "case_id": "FS-01",
        "verdict": "CONTAINED",
        "summary": "ok",
        "evidence": {"n": 1},
        "control": "control saw it",
        "duration_s": 1.235,
    }


def test_results_do_not_share_evidence():
    first = CaseResult("FS-01", Verdict.CONTAINED, "ok")
    first.evidence["x"] = 1
    assert CaseResult("FS-02", Verdict.CONTAINED, "ok").evidence == {}
