"""A long-lived command in a sandbox with live pipes: what ``Sandbox.spawn`` returns.

``Sandbox.run`` captures output until the command ends; a stdio server (an MCP upstream, a
language server) needs its pipes while it runs. ``SandboxProcess`` gives the caller the host ends
of the command's stdin and stdout (and stderr, or /dev/null), and a waiter thread that enforces
the wall-clock limit and learns the exit from the supervisor. Everything else is the same as a run:
the supervisor forks the command under the sandbox's seccomp filter, Landlock ruleset, rlimits and
cgroup, and kills every process of the run when the command's main process ends.

Output is not capped here: the caller reads it. The sandbox serves nothing else while a spawned
process runs (one command at a time per sandbox).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

from contain.errors import ContainError
from contain.runtime.backend import CommandControl
from contain.runtime.supervisor_channel import Exited

__all__ = ["SandboxProcess"]

_KILL_GRACE_S = 5.0


class SandboxProcess:
    """A command running in a sandbox, with live pipes.

    Attributes:
        stdin: writable, the command's standard input (close it to send EOF).
        stdout: readable, the command's standard output.
        stderr: readable, or None when stderr was discarded.
        returncode: the exit code, -N for signal N, None while running (like subprocess).
        timed_out: True when the wall-clock limit killed it.
    """

    def __init__(
        self,
        channel: CommandControl,
        *,
        stdin: int,
        stdout: int,
        stderr: int | None,
        deadline: float,
        on_lost: Callable[[str], None],
        on_done: Callable[[], None],
    ) -> None:
        self.stdin: BinaryIO = os.fdopen(stdin, "wb", buffering=0)
        self.stdout: BinaryIO = os.fdopen(stdout, "rb", buffering=0)
        self.stderr: BinaryIO | None = os.fdopen(stderr, "rb", buffering=0) if stderr is not None else None
        self.returncode: int | None = None
        self.timed_out = False
        self._channel = channel
        self._deadline = deadline
        self._on_lost = on_lost
        self._on_done = on_done
        self._exited: Exited | None = None
        self._done = threading.Event()
        self._waiter = threading.Thread(target=self._wait_for_exit, name="contain-spawn-waiter", daemon=True)
        self._waiter.start()

    def _wait_for_exit(self) -> None:
        try:
            exited = self._channel.wait_exited(max(0.0, self._deadline - time.monotonic()))
            if exited is None:
                self.timed_out = True
                self._channel.kill()
                exited = self._channel.wait_exited(_KILL_GRACE_S)
                if exited is None:
                    self._on_lost("the supervisor did not report after a kill")
            self._exited = exited
            if exited is not None:
                code, sig = exited.exit_code, exited.signal
                self.returncode = code if code is not None else -(sig or 9)
            else:
                self.returncode = -9
        except ContainError as exc:
            self._on_lost(exc.cause)
            self.returncode = -9
        finally:
            self._done.set()
            self._on_done()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the command to end; returns ``returncode`` (None if ``timeout`` passed)."""
        self._done.wait(timeout)
        return self.returncode

    def poll(self) -> int | None:
        """The return code if the command has ended, else None."""
        return self.returncode if self._done.is_set() else None

    def kill(self) -> None:
        """Kill the command and every process it started (the supervisor's kill(-1))."""
        if not self._done.is_set():
            try:
                self._channel.kill()
            except ContainError as exc:
                self._on_lost(exc.cause)

    def close(self) -> None:
        """Kill if still running, wait, and close the host's pipe ends."""
        self.kill()
        self.wait(_KILL_GRACE_S * 2)
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None and not stream.closed:
                stream.close()
