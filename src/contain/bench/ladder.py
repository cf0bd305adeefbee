"""The start-up ladder: each backend's cold and warm start side by side, and the microvm rows
judged against absolute targets (issue 14), as pure data from the bench's summaries.

The microvm backend has no raw runtime to be compared with (a raw QEMU boot of the same guest
is the backend itself), so unlike process and the container runtimes (``startup.BACKEND_TARGETS``,
ratios against a raw baseline) its rows are held against the absolute times of
``MICROVM_TARGETS``. Those targets are stated for TCG (this host: KVM does not boot the guest);
where the accelerator decision picked KVM the same rows are measured again under TCG
(bench/pool.py), and the table gets a KVM column beside the TCG one. Where it picked TCG the
KVM column says so, with the decision's reason, and holds no figure.

What it does not do: measure (startup.py and pool.py do), or judge anything but medians against
the targets. Benchmarks report; nothing here asserts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contain.bench.pool import MemorySummary
from contain.bench.startup import Summary

__all__ = [
    "LADDER_KINDS",
    "MICROVM_TARGETS",
    "LadderCell",
    "LadderRow",
    "LadderTarget",
    "ladder_rows",
    "ladder_series",
    "memory_label",
    "render_ladder",
]


@dataclass(frozen=True)
class LadderTarget:
    """One microvm figure, the summary it is read from, and its target (None: reported only)."""

    figure: str  # how the table names it
    variant: str  # summary name with "{label}" for the measured label, e.g. "{label}-cold/true"
    max_s: float | None
    source: str  # where the target comes from


MICROVM_TARGETS: tuple[LadderTarget, ...] = (
    LadderTarget("cold: start to the first exec of /bin/true", "{label}-cold/true", 3.0, "issue 14, TCG"),
    LadderTarget("cold: start to the first exec of python3 -c pass", "{label}-cold/python", None, "reported"),
    LadderTarget("warm: pool acquire + /bin/true", "{label}-pool/true", 0.30, "issue 14, TCG"),
    LadderTarget("pool acquire() alone", "{label}-pool-acquire", None, "reported"),
    LadderTarget("/bin/true in a running VM (session)", "contain-session[{label}]/true", 0.025, "issue 14, TCG"),
)

# The two rungs every backend has, and the summary each is read from (bench/pool.py's rows).
LADDER_KINDS: tuple[tuple[str, str], ...] = (("cold", "{label}-cold/true"), ("warm", "{label}-pool/true"))


@dataclass(frozen=True)
class LadderCell:
    """One figure under one accelerator: its summary, or why there is none."""

    summary: Summary | None
    note: str = ""  # e.g. "not measured: ..." when summary is None


@dataclass(frozen=True)
class LadderRow:
    """One microvm figure: the TCG and KVM cells and the target."""

    target: LadderTarget
    tcg: LadderCell
    kvm: LadderCell

    def is_met(self, cell: LadderCell) -> bool | None:
        """Whether ``cell``'s median is within the target (None: no target or no figure)."""
        if self.target.max_s is None or cell.summary is None:
            return None
        return cell.summary.median_s <= self.target.max_s


def _labels_by_accel(accelerators: Mapping[str, str]) -> dict[str, str]:
    """accelerator ("tcg" | "kvm") -> the microvm label measured under it."""
    by_accel: dict[str, str] = {}
    for label in ("microvm", "microvm[tcg]"):
        line = accelerators.get(label, "")
        accel = line.split(" ", 1)[0]
        if accel in ("tcg", "kvm") and accel not in by_accel:
            by_accel[accel] = label
    return by_accel


def ladder_rows(summaries: Mapping[str, Summary], accelerators: Mapping[str, str]) -> list[LadderRow]:
    """The microvm table: one row per ``MICROVM_TARGETS`` entry, TCG and KVM cells. Pure.

    Args:
        summaries: every summary of the run.
        accelerators: label -> accelerator line (bench/pool.py's ``PoolMeasurement.accelerators``).

    Returns:
        [] when microvm was not measured.
    """
    by_accel = _labels_by_accel(accelerators)
    if not by_accel:
        return []
    auto_line = accelerators.get("microvm", "")
    rows = []
    for target in MICROVM_TARGETS:
        cells = {}
        for accel in ("tcg", "kvm"):
            label = by_accel.get(accel)
            if label is None:
                picked = auto_line.split(" ", 1)[0].upper() or "no accelerator"
                cells[accel] = LadderCell(None, f"not measured: accel auto picked {picked} here (reason above)")
                continue
            name = target.variant.format(label=label)
            summary = summaries.get(name)
            cells[accel] = LadderCell(summary, "" if summary is not None else f"not measured ({name})")
        rows.append(LadderRow(target, cells["tcg"], cells["kvm"]))
    return rows


def ladder_series(summaries: Mapping[str, Summary], backends: list[str]) -> list[tuple[str, str, Summary]]:
    """``(backend, rung, summary)`` for the chart: per backend, in order, its cold and warm rows
    where measured. Pure."""
    series = []
    for backend in backends:
        for rung, variant in LADDER_KINDS:
            summary = summaries.get(variant.format(label=backend))
            if summary is not None:
                series.append((backend, rung, summary))
    return series


def _cell_text(row: LadderRow, cell: LadderCell) -> str:
    if cell.summary is None:
        return "-"
    met = row.is_met(cell)
    verdict = "" if met is None else (" ok" if met else " MISSED")
    return f"{cell.summary.median_s * 1e3:.1f} ({cell.summary.p95_s * 1e3:.1f}){verdict}"


def render_ladder(
    summaries: Mapping[str, Summary], accelerators: Mapping[str, str], memory: Mapping[str, MemorySummary]
) -> list[str]:
    """The microvm table as text lines (medians in ms, p95 in brackets), then the VMM memory. Pure."""
    rows = ladder_rows(summaries, accelerators)
    if not rows:
        return []
    lines = [
        f"microvm: accelerator decision: {accelerators.get('microvm', '')}",
        f"{'figure':<50} {'TCG ms median (p95)':>24} {'KVM ms median (p95)':>24} {'target':>10}",
    ]
    for row in rows:
        target = "-" if row.target.max_s is None else f"<= {row.target.max_s * 1e3:g} ms"
        lines.append(
            f"{row.target.figure:<50} {_cell_text(row, row.tcg):>24} {_cell_text(row, row.kvm):>24} {target:>10}"
        )
    kvm_notes = {row.kvm.note for row in rows if row.kvm.summary is None and row.kvm.note}
    lines += [f"KVM column: {note}" for note in sorted(kvm_notes)]  # once, not per row
    for name, weight in memory.items():
        lines.append(
            f"VMM host memory per idle VM, {memory_label(name)}: RSS {weight.rss_kib / 1024:.1f} MiB, "
            f"PSS {weight.pss_kib / 1024:.1f} MiB (median of {weight.samples})"
        )
    return lines


def memory_label(name: str) -> str:
    """What a ``MemorySummary`` name weighed: "microvm-cold" -> "microvm, cold-booted (after its
    first command)"; "microvm-pool" -> "microvm, restored from the pool (before its first command)"."""
    label, _, kind = name.rpartition("-")
    what = {
        "cold": "cold-booted (after its first command)",
        "pool": "restored from the pool (before its first command)",
    }.get(kind, kind)
    return f"{label}, {what}"
