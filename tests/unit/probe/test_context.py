"""Context helpers: attack reports, canary sinks, verdict order (boundary merging: test_targets.py)."""

from __future__ import annotations

from contain.probe.case import AttackRun, Verdict
from contain.probe.context import attack, attack_report, canary_sinks, succeeded, verdict


def _run(stdout: bytes = b"", stderr: bytes = b"", events=()) -> AttackRun:
    return AttackRun(0, None, stdout, stderr, False, 0.1, egress_events=tuple(events))


def test_attack_report_reads_the_last_report_line():
    run = _run(b'noise\n@@PROBE@@{"a": {"ok": true}}\nmore\n@@PROBE@@{"b": {"ok": false}}\n')
    assert attack_report(run) == {"b": {"ok": False}}
    assert attack_report(_run(b"nothing")) is None


def test_attack_source_never_contains_the_report_mark_literally():
    # The attack's own command line must not look like a report when another process reads it.
    assert "@@PROBE@@" not in attack("done()", x=1)


def test_canary_sinks_name_every_sink_it_reached():
    run = _run(b"..c4n4ry..", b"", [{"host": "evil", "path": "/?q=c4n4ry"}])
    assert canary_sinks(run, "c4n4ry") == ["stdout", "egress log"]
    assert canary_sinks(run, "absent") == []


def test_succeeded_lists_operations_the_kernel_allowed():
    report = {"a": {"ok": True}, "b": {"ok": False, "errno": "EPERM"}, "c": {"ok": True}}
    assert succeeded(report) == ["a", "c"]
    assert succeeded(report, "b", "c") == ["c"]


def test_a_breach_wins_over_a_failed_control():
    result = verdict("FS-01", breaches=["x"], control_shows_breach=False, contained="", control=None, evidence={})
    assert result.verdict is Verdict.ESCAPED


def test_a_failed_control_is_inconclusive_never_contained():
    result = verdict("FS-01", breaches=[], control_shows_breach=False, contained="ok", control=None, evidence={})
    assert result.verdict is Verdict.INCONCLUSIVE


def test_a_missing_prerequisite_is_inconclusive():
    result = verdict(
        "FS-01", breaches=[], control_shows_breach=True, contained="ok", control=None, evidence={}, missing="no report"
    )
    assert (result.verdict, result.summary) == (Verdict.INCONCLUSIVE, "no report")


def test_contained_needs_no_breach_and_a_working_control():
    result = verdict("FS-01", breaches=[], control_shows_breach=True, contained="ok", control="c", evidence={})
    assert (result.verdict, result.summary, result.control) == (Verdict.CONTAINED, "ok", "c")
