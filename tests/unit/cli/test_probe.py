"""`contain probe`: progress lines, the summary, leftovers and errors print as escapes.

The battery itself is replaced by a fake that reports one case whose summary quotes what a
workload printed (the real cases run in tests/integration/test_probe_cli.py)."""

from __future__ import annotations

import json

import pytest

import contain.probe.context
import contain.probe.runner
from cli.terminal_kit import HOSTILE, HOSTILE_SHOWN, assert_terminal_safe
from contain.cli import main
from contain.probe.case import CaseResult, Verdict
from contain.probe.report import Report


class _FakeContext:
    def __init__(self, target, **_):
        self.target, self.run_id = target, "feedfacecafe"

    def close(self):
        return [f"/tmp/probe-{HOSTILE}"]


@pytest.fixture
def hostile_battery(monkeypatch):
    result = CaseResult("FS-01", Verdict.ESCAPED, f"read the canary; the workload printed {HOSTILE}")

    def run_battery(cases, ctx, *, patterns=None, case_timeout_s=0.0, progress=None, **_):
        if patterns == "bad":
            raise ValueError(f"--cases {HOSTILE} matches nothing")
        progress(1, 1, result)
        return Report(ctx.target.name, "contain", ctx.run_id, "2026-01-01T00:00:00Z", 0.1, (result,))

    monkeypatch.setattr(contain.probe.context, "RunContext", _FakeContext)
    monkeypatch.setattr(contain.probe.runner, "run_battery", run_battery)


def test_progress_summary_and_leftovers_are_rendered(hostile_battery, capsysbinary):
    assert main(["probe", "--cases", "FS-01"]) == 1
    captured = capsysbinary.readouterr()
    text = captured.out.decode() + captured.err.decode()
    assert_terminal_safe(text)
    assert f"the workload printed {HOSTILE_SHOWN}" in text and f"/tmp/probe-{HOSTILE_SHOWN}" in text


def test_an_error_quoting_the_pattern_is_rendered(hostile_battery, capsysbinary):
    assert main(["probe", "--cases", "bad"]) == 2
    assert_terminal_safe(capsysbinary.readouterr().err.decode())


def test_json_output_stays_exact(hostile_battery, capsys):
    assert main(["probe", "--cases", "FS-01", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"][0]["summary"].endswith(HOSTILE)
    assert_terminal_safe(captured.err)


@pytest.fixture
def recorded_battery(monkeypatch):
    """The battery replaced by one that records the target it was given."""
    seen: list[object] = []

    def run_battery(cases, ctx, *, patterns=None, case_timeout_s=0.0, progress=None, **_):
        seen.append(ctx.target)
        return Report(ctx.target.name, "contain", ctx.run_id, "2026-01-01T00:00:00Z", 0.1, ())

    monkeypatch.setattr(contain.probe.context, "RunContext", _FakeContext)
    monkeypatch.setattr(contain.probe.runner, "run_battery", run_battery)
    return seen


def _fake_runtime(monkeypatch, *, missing: bool = False):
    import contain.runtime.container.backend as container_backend
    from contain.errors import UnsupportedHost
    from contain.runtime.backend_names import RuntimeFacts

    def probe_runtime(runtime):
        if missing:
            raise UnsupportedHost(f"{runtime} is not installed", f"install {runtime}")
        return RuntimeFacts(runtime, f"/usr/sbin/{runtime}", f"{runtime} version 1")

    monkeypatch.setattr(container_backend, "probe_runtime", probe_runtime)


@pytest.mark.parametrize(("given", "full"), [("container", "container:runc"), ("container:runsc", "container:runsc")])
def test_a_backend_spec_becomes_the_target_and_a_bare_container_names_its_runtime(
    recorded_battery, monkeypatch, given, full
):
    _fake_runtime(monkeypatch)
    assert main(["probe", "--backend", given, "--cases", "OC-*"]) == 0
    (target,) = recorded_battery
    assert (target.backend, target.kind, target.name) == (full, full, f"contain:{full}")


@pytest.mark.parametrize("spec", ["container:gvisor", "docker", "process:bwrap"])
def test_an_unknown_backend_spec_exits_125_before_any_case_runs(recorded_battery, capsys, spec):
    assert main(["probe", "--backend", spec]) == 125
    assert recorded_battery == []
    assert "fix: use " in capsys.readouterr().err


def test_a_missing_runtime_exits_125_before_any_case_runs(recorded_battery, monkeypatch, capsys):
    _fake_runtime(monkeypatch, missing=True)
    assert main(["probe", "--backend", "container:runsc"]) == 125
    assert recorded_battery == []
    assert "runsc is not installed" in capsys.readouterr().err
