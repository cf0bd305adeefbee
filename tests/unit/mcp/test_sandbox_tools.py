"""``contain mcp serve``'s tools against a recording fake sandbox: argv, files, validation, result."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest

from contain.boundary import Boundary
from contain.errors import SandboxStartError
from contain.mcp.sandbox_tools import LANGUAGES, TOOLS, SandboxTools
from contain.runtime.result import Captured, RunResult, Timings, Usage, Violation


def _result(exit_code: int = 0, violations: tuple[Violation, ...] = ()) -> RunResult:
    return RunResult(
        exit_code=exit_code,
        signal=None,
        timed_out=False,
        oom_killed=False,
        stdout=Captured(b"out\n", False, 4),
        stderr=Captured(b"", False, 0),
        timings=Timings(0.1, 0.2, 0.0),
        usage=Usage(0.01, None, "supervisor"),
        violations=violations,
        backend="process",
    )


class FakeSandbox:
    instances: ClassVar[list[FakeSandbox]] = []

    def __init__(self, boundary: Boundary) -> None:
        self.boundary = boundary
        self.scratch_paths = ("/work",)
        self.files: dict[str, bytes] = {}
        self.runs: list[tuple[list[str], dict[str, Any]]] = []
        self.closed = False
        self.next_result = _result()
        FakeSandbox.instances.append(self)

    def put_file(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def run(self, argv: list[str], **kwargs: Any) -> RunResult:
        self.runs.append((argv, kwargs))
        return self.next_result

    def close(self) -> float:
        self.closed = True
        return 0.0


@pytest.fixture
def tools():
    FakeSandbox.instances = []
    return SandboxTools(Boundary(), sandbox_factory=FakeSandbox)


def _call(tools: SandboxTools, name: str, arguments: dict[str, Any]) -> Any:
    return anyio.run(tools.call_tool, name, arguments)


def test_run_command_runs_argv_with_stdin_in_a_fresh_sandbox_that_is_closed(tools):
    result = _call(tools, "run_command", {"argv": ["cat"], "stdin": "hi"})
    (sandbox,) = FakeSandbox.instances
    assert sandbox.runs == [(["cat"], {"stdin": b"hi"})] and sandbox.closed
    assert not result.is_error
    assert result.structured_content["exit_code"] == 0 and result.structured_content["stdout"] == "out\n"
    assert "exit status 0" in result.content[0].text


@pytest.mark.parametrize("language", LANGUAGES, ids=lambda lang: lang.name)
def test_run_code_writes_the_program_and_files_under_scratch(tools, language):
    _call(tools, "run_code", {"language": language.name, "code": "print(1)", "files": {"d/x.csv": "a,b"}})
    (sandbox,) = FakeSandbox.instances
    program = f"/work/{language.filename}"
    assert sandbox.files == {"/work/d/x.csv": b"a,b", program: b"print(1)"}
    assert sandbox.runs == [([*language.argv, program], {"cwd": "/work"})]


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", ".", "a/../../b"])
def test_run_code_refuses_file_names_outside_scratch(tools, name):
    result = _call(tools, "run_code", {"language": "sh", "code": "true", "files": {name: "x"}})
    assert result.is_error and "relative path" in result.content[0].text
    assert FakeSandbox.instances[0].runs == [] and FakeSandbox.instances[0].closed


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("run_command", {"argv": []}),
        ("run_command", {"argv": "ls"}),
        ("run_command", {"argv": ["ls"], "cwd": "/"}),
        ("run_code", {"language": "cobol", "code": ""}),
        ("run_code", {"language": "sh"}),
        ("nope", {}),
    ],
)
def test_invalid_calls_start_no_sandbox(tools, name, arguments):
    assert _call(tools, name, arguments).is_error
    assert FakeSandbox.instances == []


def test_failures_and_violations_are_error_results_that_say_what_was_stopped(tools):
    FakeSandbox.instances = []

    class Failing(FakeSandbox):
        def __init__(self, boundary: Boundary) -> None:
            super().__init__(boundary)
            self.next_result = _result(1, (Violation("egress", "example.com:443 is not in network.allow"),))

    result = _call(SandboxTools(Boundary(), sandbox_factory=Failing), "run_command", {"argv": ["curl", "x"]})
    assert result.is_error
    assert "stopped by the boundary (egress): example.com:443" in result.content[0].text
    assert result.structured_content["violations"][0]["kind"] == "egress"


def test_a_sandbox_that_cannot_start_is_an_error_result_with_the_fix(tools):
    def broken(boundary: Boundary) -> Any:
        raise SandboxStartError("bwrap is missing", "install bubblewrap")

    result = _call(SandboxTools(Boundary(), sandbox_factory=broken), "run_command", {"argv": ["true"]})
    assert result.is_error and "bwrap is missing" in result.content[0].text and "install" in result.content[0].text


def test_the_tools_listed_are_the_table():
    assert [t.name for t in anyio.run(SandboxTools(Boundary(), sandbox_factory=FakeSandbox).list_tools)] == [
        t.name for t in TOOLS
    ]
