"""A model that needs no API: it replays a script of tool calls and answers.

The Agents SDK accepts any ``agents.models.interface.Model``; this one returns, turn by turn, the
next step of its script: ``("call", tool_name, arguments)`` or ``("say", text)``. It is what the
example runs offline and what the test drives. A real model plugs in the same way.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


class ScriptedModel(Model):
    """Replays ``script``; records every input it was given in ``seen``."""

    def __init__(self, script: list[tuple[Any, ...]], *, start: int = 0) -> None:
        self.script = list(script)
        self.seen: list[Any] = []
        self._turn = start

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        self.seen.append(input)
        if self._turn >= len(self.script):
            raise AssertionError("the scripted model ran out of turns")
        step = self.script[self._turn]
        self._turn += 1
        if step[0] == "call":
            _, name, arguments = step
            item: Any = ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{self._turn}",
                call_id=f"call_{self._turn}",
                name=name,
                arguments=json.dumps(arguments),
                status="completed",
            )
        else:
            item = ResponseOutputMessage(
                type="message",
                id=f"msg_{self._turn}",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=step[1], annotations=[])],
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")
