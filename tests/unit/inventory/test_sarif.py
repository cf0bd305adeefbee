"""report_to_sarif: one result per finding pointing at its rule's index, levels mapped from the
severity, the line only when known, and the manifest as a URI."""

from __future__ import annotations

from contain.inventory.check import CheckReport, Finding
from contain.inventory.check_rules import CHECK_RULES, Severity
from contain.inventory.sarif import SARIF_SCHEMA, report_to_sarif


def _finding(rule_index: int, *, line: int | None) -> Finding:
    rule = CHECK_RULES[rule_index]
    return Finding(rule.id, rule.severity, rule.title, "network.allow[0]", "too broad.", "narrow it", line)


def test_every_rule_is_a_descriptor_in_table_order():
    sarif = report_to_sarif(CheckReport("m.yaml", ()), version="9.9")
    driver = sarif["runs"][0]["tool"]["driver"]
    assert (sarif["$schema"], sarif["version"], driver["name"], driver["version"]) == (
        SARIF_SCHEMA,
        "2.1.0",
        "contain",
        "9.9",
    )
    assert [r["id"] for r in driver["rules"]] == [rule.id for rule in CHECK_RULES]
    first = CHECK_RULES[0]
    assert driver["rules"][0]["fullDescription"] == {"text": first.why}
    assert driver["rules"][0]["help"] == {"text": first.fix}
    assert sarif["runs"][0]["results"] == []


def test_a_finding_points_at_its_rule_index_with_message_fix_and_line():
    report = CheckReport("m.yaml", (_finding(len(CHECK_RULES) - 1, line=7),))
    (result,) = report_to_sarif(report)["runs"][0]["results"]
    assert result["ruleId"] == CHECK_RULES[-1].id
    assert result["ruleIndex"] == len(CHECK_RULES) - 1
    assert result["message"] == {"text": "too broad. Fix: narrow it"}
    location = result["locations"][0]
    assert location["physicalLocation"] == {"artifactLocation": {"uri": "m.yaml"}, "region": {"startLine": 7}}
    assert location["logicalLocations"] == [{"fullyQualifiedName": "network.allow[0]", "kind": "member"}]


def test_an_unknown_line_has_no_region():
    (result,) = report_to_sarif(CheckReport("m.yaml", (_finding(0, line=None),)))["runs"][0]["results"]
    assert "region" not in result["locations"][0]["physicalLocation"]


def test_severities_map_to_sarif_levels():
    by_severity = {rule.severity: index for index, rule in enumerate(CHECK_RULES)}
    levels = {
        severity: report_to_sarif(CheckReport("m.yaml", (_finding(index, line=None),)))["runs"][0]["results"][0][
            "level"
        ]
        for severity, index in by_severity.items()
    }
    expected = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
    assert levels == {severity: expected[severity] for severity in levels}


def test_an_absolute_manifest_path_becomes_a_file_uri_and_a_relative_one_stays_relative():
    absolute = report_to_sarif(CheckReport("/work/m y.yaml", ()))["runs"][0]["artifacts"]
    relative = report_to_sarif(CheckReport("sub/m.yaml", ()))["runs"][0]["artifacts"]
    assert absolute == [{"location": {"uri": "file:///work/m%20y.yaml"}}]
    assert relative == [{"location": {"uri": "sub/m.yaml"}}]
