"""Reports: the whole JSON document, the summary table and HTML escaping."""

from __future__ import annotations

import json

from contain.probe.case import CaseResult, Verdict
from contain.probe.report import CaseInfo, Report, render_html, render_json, render_summary, render_table_line


def _report(results: tuple[CaseResult, ...]) -> Report:
    return Report(
        target="contain:process",
        target_kind="process",
        run_id="abc123",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.23456,
        results=results,
        cases={
            "FS-01": CaseInfo("FS-01", "FS", "read a canary", "ENOENT"),
            "NE-01": CaseInfo("NE-01", "NE", "connect out", "no connection"),
        },
        host={"kernel": "6.18"},
        backend="process",
    )


RESULTS = (
    CaseResult("FS-01", Verdict.CONTAINED, "denied", {"errno": "ENOENT"}, "control saw it", 0.5),
    CaseResult("NE-01", Verdict.ESCAPED, "canary reached the listener", {"hits": 1}, None, 0.25),
)


def test_json_document_has_the_whole_structure():
    document = json.loads(render_json(_report(RESULTS)))
    empty = {v.value: 0 for v in Verdict}
    assert document == {
        "schema": "contain.probe.report/1",
        "target": "contain:process",
        "target_kind": "process",
        "backend": "process",
        "run_id": "abc123",
        "started_at": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.235,
        "passed": False,
        "totals": {**empty, "CONTAINED": 1, "ESCAPED": 1},
        "categories": {
            "FS": {**empty, "CONTAINED": 1, "passed": 1, "total": 1, "score": "1/1"},
            "NE": {**empty, "ESCAPED": 1, "passed": 0, "total": 1, "score": "0/1"},
        },
        "host": {"kernel": "6.18"},
        "results": [
            {
                "case_id": "FS-01",
                "verdict": "CONTAINED",
                "summary": "denied",
                "evidence": {"errno": "ENOENT"},
                "control": "control saw it",
                "duration_s": 0.5,
                "category": "FS",
                "title": "read a canary",
                "expected": "ENOENT",
            },
            {
                "case_id": "NE-01",
                "verdict": "ESCAPED",
                "summary": "canary reached the listener",
                "evidence": {"hits": 1},
                "control": None,
                "duration_s": 0.25,
                "category": "NE",
                "title": "connect out",
                "expected": "no connection",
            },
        ],
    }


def test_not_applicable_counts_as_a_pass_and_inconclusive_does_not():
    passing = _report((CaseResult("FS-01", Verdict.NOT_APPLICABLE, "no microVM"),))
    assert passing.passed and passing.exit_code == 0
    failing = _report((CaseResult("FS-01", Verdict.INCONCLUSIVE, "control failed"),))
    assert not failing.passed and failing.exit_code == 1


def test_html_escapes_attacker_controlled_evidence():
    hostile = '<script>alert("x")</script><img src=x onerror=1>'
    page = render_html(_report((CaseResult("FS-01", Verdict.ESCAPED, hostile, {"stdout": hostile}, hostile),)))
    assert "<script>" not in page
    assert "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


def test_html_is_self_contained():
    page = render_html(_report(RESULTS))
    for external in ("<link", "<script", "src=", "http://", "https://", "@import", "url("):
        assert external not in page
    assert '<table id="scores">' in page
    assert '<tr id="case-FS-01">' in page
    assert "<details>" in page


def test_summary_and_table_lines_name_verdicts_and_scores():
    report = _report(RESULTS)
    summary = render_summary(report)
    assert "FS " in summary and "1/1" in summary and "0/1" in summary
    assert summary.rstrip().endswith("FAIL: not every case is CONTAINED or NOT_APPLICABLE")
    line = render_table_line(RESULTS[0], report.cases["FS-01"])
    assert line.startswith("FS-01  CONTAINED") and "[read a canary]" in line


def test_the_summary_and_html_headers_name_the_backend():
    report = _report(RESULTS)
    assert render_summary(report).splitlines()[0].startswith("target: contain:process   backend: process   run: abc123")
    assert "backend <code>process</code>" in render_html(report)


def test_a_wrap_report_says_it_ran_on_no_contain_backend():
    import dataclasses

    report = dataclasses.replace(_report(RESULTS), target="wrap:bwrap", target_kind="wrap", backend=None)
    assert "backend: none (not a contain backend)" in render_summary(report).splitlines()[0]
    assert json.loads(render_json(report))["backend"] is None
