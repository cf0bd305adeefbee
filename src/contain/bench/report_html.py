"""``contain bench startup --html FILE``: the start-up ladder as one self-contained HTML page.

The page holds: the command and host facts of the run, an inline SVG chart of the ladder (per
backend, its cold and warm start: every sample one mark, a box from the first to the third
quartile, a median line, whiskers from min to max, on a log time axis, with the microvm targets
as marks on their rows), the microvm table against its targets, and every summary.

Enforced here: nothing is fetched. No script, no external style, font or image; a
Content-Security-Policy of ``default-src 'none'`` (inline style only) makes a browser refuse any
that slipped in. Every string that did not come from this module (variant and backend names,
host facts such as the kernel release, the accelerator line, which quotes QEMU's own output, the
command line) goes through ``html.escape``, attributes included.

What it does not do: measure (startup.py, pool.py), judge (ladder.py), or make the page tamper
evident: it is a report, not a record.
"""

from __future__ import annotations

import html
import math
import os
import platform
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contain.bench.ladder import MICROVM_TARGETS, ladder_rows, ladder_series, memory_label
from contain.bench.pool import MemorySummary
from contain.bench.startup import Summary

__all__ = ["ChartGeometry", "gather_run_facts", "render_bench_html", "render_ladder_svg"]

