"""``contain mcp serve``: the sandbox itself as MCP tools, ``run_command`` and ``run_code``.

Each call gets a fresh ``Sandbox`` built from the manifest's boundary, runs one command, and is
torn down, so nothing a call leaves behind (files, processes) is seen by the next. The result is
the runtime's ``RunResult``: exit status, output (capped by ``resources.output``), violations
(what the boundary stopped), egress decisions, usage and timings, as structured content plus a
short text for models that read only text.

Enforced: everything the runtime enforces for the boundary (files, network, seccomp, Landlock,
budgets); arguments are validated against the tools' schemas before a sandbox starts; ``files``
of ``run_code`` land under the first scratch path only (relative paths, no ``..``).

Not enforced: which commands an agent may run inside the boundary (put the gateway in front of
this server with ``tools:`` rules for that), and concurrency limits (each call is its own sandbox,
bounded by the host's CPU and the boundary's budgets; calls run one at a time per server).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types

from contain.boundary.model import Boundary
from contain.errors import ContainError
from contain.gate.schema import validate_arguments

__all__ = ["LANGUAGES", "TOOLS", "Language", "SandboxTools"]

MAX_FILES = 64


@dataclass(frozen=True)
class Language:
    """How ``run_code`` runs one language: the interpreter argv (the file is appended)."""

    name: str
    argv: tuple[str, ...]
    filename: str
    reason: str


LANGUAGES: tuple[Language, ...] = (
    Language("python", ("python3", "-I"), "main.py", "isolated mode: no user site, no PYTHON* variables"),
    Language("sh", ("sh",), "main.sh", "POSIX shell from the host's /usr"),
    Language("bash", ("bash", "--noprofile", "--norc"), "main.sh", "no rc files: the script is all that runs"),
    Language("node", ("node",), "main.js", "Node.js from the host's /usr"),
)

_RESULT_SCHEMA_NOTE = "Returns exit status, stdout, stderr, violations (what the boundary stopped) and usage."

TOOLS: tuple[types.Tool, ...] = (
    types.Tool(
        name="run_command",
        description="Run one command in a fresh sandbox with the configured boundary. " + _RESULT_SCHEMA_NOTE,
        input_schema={
            "type": "object",
            "properties": {
                "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4096},
                "stdin": {"type": "string", "maxLength": 16 * 1024 * 1024},
            },
            "required": ["argv"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="run_code",
        description="Run a program in a fresh sandbox with the configured boundary. " + _RESULT_SCHEMA_NOTE,
        input_schema={
            "type": "object",
            "properties": {
                "language": {"enum": [lang.name for lang in LANGUAGES]},
                "code": {"type": "string", "maxLength": 16 * 1024 * 1024},
                "files": {
                    "type": "object",
                    "description": "Extra files by relative path, e.g. {\"data.csv\": \"a,b\\n1,2\\n\"}.",
                    "additionalProperties": {"type": "string"},
                    "maxProperties": MAX_FILES,
                },
            },
            "required": ["language", "code"],
            "additionalProperties": False,
        },
    ),
)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _summary(result: Any) -> str:
    data = result.to_dict()
    lines = [f"exit status {data['status']}" + (" (timed out)" if data["timed_out"] else "")]
    for violation in data["violations"]:
        lines.append(f"stopped by the boundary ({violation['kind']}): {violation['message']}")
    for name in ("stdout", "stderr"):
        if data[name]:
            lines.append(f"--- {name} ({data[f'{name}_encoding']}) ---\n{data[name]}")
    return "\n".join(lines)


def _relative_file(scratch: str, name: str) -> str | None:
    normal = posixpath.normpath(name)
    if not name or name.startswith("/") or normal.startswith("..") or "\x00" in name or normal == ".":
        return None
    return posixpath.join(scratch, normal)


class SandboxTools:
    """The two tools over a boundary; ``sandbox_factory`` builds a started-on-use ``Sandbox``.

    Args:
        boundary: what every call's sandbox may touch.
        sandbox_factory: ``Sandbox`` by default; tests may pass a fake with run/put_file/close.
    """

    def __init__(self, boundary: Boundary, *, sandbox_factory: Callable[[Boundary], Any] | None = None) -> None:
        self.boundary = boundary
        if sandbox_factory is None:
            from contain.runtime import Sandbox

            sandbox_factory = Sandbox
        self._factory = sandbox_factory
        self._lock = anyio.Lock()

    async def list_tools(self) -> list[types.Tool]:
        return list(TOOLS)

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        tool = next((t for t in TOOLS if t.name == name), None)
        if tool is None:
            return _error(f"unknown tool {name!r}; this server offers run_command and run_code")
        args = dict(arguments or {})
        check = validate_arguments(args, tool.input_schema)
        if not check.ok:
            return _error(f"invalid arguments: {check.reason}")
        async with self._lock:
            try:
                result = await anyio.to_thread.run_sync(lambda: self._run(name, args))
            except ContainError as exc:
                return _error(f"contain: {exc.cause}" + (f" (fix: {exc.fix})" if exc.fix else ""))
        if isinstance(result, types.CallToolResult):
            return result
        return types.CallToolResult(
            content=[types.TextContent(text=_summary(result))],
            structured_content=result.to_dict(),
            is_error=not result.ok,
        )

    def _run(self, name: str, args: dict[str, Any]) -> Any:
        sandbox = self._factory(self.boundary)
        try:
            scratch = sandbox.scratch_paths[0]
            if name == "run_command":
                stdin = args["stdin"].encode() if "stdin" in args else None
                return sandbox.run(list(args["argv"]), stdin=stdin)
            language = next(lang for lang in LANGUAGES if lang.name == args["language"])
            for relative, content in (args.get("files") or {}).items():
                target = _relative_file(scratch, relative)
                if target is None:
                    return _error(f"file name {relative!r} must be a relative path without '..'")
                sandbox.put_file(target, content.encode())
            program = posixpath.join(scratch, language.filename)
            sandbox.put_file(program, args["code"].encode())
            return sandbox.run([*language.argv, program], cwd=scratch)
        finally:
            sandbox.close()
