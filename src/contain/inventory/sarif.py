"""``contain check --format sarif``: findings as a SARIF 2.1.0 log for code-scanning tools.

One run, tool ``contain``, every ``CHECK_RULES`` row as a reporting descriptor (so tools can show
the reason and fix of rules that did not fire), one result per finding with the manifest as the
artifact location and the line when it is known. Pure: returns a dict, the CLI serialises it.

Follows the OASIS SARIF 2.1.0 schema
(https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html); not validated against the
JSON Schema at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from contain.inventory.check import CheckReport
from contain.inventory.check_rules import CHECK_RULES, CheckRule, Severity

__all__ = ["SARIF_SCHEMA", "SARIF_VERSION", "report_to_sarif"]

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# SARIF result.level values (§3.27.10): error, warning, note, none.
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def report_to_sarif(
    report: CheckReport, *, rules: Sequence[CheckRule] = CHECK_RULES, version: str = "0"
) -> dict[str, Any]:
    """Render a check report as a SARIF log.

    Args:
        report: the findings.
        rules: the rule table the findings came from.
        version: the contain version, for ``tool.driver.version``.
    """
    index = {rule.id: i for i, rule in enumerate(rules)}
    uri = _artifact_uri(report.manifest)
    results = []
    for finding in report.findings:
        region = {"startLine": finding.line} if finding.line else None
        physical: dict[str, Any] = {"artifactLocation": {"uri": uri}}
        if region:
            physical["region"] = region
        results.append(
            {
                "ruleId": finding.rule_id,
                "ruleIndex": index[finding.rule_id],
                "level": _LEVEL[finding.severity],
                "message": {"text": f"{finding.message} Fix: {finding.fix}"},
                "locations": [
                    {
                        "physicalLocation": physical,
                        "logicalLocations": [{"fullyQualifiedName": finding.key_path, "kind": "member"}],
                    }
                ],
            }
        )
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "contain",
                        "version": version,
                        "rules": [
                            {
                                "id": rule.id,
                                "name": rule.title,
                                "shortDescription": {"text": rule.title},
                                "fullDescription": {"text": rule.why},
                                "help": {"text": rule.fix},
                                "defaultConfiguration": {"level": _LEVEL[rule.severity]},
                            }
                            for rule in rules
                        ],
                    }
                },
                "artifacts": [{"location": {"uri": uri}}],
                "results": results,
            }
        ],
    }


def _artifact_uri(manifest: str) -> str:
    # SARIF §3.10: a URI reference; relative paths stay relative (to the scan root).
    path = PurePosixPath(manifest)
    return path.as_uri() if path.is_absolute() else path.as_posix()
