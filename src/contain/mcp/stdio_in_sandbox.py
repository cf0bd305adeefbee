"""A stdio MCP upstream launched inside contain's sandbox, as an ``mcp`` client transport.

``Sandbox.run`` captures output until a command ends; an MCP stdio server lives for the whole
session, so this uses ``Sandbox.spawn`` (live pipes, see ``contain.runtime.process``). The sandbox
is built from the gateway's boundary manifest: the upstream sees only the files the manifest
names, reaches only the hosts it allows (through the egress proxy), under its seccomp filter,
Landlock ruleset and cgroup budgets. Its environment is the boundary's plus the upstream's
``env:``; nothing of the gateway's environment leaks in.

Enforced: the process and everything it starts live in the sandbox and die with it; when the
transport closes, the process is killed and the sandbox torn down (no process, mount or cgroup
left). The wall-clock budget (``resources.wall``) bounds the upstream's lifetime: the runtime
kills it at the deadline, and the gateway then reports the upstream as failed.

The upstream's stderr reaches the gateway's stderr (a human's terminal) line by line through
``StderrLines``: each line goes through ``contain.visible_text.for_terminal`` (no ESC sequence,
OSC 52, bidi override or carriage return acts on the terminal), is prefixed with ``[label]`` so
it cannot pass for the gateway's own output, and is cut at ``MAX_STDERR_LINE_BYTES`` with a marker;
a partial line never holds more than that in memory.

Not enforced: anything about the MCP messages themselves (that is the gateway's job), and output
size: the runtime does not cap a spawned process's stdout; lines longer than ``MAX_LINE_BYTES``
end the session (a flood cannot fill the gateway's memory). The number of stderr lines relayed is
not capped (memory is bounded, terminal scroll-back is not).

``ProcessLauncher`` is the seam: ``SandboxLauncher`` is the real one; tests can pass a launcher of
plain host processes to exercise the framing without a sandbox.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import BinaryIO, Protocol

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from contain._log import LazyLogger
from contain.boundary.model import Boundary
from contain.visible_text import for_terminal

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_STDERR_LINE_BYTES",
    "HostProcessLauncher",
    "ProcessLauncher",
    "SandboxLauncher",
    "SpawnedProcess",
    "StderrLines",
    "process_stdio_transport",
]

log = LazyLogger(__name__)

MAX_LINE_BYTES = 16 * 1024 * 1024  # one JSON-RPC message; server-everything's largest is ~2 MiB
_READ_CHUNK = 65536
MAX_STDERR_LINE_BYTES = 4096  # one relayed stderr line: a log or traceback line, not a data dump


class StderrLines:
    """Turns an upstream's stderr bytes into rendered, bounded lines for the gateway's terminal.

    ``feed(chunk)`` returns the complete lines the chunk finished, each ``[label] <text>\\n`` with
    the text through ``for_terminal`` (tabs kept, everything else that could act on a terminal
    escaped). A line longer than ``max_line_bytes`` is relayed cut, with a marker, and the rest of it
    up to the next newline is dropped, so the buffer never exceeds ``max_line_bytes``.
    ``finish()`` returns the last unterminated line, if any.
    """

    def __init__(self, label: str, *, max_line_bytes: int = MAX_STDERR_LINE_BYTES) -> None:
        self._prefix = f"[{for_terminal(label)}] "
        self._max = max_line_bytes
        self._buffer = b""
        self._dropping = False  # inside a line already relayed cut: discard until its newline

    def _render(self, line: bytes, *, cut: bool = False) -> str:
        text = for_terminal(line.decode("utf-8", errors="replace"), keep_newlines=True)
        return f"{self._prefix}{text}{f' [line cut at {self._max} bytes]' if cut else ''}\n"

    def feed(self, chunk: bytes) -> list[str]:
        """The rendered lines completed by ``chunk`` (possibly none)."""
        out = []
        self._buffer += chunk
        while True:
            line, newline, rest = self._buffer.partition(b"\n")
            if not newline:
                break
            self._buffer = rest
            if self._dropping:
                self._dropping = False
            else:
                out.append(self._render(line[: self._max], cut=len(line) > self._max))
        if len(self._buffer) > self._max:
            if not self._dropping:
                out.append(self._render(self._buffer[: self._max], cut=True))
            self._dropping, self._buffer = True, b""
        return out

    def finish(self) -> list[str]:
        """The last line if the stream ended without a newline."""
        line, self._buffer = self._buffer, b""
        return [self._render(line)] if line and not self._dropping else []


def _write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


class SpawnedProcess(Protocol):
    """A running command with the host ends of its pipes (``SandboxProcess`` or a Popen)."""

    stdin: BinaryIO
    stdout: BinaryIO
    stderr: BinaryIO | None

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...


class ProcessLauncher(Protocol):
    """Starts one command with live pipes, and cleans up after it (both blocking)."""

    def launch(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None) -> SpawnedProcess: ...

    def close(self) -> None: ...


class SandboxLauncher:
    """Launches the command with ``Sandbox(boundary).spawn``; ``close`` tears the sandbox down."""

    def __init__(self, boundary: Boundary) -> None:
        self.boundary = boundary
        self._sandbox: object | None = None
        self._process: object | None = None

    def launch(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None) -> SpawnedProcess:
        from contain.runtime import Sandbox

        sandbox = Sandbox(self.boundary)
        sandbox.start()  # raises SandboxStartError / UnsupportedHost: fail closed, no weaker fallback
        try:
            process = sandbox.spawn(list(argv), env=dict(env), cwd=cwd, keep_stderr=True)
        except BaseException:
            sandbox.close()
            raise
        self._sandbox, self._process = sandbox, process
        return process

    def close(self) -> None:
        process, sandbox = self._process, self._sandbox
        self._process = self._sandbox = None
        try:
            if process is not None:
                process.close()  # type: ignore[attr-defined]
        finally:
            if sandbox is not None:
                sandbox.close()  # type: ignore[attr-defined]


class HostProcessLauncher:
    """Launches the command as a plain host process (tests of the framing; not a sandbox)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def launch(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None) -> SpawnedProcess:
        process = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env), cwd=cwd
        )
        self._process = process
        return process  # type: ignore[return-value]  # Popen's pipes are Optional in typeshed

    def close(self) -> None:
        process = self._process
        self._process = None
        if process is not None:
            process.kill()
            process.wait(timeout=5)
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