CSP = "default-src 'none'; style-src 'unsafe-inline'"
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
th:first-child, td:first-child, #facts td, td.none { text-align: left; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; }
svg text { font: 12px system-ui, sans-serif; fill: #222; }
.sample { fill: #1f77b4; fill-opacity: 0.55; }
.warm .sample { fill: #2ca02c; }
.box { fill: #ddd; fill-opacity: 0.5; stroke: #555; }
.median { stroke: #000; stroke-width: 2; }
.whisker { stroke: #555; }
.target { stroke: #d62728; stroke-width: 2; stroke-dasharray: 3 2; }
.grid { stroke: #eee; }
.missed { color: #d62728; font-weight: bold; }
"""


@dataclass(frozen=True)
class ChartGeometry:
    """Pixel layout of the chart (constants, named so the test and the page agree)."""

    width: int = 960
    label_width: int = 230
    right: int = 30
    top: int = 20
    row_height: int = 34
    axis_height: int = 50


def gather_run_facts(*, command: str, load_before: tuple[float, float, float]) -> dict[str, str]:
    """The facts printed with the figures: command, when, host, load (before and after). Reads the host."""
    after = os.getloadavg()
    return {
        "command": command,
        "finished (UTC)": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "host kernel": platform.release(),
        "cpus": str(os.cpu_count()),
        "python": platform.python_version(),
        "load average before (1/5/15 min)": " ".join(f"{v:.2f}" for v in load_before),
        "load average after (1/5/15 min)": " ".join(f"{v:.2f}" for v in after),
    }


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ms_label(seconds: float) -> str:
    return f"{seconds * 1e3:g} ms" if seconds < 1 else f"{seconds:g} s"


def _ticks(low_s: float, high_s: float) -> list[float]:
    """Decades covering [low, high], with 2 and 5 between them when fewer than three decades."""
    first, last = math.floor(math.log10(low_s)), math.ceil(math.log10(high_s))
    if last == first:
        last += 1
    steps = (1.0,) if last - first >= 3 else (1.0, 2.0, 5.0)
    return [m * 10.0**d for d in range(first, last + 1) for m in steps if m * 10.0**d <= 10.0**last]


def _quartiles(values: Sequence[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _targets_by_row() -> dict[tuple[str, str], float]:
    """(backend, rung) -> the target marked on that chart row (microvm cold and warm)."""
    rungs = {"{label}-cold/true": "cold", "{label}-pool/true": "warm"}
    return {("microvm", rungs[t.variant]): t.max_s for t in MICROVM_TARGETS if t.variant in rungs and t.max_s}


def _line(klass: str, x1: float, y1: float, x2: float, y2: float, title: str = "") -> str:
    tip = f"<title>{_e(title)}</title>" if title else ""
    return f'<line class="{klass}" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}">{tip}</line>'


def render_ladder_svg(series: Sequence[tuple[str, str, Summary]], geometry: ChartGeometry = ChartGeometry()) -> str:
    """The chart: one row per (backend, rung), one ``circle.sample`` per sample. Pure.

    Rows without samples (a summary read back without them) get the box and median only.
    """
    g = geometry
    values = [v for _, _, s in series for v in (s.values_s or (s.median_s,)) if v > 0]
    if not values:
        return '<p id="no-chart">no start-up samples to chart</p>'
    ticks = _ticks(min(values), max(values))
    low, high = math.log10(ticks[0]), math.log10(ticks[-1])
    plot_w = g.width - g.label_width - g.right
    height = g.top + g.row_height * len(series) + g.axis_height

    def x(seconds: float) -> float:
        return g.label_width + (math.log10(max(seconds, ticks[0])) - low) / (high - low) * plot_w

    parts = [
        f'<svg id="ladder" xmlns="http://www.w3.org/2000/svg" width="{g.width}" height="{height}" '
        f'viewBox="0 0 {g.width} {height}" role="img" aria-label="start-up per backend, cold and warm">'
    ]
    axis_y = g.top + g.row_height * len(series)
    for tick in ticks:
        parts.append(f'<line class="grid" x1="{x(tick):.1f}" y1="{g.top}" x2="{x(tick):.1f}" y2="{axis_y}"/>')
        parts.append(
            f'<text class="tick" x="{x(tick):.1f}" y="{axis_y + 16}" text-anchor="middle">{_e(_ms_label(tick))}</text>'
        )
    parts.append(
        f'<text class="axis-title" x="{g.label_width + plot_w / 2:.1f}" y="{axis_y + 38}" text-anchor="middle">'
        "start to the first command's result (log scale)</text>"
    )
    targets = _targets_by_row()
    for row, (backend, rung, summary) in enumerate(series):
        mid = g.top + g.row_height * row + g.row_height / 2
        samples = [v for v in summary.values_s if v > 0]
        q1, q3 = _quartiles(samples) if samples else (summary.median_s, summary.median_s)
        parts.append(f'<g class="row {_e(rung)}" data-backend="{_e(backend)}" data-rung="{_e(rung)}">')
        parts.append(
            f'<text class="row-label" x="{g.label_width - 8}" y="{mid + 4:.1f}" text-anchor="end">'
            f"{_e(backend)} {_e(rung)}</text>"
        )
        if samples:
            parts.append(_line("whisker", x(min(samples)), mid, x(max(samples)), mid))
        parts.append(
            f'<rect class="box" x="{x(q1):.1f}" y="{mid - 9:.1f}" width="{max(1.0, x(q3) - x(q1)):.1f}" height="18"/>'
        )
        median = x(summary.median_s)
        parts.append(_line("median", median, mid - 11, median, mid + 11, f"median {summary.median_s * 1e3:.2f} ms"))
        target = targets.get((backend, rung))
        if target is not None:
            parts.append(_line("target", x(target), mid - 14, x(target), mid + 14, f"target {_ms_label(target)}"))
        for index, value in enumerate(samples):
            jitter = ((index * 7) % 11 - 5) * 1.2  # deterministic spread, so equal samples stay visible
            parts.append(
                f'<circle class="sample" cx="{x(value):.1f}" cy="{mid + jitter:.1f}" r="3">'
                f"<title>{_e(backend)} {_e(rung)}: {value * 1e3:.2f} ms</title></circle>"
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


def _facts_table(facts: Mapping[str, str]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts.items())
    return f'<table id="facts">{rows}</table>'


def _summary_table(summaries: Mapping[str, Summary]) -> str:
    rows = "".join(
        f"<tr><td>{_e(s.name)}</td><td>{s.samples}</td><td>{s.median_s * 1e3:.2f}</td><td>{s.p95_s * 1e3:.2f}</td></tr>"
        for s in summaries.values()
    )
    return (
        '<table id="summaries"><thead><tr><th>variant</th><th>n</th><th>median ms</th><th>p95 ms</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _microvm_table(
    summaries: Mapping[str, Summary], accelerators: Mapping[str, str], memory: Mapping[str, MemorySummary]
) -> str:
    rows = ladder_rows(summaries, accelerators)
    if not rows:
        return ""

    def cell(row_met: bool | None, summary: Summary | None, note: str) -> str:
        if summary is None:
            return f'<td class="none">{_e(note or "-")}</td>'
        klass = ' class="missed"' if row_met is False else ""
        return f"<td{klass}>{summary.median_s * 1e3:.1f} ({summary.p95_s * 1e3:.1f})</td>"

    body = "".join(
        f"<tr><td>{_e(r.target.figure)}</td>{cell(r.is_met(r.tcg), r.tcg.summary, r.tcg.note)}"
        f"{cell(r.is_met(r.kvm), r.kvm.summary, r.kvm.note)}"
        f"<td>{'-' if r.target.max_s is None else _e(_ms_label(r.target.max_s))}</td></tr>"
        for r in rows
    )
    weights = "".join(
        f"<tr><td>VMM host memory per idle VM, {_e(memory_label(name))}</td>"
        f'<td colspan="3">RSS {m.rss_kib / 1024:.1f} MiB, PSS {m.pss_kib / 1024:.1f} MiB '
        f"(median of {m.samples})</td></tr>"
        for name, m in memory.items()
    )
    return (
        "<h2>microvm against its targets</h2>"
        f'<p id="accelerator">accelerator decision: {_e(accelerators.get("microvm", ""))}</p>'
        '<table id="microvm"><thead><tr><th>figure</th><th>TCG ms median (p95)</th>'
        f"<th>KVM ms median (p95)</th><th>target</th></tr></thead><tbody>{body}{weights}</tbody></table>"
    )


def render_bench_html(
    *,
    summaries: Mapping[str, Summary],
    backends: Sequence[str],
    facts: Mapping[str, str],
    text_report: str,
    accelerators: Mapping[str, str] | None = None,
    memory: Mapping[str, MemorySummary] | None = None,
) -> str:
    """The whole page (see the module docstring). Pure.

    Args:
        summaries: every summary of the run (samples kept for the chart).
        backends: the measured backend specs, in the chart's order.
        facts: the run's command and host facts (``gather_run_facts``).
        text_report: the plain-text report the terminal got, shown as it was.
        accelerators, memory: bench/pool.py's microvm findings.
    """
    series = ladder_series(summaries, list(backends))
    title = "contain start-up ladder: " + ", ".join(backends)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">',
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{_e(title)}</h1>",
            _facts_table(facts),
            "<h2>Start-up per backend, cold and warm</h2>",
            "<p>cold: <code>Sandbox(...)</code>, <code>start()</code> and <code>run(['/bin/true'])</code>; "
            "warm: <code>SandboxPool.acquire()</code> and the same run. One dot per sample, the box from the "
            "first to the third quartile, the black line the median, a red dashed mark the target.</p>",
            render_ladder_svg(series),
            _microvm_table(summaries, accelerators or {}, memory or {}),
            "<h2>Every variant</h2>",
            _summary_table(summaries),
            "<h2>The report as printed</h2>",
            f'<pre id="text-report">{_e(text_report)}</pre>',
            "</body></html>",
        ]
    )
