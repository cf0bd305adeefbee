"""Run the gated example agent: ``python examples/agents_sdk/demo.py [--db PATH] [--key PATH]``.

Without OPENAI_API_KEY (or with --scripted) a scripted model plays the agent: it asks to write a
report (gate: review), so the run stops with a pending request. Approve it in another terminal
(``contain review approve ID --db PATH``, or ``contain review serve --db PATH``), then run this
script again with ``--resume`` to continue the same run. With an API key and --model, a real
model drives the same tools.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agents import Agent, FunctionTool, RunConfig, function_tool, set_tracing_disabled

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gated_tools import GateApprovals, resume_gated, run_gated
from scripted_model import ScriptedModel

from contain.boundary import load_boundary
from contain.gate import Gate, GrantKey, ReviewStore

FILES: dict[str, str] = {"/work/notes.txt": "Q3 revenue up 4%."}


@function_tool
def read_file(path: str) -> str:
    """Read a text file."""
    return FILES.get(path, f"no such file: {path}")


@function_tool
def write_file(path: str, content: str) -> str:
    """Write a text file, replacing it."""
    FILES[path] = content
    return f"wrote {len(content)} characters to {path}"


def build_agent(approvals: GateApprovals, model: object) -> Agent[None]:
    tools: list[FunctionTool] = [approvals.gated(read_file), approvals.gated(write_file)]
    return Agent(name="writer", instructions="Summarise notes into /work/out/report.txt.", tools=list(tools),
                 model=model)  # type: ignore[arg-type]


def scripted(*, resuming: bool) -> ScriptedModel:
    # A resumed run continues after the write request: the scripted agent starts at its last turn.
    return ScriptedModel(
        [
            ("call", "read_file", {"path": "/work/notes.txt"}),
            ("call", "write_file", {"path": "/work/out/report.txt", "content": "Revenue up 4% in Q3."}),
            ("say", "Report written."),
        ],
        start=2 if resuming else 0,
    )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--db", default="agents-example-review.db")
    parser.add_argument("--key", default="agents-example-grant.key")
    parser.add_argument("--state", default="agents-example-run.json", help="where a waiting run is saved")
    parser.add_argument("--resume", action="store_true", help="continue the saved run")
    parser.add_argument("--model", help="a real model name (needs OPENAI_API_KEY); default: scripted")
    opts = parser.parse_args()
    set_tracing_disabled(True)
    boundary = load_boundary(Path(__file__).with_name("contain.yaml"))
    approvals = GateApprovals(
        gate=Gate.from_boundary(boundary),
        store=ReviewStore(opts.db),
        key=GrantKey.load_or_create(opts.key),
        principal=boundary.principal or "alice",
    )
    model = opts.model or scripted(resuming=opts.resume)
    agent = build_agent(approvals, model)
    config = RunConfig(tracing_disabled=True)
    state_file = Path(opts.state)
    if opts.resume:
        run = await resume_gated(agent, state_file.read_text(), approvals, run_config=config)
    else:
        run = await run_gated(agent, "Write the report.", approvals, run_config=config)
    if run.pending:
        state_file.write_text(run.state or "")
        print(f"waiting for review: {', '.join(run.pending)}")
        print(f"approve with: contain review approve {run.pending[0]} --db {opts.db} --key {opts.key}")
        print("then run again with --resume")
        return 3
    assert run.result is not None
    print(run.result.final_output)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
