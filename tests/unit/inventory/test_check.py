from __future__ import annotations

import json
from pathlib import Path

import pytest

from contain.errors import BoundaryInvalid
from contain.inventory import check_manifest, render_check_text, report_to_json, report_to_sarif
from contain.inventory.check_rules import CHECK_RULES

MANIFEST = """\
version: 1
task: lint-me
threats: [untrusted_documents]
credentials:
  - {name: API_TOKEN, via: env, source: CI_API_TOKEN}
network:
  allow:
    - {host: "*.github.io"}
tools:
  - {name: fs__write_file, verdict: allow}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "contain.yaml"
    path.write_text(text)
    return path


def test_findings_carry_the_manifest_line_of_their_key(tmp_path: Path) -> None:
    report = check_manifest(_write(tmp_path, MANIFEST), home=tmp_path / "home")
    lines = {f.rule_id: f.line for f in report.findings}
    assert lines["CHK-001"] == 5
    assert lines["CHK-007"] == 8
    assert lines["CHK-010"] == 10
    assert report.has_errors


def test_text_report_names_rule_severity_key_path_and_fix(tmp_path: Path) -> None:
    path = _write(tmp_path, MANIFEST)
    text = render_check_text(check_manifest(path, home=tmp_path))
    assert (f"{path}:5: error CHK-001 credential visible inside the sandbox [credentials.0.via]") in text
    assert "fix: use via: broker" in text
    assert text.rstrip().endswith("info")


def test_json_report_is_serialisable_and_lists_every_finding(tmp_path: Path) -> None:
    report = check_manifest(_write(tmp_path, MANIFEST), home=tmp_path)
    data = json.loads(json.dumps(report_to_json(report)))
    assert data["has_errors"] is True
    assert {f["rule_id"] for f in data["findings"]} >= {"CHK-001", "CHK-007", "CHK-010"}


def test_sarif_has_the_2_1_0_structure_with_rules_results_and_locations(tmp_path: Path) -> None:
    path = _write(tmp_path, MANIFEST)
    report = check_manifest(path, home=tmp_path)
    sarif = json.loads(json.dumps(report_to_sarif(report, version="1.2")))
    assert sarif["version"] == "2.1.0" and "$schema" in sarif
    driver = sarif["runs"][0]["tool"]["driver"]
    assert driver["name"] == "contain" and driver["version"] == "1.2"
    assert [r["id"] for r in driver["rules"]] == [r.id for r in CHECK_RULES]
    results = sarif["runs"][0]["results"]
    assert len(results) == len(report.findings)
    for result, finding in zip(results, report.findings, strict=True):
        assert result["ruleId"] == finding.rule_id
        assert driver["rules"][result["ruleIndex"]]["id"] == finding.rule_id
        assert result["level"] in ("error", "warning", "note")
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == path.as_uri()
        assert location["region"]["startLine"] == finding.line
        assert result["message"]["text"]


def test_invalid_manifest_raises_boundary_invalid(tmp_path: Path) -> None:
    with pytest.raises(BoundaryInvalid):
        check_manifest(_write(tmp_path, "version: 1\nfiles: [{path: /x, acces: read}]\n"), home=tmp_path)
    with pytest.raises(BoundaryInvalid):
        check_manifest(tmp_path / "missing.yaml", home=tmp_path)


def test_a_finding_states_the_fact_once_and_the_reason_once(tmp_path: Path) -> None:
    report = check_manifest(_write(tmp_path, MANIFEST), home=tmp_path)
    message = next(f.message for f in report.findings if f.rule_id == "CHK-007")
    assert message == (
        "*.github.io is a wildcard over the public suffix github.io: "
        "anyone can register a name under it, so data can be sent to an attacker's host"
    )
    for finding in report.findings:  # no finding repeats a clause of its own message
        clauses = [c.strip() for c in finding.message.split(":")]
        assert len(clauses) == len(set(clauses)), finding.message
