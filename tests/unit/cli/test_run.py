"""`contain run`'s own lines: violations and teardown findings are rendered; the command's output
passes through byte for byte (decided: it is the user's own program output, as if run directly)."""

from __future__ import annotations

import json

import pytest

from cli.terminal_kit import HOSTILE, HOSTILE_SHOWN, assert_terminal_safe
from contain.cli import main
from contain.cli.run import contain_lines
from contain.runtime.result import Captured, RunResult, Timings, Usage, Violation

RAW_OUTPUT = b"\x1b[1mbold\x1b[0m \xff\xfe binary\n"


def test_violation_and_teardown_lines_render_what_the_workload_chose():
    lines = contain_lines([Violation("egress", f"{HOSTILE}:443 is not in network.allow"), Violation(HOSTILE, "x")],
                          [f"removed /work/out/{HOSTILE}"])
    assert lines == [
        f"contain: egress: {HOSTILE_SHOWN}:443 is not in network.allow",
        f"contain: {HOSTILE_SHOWN}: x",
        f"contain: teardown: removed /work/out/{HOSTILE_SHOWN}",
    ]
    assert_terminal_safe("\n".join(lines))


class _FakeSandbox:
    """Stands in for the runtime: returns a result with hostile violations and findings."""

    def __init__(self, boundary, *, backend=None, attachments=()):
        self.teardown_findings = [f"removed {HOSTILE}"]
        self.export_reports = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def run(self, command, *, stdin=None, timeout=None):
        return RunResult(
            exit_code=3, signal=None, timed_out=False, oom_killed=False,
            stdout=Captured(RAW_OUTPUT, False, len(RAW_OUTPUT)), stderr=Captured(RAW_OUTPUT, False, len(RAW_OUTPUT)),
            timings=Timings(0.0, 0.0, 0.0), usage=Usage(0.0, None, "supervisor"),
            violations=(Violation("egress", f"{HOSTILE} refused", "network.allow", {"host": HOSTILE}),), backend="fake",
        )

    def close(self):
        return 0.0


@pytest.fixture
def fake_runtime(monkeypatch):
    import contain.runtime

    monkeypatch.setenv("CONTAIN_NO_BOUNDARY_CACHE", "1")
    monkeypatch.setattr(contain.runtime, "Sandbox", _FakeSandbox)


def test_the_commands_output_is_raw_and_contains_own_lines_are_rendered(fake_runtime, capsysbinary):
    assert main(["run", "--", "true"]) == 3
    captured = capsysbinary.readouterr()
    assert captured.out == RAW_OUTPUT
    assert captured.err.startswith(RAW_OUTPUT)
    own = captured.err[len(RAW_OUTPUT):].decode("utf-8")
    assert_terminal_safe(own)
    assert own.splitlines() == [f"contain: egress: {HOSTILE_SHOWN} refused", f"contain: teardown: removed {HOSTILE_SHOWN}"]


def test_json_output_stays_exact(fake_runtime, capsys):
    assert main(["run", "--json", "--", "true"]) == 3
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["violations"][0]["message"] == f"{HOSTILE} refused"
    assert document["teardown"] == [f"removed {HOSTILE}"]
    assert_terminal_safe(captured.err)
