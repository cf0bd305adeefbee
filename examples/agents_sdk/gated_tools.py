"""The OpenAI Agents SDK's tool approvals, decided by contain's gate.

How it fits together:

* ``GateApprovals.gated(tool)`` wraps a ``FunctionTool``. Its ``needs_approval`` callback asks the
  gate: only an ``allow`` runs without approval. Its ``on_invoke_tool`` asks the gate again where
  the action happens: ``allow`` runs; ``deny`` returns the reason instead of running; ``review``
  runs only with a grant for exactly these arguments, verified (and one use consumed) right there.
* ``run_gated`` runs the agent. When the run stops for approvals, each pending tool call is
  settled: ``allow`` approved, ``deny`` rejected with the gate's reason; ``review`` becomes a
  pending request in the review store (``contain review list``) unless a reviewer already approved
  (a grant exists: approved) or denied it (rejected with the reviewer's reason).
* While anything is pending, ``run_gated`` returns the serialised run state and the request ids.
  After a reviewer decides (``contain review approve ID`` or the web page), ``resume_gated``
  continues the same run from that state.

The SDK's approval is a UI event keyed by a call id; here the approval is a grant bound to the
principal, the tool definition digest and the argument digest, checked again when the tool runs.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner, RunState
from agents.items import ToolApprovalItem
from agents.result import RunResult

from contain.boundary import ToolVerdict
from contain.gate import Gate, GrantKey, ReviewStore, ToolCall, argument_digest, tool_digest, verify_grant


@dataclass
class GateApprovals:
    """The gate, the review store and the grant key, for one principal."""

    gate: Gate
    store: ReviewStore
    key: GrantKey
    principal: str
    server: str = ""

    def __post_init__(self) -> None:
        self._tools: dict[str, FunctionTool] = {}

    def call_for(self, tool: FunctionTool, arguments: dict[str, Any]) -> ToolCall:
        """The gate's view of a call to ``tool`` with ``arguments``."""
        digest = tool_digest(name=tool.name, description=tool.description, input_schema=tool.params_json_schema)
        return ToolCall(
            principal=self.principal,
            server=self.server,
            tool=tool.name,
            tool_digest=digest,
            arguments=arguments,
            input_schema=tool.params_json_schema,
        )

    def gated(self, tool: FunctionTool) -> FunctionTool:
        """A copy of ``tool`` whose approval and invocation both go through the gate."""
        original = tool.on_invoke_tool

        async def needs_approval(_ctx: Any, params: dict[str, Any], _call_id: str) -> bool:
            return self.gate.evaluate(self.call_for(tool, params)).verdict is not ToolVerdict.ALLOW

        async def on_invoke_tool(ctx: Any, input_json: str) -> Any:
            try:
                arguments = json.loads(input_json or "{}")
            except ValueError as exc:
                return f"refused by contain's gate: arguments are not JSON ({exc})"
            call = self.call_for(tool, arguments)
            decision = self.gate.evaluate(call)
            if decision.verdict is ToolVerdict.DENY:
                return f"refused by contain's gate ({decision.rule_id}): {decision.reason}"
            if decision.verdict is ToolVerdict.REVIEW:
                token = self.store.grant_for(call)
                if token is None:
                    return "refused by contain's gate: this call needs a reviewer's approval, and there is none"
                check = verify_grant(
                    self.key,
                    token,
                    principal=call.principal,
                    tool=call.tool,
                    tool_digest=call.tool_digest,
                    argument_digest=argument_digest(call.arguments),
                    uses=self.store.uses,
                )
                if not check.ok:
                    return f"refused by contain's gate: {check.reason}"
            return await original(ctx, input_json)

        wrapped = dataclasses.replace(tool, needs_approval=needs_approval, on_invoke_tool=on_invoke_tool)
        self._tools[tool.name] = tool
        return wrapped

    def settle(self, state: RunState[Any, Any], interruptions: list[ToolApprovalItem]) -> list[str]:
        """Approve or reject what can be decided now; return the ids of requests still pending."""
        pending: list[str] = []
        for item in interruptions:
            tool = self._tools.get(item.name or "")
            if tool is None:
                state.reject(item, rejection_message="contain's gate does not know this tool")
                continue
            try:
                arguments = json.loads(item.arguments or "{}")
            except ValueError:
                state.reject(item, rejection_message="arguments are not JSON")
                continue
            call = self.call_for(tool, arguments)
            decision = self.gate.evaluate(call)
            if decision.verdict is ToolVerdict.ALLOW:
                state.approve(item)
            elif decision.verdict is ToolVerdict.DENY:
                state.reject(item, rejection_message=f"refused by contain's gate: {decision.reason}")
            elif self.store.grant_for(call) is not None:
                state.approve(item)  # the tool verifies the grant and consumes the use when it runs
            else:
                latest = self.store.latest_for(call)
                if latest is not None and latest.status.value == "denied":
                    state.reject(item, rejection_message=f"a reviewer denied this call: {latest.review_reason}")
                else:
                    pending.append(self.store.submit(call, decision).request_id)
        return pending


@dataclass
class GatedRun:
    """Where a gated run stands: finished (``result``), or waiting for reviewers (``pending``)."""

    result: RunResult | None
    pending: list[str]
    state: str | None


async def _drive(
    agent: Agent[Any], state: RunState[Any, Any], approvals: GateApprovals, run_config: RunConfig | None
) -> GatedRun:
    while True:
        pending = approvals.settle(state, state.get_interruptions())
        if pending:
            return GatedRun(None, pending, state.to_string())
        result = await Runner.run(agent, state, run_config=run_config)
        if not result.interruptions:
            return GatedRun(result, [], None)
        state = result.to_state()


async def run_gated(
    agent: Agent[Any], prompt: str, approvals: GateApprovals, *, run_config: RunConfig | None = None
) -> GatedRun:
    """Run ``agent`` on ``prompt`` with every tool approval decided by the gate and the reviewers."""
    result = await Runner.run(agent, prompt, run_config=run_config)
    if not result.interruptions:
        return GatedRun(result, [], None)
    return await _drive(agent, result.to_state(), approvals, run_config)


async def resume_gated(
    agent: Agent[Any], state: str, approvals: GateApprovals, *, run_config: RunConfig | None = None
) -> GatedRun:
    """Continue a run that was waiting for reviewers (``GatedRun.state``)."""
    restored = await RunState.from_string(agent, state)
    return await _drive(agent, restored, approvals, run_config)
