"""`contain doctor`: details quoting what host tools answered print as escapes, one line each."""

from __future__ import annotations

import json

import pytest

import contain.host.doctor
import contain.host.facts
import contain.host.observe
from cli.terminal_kit import HOSTILE, HOSTILE_SHOWN, assert_terminal_safe
from contain.cli import main
from contain.host.doctor import PROCESS_BACKEND, Check, Report, Status
from contain.host.observe import DetectedSupervisor


@pytest.fixture
def hostile_host(monkeypatch):
    report = Report(
        checks=(Check("bwrap", Status.FAIL, f"bwrap said: {HOSTILE}", fix=f"reinstall {HOSTILE}"),),
        verdicts=(Check(PROCESS_BACKEND, Status.FAIL, f"needs bwrap ({HOSTILE})", fix="install bubblewrap"),),
    )
    monkeypatch.setattr(contain.host.facts, "detect_host", lambda: None)
    monkeypatch.setattr(contain.host.observe, "observe_host", lambda facts: None)
    monkeypatch.setattr(contain.host.doctor, "build_report", lambda facts, obs: report)
    monkeypatch.setattr(contain.host.observe, "observe_supervisor",
                        lambda build: DetectedSupervisor(None, error=f"cc failed: {HOSTILE}", fix=f"install {HOSTILE}"))


def test_the_report_renders_every_detail_and_fix(hostile_host, capsysbinary):
    assert main(["doctor"]) == 1
    out = capsysbinary.readouterr().out.decode()
    assert_terminal_safe(out)
    assert f"bwrap said: {HOSTILE_SHOWN}" in out and f"fix: reinstall {HOSTILE_SHOWN}" in out


def test_build_supervisor_renders_the_compiler_error(hostile_host, capsysbinary):
    assert main(["doctor", "--build-supervisor"]) == 1
    out = capsysbinary.readouterr().out.decode()
    assert_terminal_safe(out)
    assert f"cc failed: {HOSTILE_SHOWN}" in out


def test_json_output_stays_exact(hostile_host, capsys):
    assert main(["doctor", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["checks"][0]["detail"] == f"bwrap said: {HOSTILE}"
