"""The escape-and-recovery battery: cases, targets, outside judges, runner and reports."""

from contain.probe.case import AttackRun, CaseResult, Category, ProbeCase, ProbeContext, Target, Verdict
from contain.probe.context import RunContext
from contain.probe.registry import CATALOGUE_IDS, load_cases, missing_ids
from contain.probe.report import Report, render_html, render_json
from contain.probe.runner import run_battery, run_case
from contain.probe.targets import ContainTarget, HostControlTarget, WrapTarget

__all__ = [
    "CATALOGUE_IDS",
    "AttackRun",
    "CaseResult",
    "Category",
    "ContainTarget",
    "HostControlTarget",
    "ProbeCase",
    "ProbeContext",
    "Report",
    "RunContext",
    "Target",
    "Verdict",
    "WrapTarget",
    "load_cases",
    "missing_ids",
    "render_html",
    "render_json",
    "run_battery",
    "run_case",
]
