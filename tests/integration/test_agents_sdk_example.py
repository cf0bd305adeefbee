"""The Agents SDK example (examples/agents_sdk) with a scripted model: no API, no network.

The SDK's approval callback asks the gate; a review becomes a pending request in the store; a grant
resumes the run; the tool itself checks the grant again when it runs.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents", reason="openai-agents is not installed")

from agents import Agent, RunConfig, function_tool, set_tracing_disabled

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agents_sdk"
sys.path.insert(0, str(EXAMPLE))

from gated_tools import GateApprovals, resume_gated, run_gated  # noqa: E402
from scripted_model import ScriptedModel  # noqa: E402

from contain.boundary import load_boundary  # noqa: E402
from contain.gate import Gate, GrantKey, GrantScope, ReviewState, ReviewStore  # noqa: E402

CONFIG = RunConfig(tracing_disabled=True)


@pytest.fixture
def world(tmp_path):
    set_tracing_disabled(True)
    files: dict[str, str] = {"/work/notes.txt": "Q3 revenue up 4%."}
    ran: list[tuple[str, dict]] = []

    @function_tool
    def read_file(path: str) -> str:
        """Read a text file."""
        ran.append(("read_file", {"path": path}))
        return files.get(path, "missing")

    @function_tool
    def write_file(path: str, content: str) -> str:
        """Write a text file, replacing it."""
        ran.append(("write_file", {"path": path, "content": content}))
        files[path] = content
        return f"wrote {path}"

    @function_tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(("delete_file", {"path": path}))
        files.pop(path, None)
        return "deleted"

    approvals = GateApprovals(
        gate=Gate.from_boundary(load_boundary(EXAMPLE / "contain.yaml")),
        store=ReviewStore(tmp_path / "review.db"),
        key=GrantKey.load_or_create(tmp_path / "grant.key"),
        principal="alice",
    )
    tools = [approvals.gated(t) for t in (read_file, write_file, delete_file)]

    def agent(script):
        model = ScriptedModel(script)
        return Agent(name="writer", instructions="x", tools=tools, model=model), model

    return approvals, files, ran, agent


WRITE = {"path": "/work/out/report.txt", "content": "Revenue up 4%."}


def test_allowed_tool_runs_without_approval(world):
    approvals, _files, ran, agent = world
    a, _ = agent([("call", "read_file", {"path": "/work/notes.txt"}), ("say", "done")])
    run = asyncio.run(run_gated(a, "go", approvals, run_config=CONFIG))
    assert run.pending == [] and run.result.final_output == "done"
    assert ran == [("read_file", {"path": "/work/notes.txt"})]
    assert approvals.store.list() == []


def test_review_becomes_a_pending_request_and_a_grant_resumes_the_run(world):
    approvals, files, ran, agent = world
    a, _model = agent([("call", "write_file", WRITE), ("say", "written")])
    run = asyncio.run(run_gated(a, "go", approvals, run_config=CONFIG))
    assert run.result is None and len(run.pending) == 1 and run.state
    request = approvals.store.get(run.pending[0])
    assert (request.status, request.tool, request.arguments) == (ReviewState.PENDING, "write_file", WRITE)
    assert ran == [] and "/work/out/report.txt" not in files

    # Resuming before anyone decides keeps waiting on the same request.
    again = asyncio.run(resume_gated(a, run.state, approvals, run_config=CONFIG))
    assert again.pending == run.pending and ran == []

    approved = approvals.store.approve(
        request.request_id, key=approvals.key, scope=GrantScope.once(now=approvals.store.now()), reviewer="bob"
    )
    resumed = asyncio.run(resume_gated(a, run.state, approvals, run_config=CONFIG))
    assert resumed.pending == [] and resumed.result.final_output == "written"
    assert ran == [("write_file", WRITE)] and files["/work/out/report.txt"] == "Revenue up 4%."
    assert approvals.store.uses.used(approved.grant_id) == 1


def test_a_grant_for_other_arguments_does_not_approve_this_call(world):
    approvals, _files, ran, agent = world
    a, _ = agent([("call", "write_file", WRITE)])
    first = asyncio.run(run_gated(a, "go", approvals, run_config=CONFIG))
    approvals.store.approve(first.pending[0], key=approvals.key, scope=GrantScope.once(now=approvals.store.now()),
                            reviewer="bob")
    other = {**WRITE, "content": "Revenue up 40%."}
    b, _ = agent([("call", "write_file", other)])
    second = asyncio.run(run_gated(b, "go", approvals, run_config=CONFIG))
    assert len(second.pending) == 1 and second.pending != first.pending
    assert ran == []


def test_reviewer_denial_rejects_the_call_and_the_model_is_told_why(world):
    approvals, _files, ran, agent = world
    a, model = agent([("call", "write_file", WRITE), ("say", "ok, not writing")])
    run = asyncio.run(run_gated(a, "go", approvals, run_config=CONFIG))
    approvals.store.deny(run.pending[0], reviewer="bob", reason="not this quarter")
    resumed = asyncio.run(resume_gated(a, run.state, approvals, run_config=CONFIG))
    assert resumed.result.final_output == "ok, not writing"
    assert ran == []
    assert "not this quarter" in json.dumps(model.seen[-1])


def test_gate_denial_and_out_of_bounds_paths_never_run(world):
    approvals, files, ran, agent = world
    a, model = agent(
        [
            ("call", "delete_file", {"path": "/work/notes.txt"}),
            ("call", "write_file", {"path": "/etc/cron.d/x", "content": "* * * * * root sh"}),
            ("say", "gave up"),
        ]
    )
    run = asyncio.run(run_gated(a, "go", approvals, run_config=CONFIG))
    assert run.result.final_output == "gave up"
    assert ran == [] and "/work/notes.txt" in files
    seen = json.dumps(model.seen)
    assert "tools[2] (deny delete_file) denies this call" in seen
    assert "is not under /work/out" in seen
    assert approvals.store.list() == []


def test_the_tool_checks_the_grant_again_when_it_runs(world):
    approvals, _files, ran, agent = world
    from agents.tool_context import ToolContext

    write = next(t for t in agent([])[0].tools if t.name == "write_file")
    payload = json.dumps(WRITE)
    ctx = ToolContext(context=None, tool_name="write_file", tool_call_id="direct", tool_arguments=payload,
                      run_config=CONFIG)
    # Called directly (as if the SDK's approval were bypassed): no grant, no write.
    out = asyncio.run(write.on_invoke_tool(ctx, payload))
    assert "needs a reviewer's approval" in out and ran == []
    a, _ = agent([("call", "write_file", WRITE)])
    run = asyncio.run(run_gated(a, "go", approvals, run_config=CONFIG))
    approvals.store.approve(run.pending[0], key=approvals.key, scope=GrantScope.once(now=approvals.store.now()),
                            reviewer="bob")
    assert asyncio.run(write.on_invoke_tool(ctx, payload)) == "wrote /work/out/report.txt"
    # Single use: a second direct invocation is refused.
    assert "approval" in asyncio.run(write.on_invoke_tool(ctx, payload))
    assert ran == [("write_file", WRITE)]
