"""The shape of an escape-and-recovery probe: a case, its verdict, its evidence.

A case is attack code run inside a target sandbox and a judge that stands outside it. What the
attacker prints proves nothing by itself: the judge looks at canary sinks, the proxy's decision
log and host state. Every deny case has a positive control that shows the probe can see a breach
(ESCAPED) when the layer is absent or the target is allowed; a control that fails makes the case
INCONCLUSIVE, never CONTAINED.

This module holds only values and the interface; cases live in ``probe/cases_*.py``, the judges
in ``probe/canaries.py`` (canary listeners), ``probe/snapshot.py`` (host state before and after)
and ``probe/context.py`` (planted canaries, verdict order), targets in ``probe/targets.py``, and
the runner and reports in ``probe/runner.py`` and ``probe/report.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "AttackRun",
    "CaseResult",
    "Category",
    "ProbeCase",
    "ProbeContext",
    "Target",
    "Verdict",
]


class Verdict(StrEnum):
    """How a case ended. Only CONTAINED and NOT_APPLICABLE count as a pass."""

    CONTAINED = "CONTAINED"
    ESCAPED = "ESCAPED"
    INCONCLUSIVE = "INCONCLUSIVE"  # the positive control failed, or something the case needs is missing
    ERROR = "ERROR"  # the probe itself crashed
    NOT_APPLICABLE = "NOT_APPLICABLE"  # by construction for this backend; the reason is stated


class Category(StrEnum):
    FS = "FS"  # filesystem and paths
    PR = "PR"  # processes and procfs
    FD = "FD"  # inherited descriptors and terminals
    SY = "SY"  # kernel surface
    IP = "IP"  # IPC, sockets and brokers
    NE = "NE"  # network and egress
    PX = "PX"  # allowlisting proxy
    RE = "RE"  # resources
    LF = "LF"  # cancellation and persistence
    XT = "XT"  # cross-task residue
    CR = "CR"  # credentials
    OC = "OC"  # OCI containers (container backends only)
    VM = "VM"  # microVMs (microVM backends only)


@dataclass(frozen=True)
class AttackRun:
    """What running attack code in a target produced (evidence, not a verdict)."""

    exit_code: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    duration_s: float
    run_result: Any | None = None  # contain's RunResult when the target is contain's own runtime
    egress_events: tuple[Mapping[str, Any], ...] = ()  # the proxy's decision log for this run
    host_pid: int | None = None  # host pid of the sandbox's pid 1 (contain) or the wrapped command


class Target(Protocol):
    """Something attack code can run in: contain's backend, or a wrapped third-party sandbox."""

    name: str  # e.g. "contain:process" or "wrap:bwrap --unshare-all ..."
    has_contain_hooks: bool  # False for --wrap targets: no proxy log, no boundary overrides

    def run_python(
        self,
        code: str,
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        """Run ``code`` with python3 inside a fresh sandbox; ``boundary`` is a manifest mapping
        merged over the probe's default (ignored by targets without contain hooks)."""
        ...

    def run_argv(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        """Run an argv inside a fresh sandbox."""
        ...


@dataclass(frozen=True)
class CaseResult:
    """A verdict with the evidence a reader needs to believe it."""

    case_id: str
    verdict: Verdict
    summary: str  # one line: what happened
    evidence: dict[str, Any] = field(default_factory=dict)  # judge readings, trimmed outputs
    control: str | None = None  # what the positive control showed, in words
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "verdict": self.verdict.value,
            "summary": self.summary,
            "evidence": self.evidence,
            "control": self.control,
            "duration_s": round(self.duration_s, 3),
        }


class ProbeContext(Protocol):
    """What a case gets: the target, a weaker control target, fresh canaries and host judges."""

    target: Target
    control: Target  # a weaker but still bounded configuration, for positive controls
    run_id: str

    def canary(self, prefix: str = "canary") -> str:
        """A fresh random value, unique per call and per run."""
        ...


@dataclass(frozen=True)
class ProbeCase:
    """One catalogue case: attack, judge and control in one function."""

    id: str  # e.g. "FS-01"
    category: Category
    title: str  # the attack, in a few words
    expected: str  # the contained outcome, from the catalogue
    check: Callable[[ProbeContext], CaseResult]
    not_applicable: Mapping[str, str] = field(default_factory=dict)  # target kind -> reason
