"""Context helpers: attack reports, canary sinks, verdict order (boundary merging: test_targets.py)."""

from __future__ import annotations

import pytest

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


def _endpoint_seen_by_an_attack(env: dict[str, str], **params: object) -> list[object]:
    import subprocess
    import sys

    code = attack("note('endpoint', proxy_endpoint())\ndone()", **params)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=30, check=True)
    report = attack_report(_run(out.stdout))
    assert report is not None, out.stderr
    return list(report["endpoint"]["value"])


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"http_proxy": "http://10.0.2.100:3128"}, ["10.0.2.100", 3128]),  # a microVM guest's forward
        ({"HTTP_PROXY": "http://127.0.0.1:3128/"}, ["127.0.0.1", 3128]),  # a process sandbox's loopback
        ({"http_proxy": "http://u:p@[fd00::1]:8080"}, ["fd00::1", 8080]),
        ({}, ["127.0.0.1", 3128]),  # no proxy given: the loopback default, which nothing should answer
    ],
)
def test_an_attack_aims_at_the_proxy_the_sandbox_was_told_of(env, expected):
    assert _endpoint_seen_by_an_attack({"PATH": "/usr/bin:/bin", **env}) == expected


def test_an_explicit_proxy_parameter_wins_over_the_environment():
    env = {"PATH": "/usr/bin:/bin", "http_proxy": "http://10.0.2.100:3128"}
    assert _endpoint_seen_by_an_attack(env, proxy=["127.0.0.1", 4321]) == ["127.0.0.1", 4321]
