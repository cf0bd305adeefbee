"""The probe's report: one value, rendered as JSON, a text table and a self-contained HTML page.

The HTML page has inline CSS and no script, image, font or link to anything outside the file;
every piece of evidence is HTML-escaped (attack output is attacker-controlled text). Scores count
CONTAINED and NOT_APPLICABLE as passes; INCONCLUSIVE is never a pass.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contain.probe.case import CaseResult, Category, Verdict

__all__ = ["CaseInfo", "Report", "render_html", "render_json", "render_summary", "render_table_line"]

PASSING = frozenset({Verdict.CONTAINED, Verdict.NOT_APPLICABLE})
_SCHEMA = "contain.probe.report/1"


@dataclass(frozen=True)
class CaseInfo:
    """What the catalogue says about a case, for readers of the report."""

    id: str
    category: str
    title: str
    expected: str


@dataclass(frozen=True)
class Report:
    """The outcome of one battery run against one target."""

    target: str
    target_kind: str
    run_id: str
    started_at: str  # ISO 8601, UTC
    duration_s: float
    results: tuple[CaseResult, ...]
    cases: Mapping[str, CaseInfo] = field(default_factory=dict)
    host: Mapping[str, Any] = field(default_factory=dict)
    backend: str | None = None  # contain's backend spec (e.g. "container:runsc"); None for --wrap

    @property
    def backend_label(self) -> str:
        """What the report's header says about the backend."""
        return self.backend if self.backend is not None else "none (not a contain backend)"

    def totals(self) -> dict[str, int]:
        counts = {v.value: 0 for v in Verdict}
        for result in self.results:
            counts[result.verdict.value] += 1
        return counts

    def by_category(self) -> dict[str, dict[str, Any]]:
        """Per category: counts per verdict, passes, total, and ``score`` as ``passed/total``."""
        out: dict[str, dict[str, Any]] = {}
        for result in self.results:
            category = result.case_id.split("-", 1)[0]
            row = out.setdefault(category, {**{v.value: 0 for v in Verdict}, "passed": 0, "total": 0})
            row[result.verdict.value] += 1
            row["total"] += 1
            row["passed"] += result.verdict in PASSING
        order = {c.value: i for i, c in enumerate(Category)}
        for row in out.values():
            row["score"] = f"{row['passed']}/{row['total']}"
        return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))

    @property
    def passed(self) -> bool:
        return all(r.verdict in PASSING for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 only when every selected case is CONTAINED or NOT_APPLICABLE."""
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": _SCHEMA,
            "target": self.target,
            "target_kind": self.target_kind,
            "backend": self.backend,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "passed": self.passed,
            "totals": self.totals(),
            "categories": self.by_category(),
            "host": dict(self.host),
            "results": [{**r.to_dict(), **_info_dict(self.cases.get(r.case_id))} for r in self.results],
        }


def _info_dict(info: CaseInfo | None) -> dict[str, Any]:
    if info is None:
        return {"category": None, "title": None, "expected": None}
    return {"category": info.category, "title": info.title, "expected": info.expected}


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str, sort_keys=False) + "\n"


def render_table_line(result: CaseResult, info: CaseInfo | None = None) -> str:
    """One line of the live table, e.g. ``FS-01  CONTAINED      0.4s  home canary unreadable``."""
    title = f" [{info.title}]" if info else ""
    return f"{result.case_id:<6} {result.verdict.value:<14} {result.duration_s:6.1f}s  {result.summary}{title}"


def render_summary(report: Report) -> str:
    lines = [
        f"target: {report.target}   backend: {report.backend_label}   run: {report.run_id}   {report.duration_s:.1f}s"
    ]
    lines.append("category  " + "  ".join(f"{v.value[:12]:>12}" for v in Verdict) + "   score")
    for category, row in report.by_category().items():
        lines.append(f"{category:<9} " + "  ".join(f"{row[v.value]:>12}" for v in Verdict) + f"   {row['score']}")
    totals = report.totals()
    lines.append("total     " + "  ".join(f"{totals[v.value]:>12}" for v in Verdict))
    lines.append("PASS" if report.passed else "FAIL: not every case is CONTAINED or NOT_APPLICABLE")
    return "\n".join(lines) + "\n"


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em} table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f4f4f4} .v{font-weight:bold;white-space:nowrap}
.CONTAINED{color:#176f2c} .ESCAPED{color:#b00020} .INCONCLUSIVE{color:#a15c00}
.ERROR{color:#7a1fa2} .NOT_APPLICABLE{color:#555}
details{margin:.2em 0} summary{cursor:pointer}
pre{background:#f7f7f7;padding:.5em;overflow:auto;max-height:30em;white-space:pre-wrap;word-break:break-all}
.pass{color:#176f2c} .fail{color:#b00020}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def render_html(report: Report) -> str:
    """A self-contained HTML page (inline CSS only; every value escaped)."""
    verdicts = [v.value for v in Verdict]
    head = "".join(f"<th>{_e(v)}</th>" for v in verdicts)
    rows = []
    for category, row in report.by_category().items():
        cells = "".join(f"<td>{row[v]}</td>" for v in verdicts)
        rows.append(f"<tr><td>{_e(category)}</td>{cells}<td>{_e(row['score'])}</td></tr>")
    totals = report.totals()
    rows.append("<tr><th>total</th>" + "".join(f"<th>{totals[v]}</th>" for v in verdicts) + "<th></th></tr>")
    case_rows = [_case_html(r, report.cases.get(r.case_id)) for r in report.results]
    status = (
        '<p class="pass">PASS: every case is CONTAINED or NOT_APPLICABLE</p>'
        if report.passed
        else '<p class="fail">FAIL: some cases are not CONTAINED</p>'
    )
    host = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in report.host.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>contain probe report: {_e(report.target)}</title>
<style>{_CSS}</style></head><body>
<h1>contain probe: {_e(report.target)}</h1>
<p>backend <code>{_e(report.backend_label)}</code>,
run <code>{_e(report.run_id)}</code>, started {_e(report.started_at)}, {report.duration_s:.1f} s,
{len(report.results)} cases</p>
{status}
<h2>Scores per category</h2>
<table id="scores"><thead><tr><th>category</th>{head}<th>score</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<h2>Cases</h2>
<table id="cases"><thead><tr><th>case</th><th>verdict</th><th>what happened</th></tr></thead>
<tbody>{"".join(case_rows)}</tbody></table>
<h2>Host</h2><table id="host">{host}</table>
</body></html>
"""


def _case_html(result: CaseResult, info: CaseInfo | None) -> str:
    title = f"{info.title}" if info else ""
    expected = f"<p><b>Expected:</b> {_e(info.expected)}</p>" if info else ""
    control = f"<p><b>Positive control:</b> {_e(result.control)}</p>" if result.control else ""
    evidence = _e(json.dumps(result.evidence, indent=2, default=str))
    return (
        f'<tr id="case-{_e(result.case_id)}"><td>{_e(result.case_id)}<br><small>{_e(title)}</small></td>'
        f'<td class="v {_e(result.verdict.value)}">{_e(result.verdict.value)}</td>'
        f"<td>{_e(result.summary)}<details><summary>details ({result.duration_s:.1f} s)</summary>"
        f"{expected}{control}<pre>{evidence}</pre></details></td></tr>"
    )


def case_infos(cases: Sequence[Any]) -> dict[str, CaseInfo]:
    """CaseInfo for each ProbeCase."""
    return {c.id: CaseInfo(c.id, c.category.value, c.title, c.expected) for c in cases}