async def _read_chunks(fd: int) -> AsyncIterator[bytes]:
    while True:
        await anyio.wait_readable(fd)
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            continue
        except OSError:
            return
        if not data:
            return
        yield data


async def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        await anyio.wait_writable(fd)
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[written:]


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


@asynccontextmanager
async def process_stdio_transport(
    launcher: ProcessLauncher,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    label: str = "upstream",
    stderr_sink: Callable[[str], None] = _write_stderr,
) -> AsyncIterator[TransportStreams]:
    """Launch ``argv`` with ``launcher`` and speak newline-delimited JSON-RPC over its pipes.

    Usable wherever the ``mcp`` SDK takes a transport: ``mcp.Client(process_stdio_transport(...))``.
    The process's stderr goes to ``stderr_sink`` (the gateway's stderr by default) one rendered,
    bounded line at a time (see ``StderrLines``).

    Raises:
        SandboxStartError, UnsupportedHost: from the launcher (the sandbox could not start).
    """
    process = await anyio.to_thread.run_sync(lambda: launcher.launch(argv, env=dict(env or {}), cwd=cwd))
    stdin_fd, stdout_fd = process.stdin.fileno(), process.stdout.fileno()
    stderr_fd = process.stderr.fileno() if process.stderr is not None else None
    for fd in (stdin_fd, stdout_fd, stderr_fd):
        if fd is not None:
            os.set_blocking(fd, False)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def stdout_reader() -> None:
        buffer = b""
        async with read_writer:
            async for chunk in _read_chunks(stdout_fd):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        await read_writer.send(_parse(line))
                if len(buffer) > MAX_LINE_BYTES:
                    log.warning("%s sent a line over %d bytes; closing the session", label, MAX_LINE_BYTES)
                    return

    async def stdin_writer() -> None:
        async with write_reader:
            async for message in write_reader:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                try:
                    await _write_all(stdin_fd, data)
                except OSError:
                    await read_writer.aclose()  # the process is gone: end the session, don't hang
                    return

    async def stderr_relay() -> None:
        assert stderr_fd is not None
        lines = StderrLines(label)
        async for chunk in _read_chunks(stderr_fd):
            for line in lines.feed(chunk):
                stderr_sink(line)
        for line in lines.finish():
            stderr_sink(line)

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(stdout_reader)
            tasks.start_soon(stdin_writer)
            if stderr_fd is not None:
                tasks.start_soon(stderr_relay)
            try:
                yield read_stream, write_stream
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(launcher.close)
            for stream in (read_stream, write_stream, read_writer, write_reader):
                await stream.aclose()
