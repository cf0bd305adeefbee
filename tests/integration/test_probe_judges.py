"""Each outside judge catches a planted breach.

The probe runs selected cases against deliberately weak sandboxes given as ``--wrap`` prefixes
(bubblewrap run as root with full capabilities, or with the host's filesystem bound writable and
no namespaces at all). Those configurations leak by construction, so the judges must say
ESCAPED: a canary read from a file planted readable, a marker file left in the host's /tmp, a
process that survives the run, a host listener that receives the canary.
"""

from __future__ import annotations

import os

import pytest

from contain.probe.case import Verdict
from contain.probe.context import RunContext
from contain.probe.registry import load_cases
from contain.probe.runner import run_battery
from contain.probe.snapshot import marked_processes
from contain.probe.targets import WrapTarget

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

# Root inside bwrap keeps its capabilities; / is read-only but every file is readable.
WEAK_READONLY = ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
# No namespaces at all and the host's / bound writable: hardly a sandbox.
WEAK_SHARED = ["bwrap", "--bind", "/", "/", "--dev", "/dev"]


def _run(prefix: list[str], patterns: str) -> dict[str, object]:
    ctx = RunContext(WrapTarget(prefix))
    try:
        report = run_battery(load_cases(), ctx, patterns=patterns, host={})
    finally:
        ctx.close()
    return {r.case_id: r for r in report.results}


def test_readonly_root_bwrap_leaks_planted_canaries_capabilities_and_limits():
    results = _run(WEAK_READONLY, "FS-01,FS-02,PR-06,RE-01,RE-11")
    verdicts = {case_id: r.verdict for case_id, r in results.items()}  # type: ignore[attr-defined]
    assert verdicts == {
        "FS-01": Verdict.ESCAPED,  # the $HOME canary (planted readable by root) reached stdout
        "FS-02": Verdict.ESCAPED,
        "PR-06": Verdict.ESCAPED,  # capabilities, no seccomp, the caller's environment
        "RE-01": Verdict.ESCAPED,  # the bounded fork bomb reached its bound
        "RE-11": Verdict.ESCAPED,  # the probe's host log socket received the canary
    }
    assert "home canary reached stdout" in results["FS-01"].summary  # type: ignore[attr-defined]


def test_shared_namespace_bwrap_leaves_files_processes_and_reaches_listeners():
    results = _run(WEAK_SHARED, "FS-04,XT-01,LF-01,CR-01,CR-04")
    verdicts = {case_id: r.verdict for case_id, r in results.items()}  # type: ignore[attr-defined]
    assert verdicts == {
        "FS-04": Verdict.ESCAPED,  # a marker file left in the host's /tmp
        "XT-01": Verdict.ESCAPED,  # task N+1 found task N's file; the file is on the host
        "LF-01": Verdict.ESCAPED,  # a setsid process survived the run
        "CR-01": Verdict.ESCAPED,  # the planted token in the environment
        "CR-04": Verdict.ESCAPED,  # the host TCP listener received the canary
    }
    assert "/tmp/host-marker-" in results["FS-04"].summary  # type: ignore[attr-defined]
    assert "still alive after the run" in results["LF-01"].summary  # type: ignore[attr-defined]
    assert "stand-in API server" in results["CR-04"].summary  # type: ignore[attr-defined]


def test_judges_clean_up_what_the_breaches_left():
    ctx = RunContext(WrapTarget(WEAK_SHARED))
    try:
        report = run_battery(load_cases(), ctx, patterns="FS-04,LF-01", host={})
    finally:
        ctx.close()
    assert [r.verdict for r in report.results] == [Verdict.ESCAPED, Verdict.ESCAPED]
    # Everything the probe planted or the breach left carries the run id; none of it remains.
    assert [n for n in os.listdir("/tmp") if ctx.run_id in n] == []
    assert marked_processes([ctx.run_id]) == []
