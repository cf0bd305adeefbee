"""Fakes for the fleet's unit tests: sandboxes that record calls, and a canned RunResult."""

from __future__ import annotations

import threading
from typing import Any

from contain.errors import FileTransferError, SandboxLost
from contain.runtime.result import Captured, RunResult, Timings, Usage


def run_result(exit_code: int = 0, stdout: bytes = b"") -> RunResult:
    return RunResult(
        exit_code=exit_code, signal=None, timed_out=False, oom_killed=False,
        stdout=Captured(stdout, False, len(stdout)), stderr=Captured(b"", False, 0),
        timings=Timings(0.0, 0.01, 0.0), usage=Usage(0.0, None, "none"), violations=(), backend="process",
    )


class FakeSandbox:
    """Records what the node does with it. ``block_run`` makes run() wait until destroy()."""

    def __init__(self, name: str = "sb", *, files: dict[str, bytes] | None = None, block_run: bool = False,
                 run_error: BaseException | None = None) -> None:
        self.name = name
        self.scratch_paths = ("/work",)
        self.files = dict(files or {})
        self.calls: list[tuple[Any, ...]] = []
        self.started = self.closed = self.destroyed = False
        self.running = threading.Event()
        self._destroy = threading.Event()
        self._block_run = block_run
        self._run_error = run_error

    def start(self) -> None:
        self.started = True

    def put_file(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        self.calls.append(("put_file", path, data, mode))
        self.files[path] = data

    def run(self, argv: list[str], *, timeout: float | None = None, env: dict[str, str] | None = None) -> RunResult:
        self.calls.append(("run", tuple(argv), timeout, dict(env or {})))
        self.running.set()
        if self._run_error is not None:
            raise self._run_error
        if self._block_run:
            self._destroy.wait(30)
            raise SandboxLost("this sandbox is no longer usable: destroyed by its owner", "start a new Sandbox")
        return run_result(stdout=b"ran")

    def get_file(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise FileTransferError(f"{path} does not exist in the sandbox", "write it first") from None

    def destroy(self) -> None:
        self.destroyed = True
        self._destroy.set()

    def close(self) -> float:
        self.closed = True
        return 0.0
