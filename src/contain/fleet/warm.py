"""Warm sandboxes on one node: started ahead of the jobs that will use them, each used once.

The seam is ``WarmSandboxes`` (``take`` and ``close``), so the node's pool actor does not care how
sandboxes are kept warm. ``PrestartedSandboxes`` is the implementation in this tree; when
``contain.runtime.pool.SandboxPool`` lands, an adapter to it is one more class here.

What a warm sandbox is: a ``Sandbox`` whose ``start()`` has returned and that no job has run in.
A job takes it, runs in it, and the node closes it; it is never handed to a second job (a job
could leave files, processes in flight or a poisoned scratch behind). ``take`` then asks for a
replacement, started by one background thread, so the next job of the same manifest finds one.

Bounds: at most ``keep`` ready sandboxes per manifest (the manifest's ``fleet.warm_sandboxes``), a
ready sandbox older than ``max_idle_s`` is closed instead of used (its broker token would be
close to expiry), and ``close()`` closes every ready sandbox, then stops the refill thread (which
closes a sandbox it was starting): after it returns this object owns no sandbox.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from contain._log import LazyLogger
from contain.errors import ContainError, SandboxStartError
from contain.runtime.sandbox import Sandbox

__all__ = ["DEFAULT_MAX_IDLE_S", "PrestartedSandboxes", "WarmSandboxes"]

log = LazyLogger(__name__)

# A warm sandbox waits at most 10 minutes: long enough for a queue of jobs of one manifest, short
# enough that the broker token minted for it (valid for this plus the run's wall clock) is fresh.
DEFAULT_MAX_IDLE_S = 600.0
_JOIN_S = 60.0  # close() waits this long for a start in progress (a sandbox start is bounded)


class WarmSandboxes(Protocol):
    """Where a node's pool actor gets started sandboxes."""

    def take(self, key: str, make: Callable[[], Sandbox], *, keep: int) -> tuple[Sandbox, bool]:
        """A started sandbox for manifest ``key`` and whether it was warm; asks for ``keep`` spares.

        Raises:
            SandboxStartError: the pool is closed, or a cold start failed.
            UnsupportedHost: a cold start found a layer missing.
        """
        ...

    def close(self) -> int:
        """Close every ready sandbox and start no more; returns how many were closed."""
        ...


class PrestartedSandboxes:
    """Ready sandboxes per manifest key, refilled by one thread (see the module docstring)."""

    def __init__(self, *, max_idle_s: float = DEFAULT_MAX_IDLE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_idle_s = max_idle_s
        self._clock = clock
        self._lock = threading.Condition()
        self._ready: dict[str, deque[tuple[float, Sandbox]]] = {}
        self._wanted: dict[str, tuple[Callable[[], Sandbox], int]] = {}
        self._closed = False
        self._thread: threading.Thread | None = None

    def take(self, key: str, make: Callable[[], Sandbox], *, keep: int) -> tuple[Sandbox, bool]:
        stale: list[Sandbox] = []
        sandbox: Sandbox | None = None
        with self._lock:
            if self._closed:
                raise SandboxStartError("this node's sandbox pool is closed (the batch was cancelled)", "")
            ready = self._ready.setdefault(key, deque())
            while ready and sandbox is None:
                born, candidate = ready.popleft()
                if self._clock() - born > self._max_idle_s:
                    stale.append(candidate)
                else:
                    sandbox = candidate
            if keep > 0:
                self._wanted[key] = (make, keep)
                self._ensure_thread()
                self._lock.notify_all()
        for old in stale:
            old.close()
        if sandbox is not None:
            return sandbox, True
        cold = make()
        cold.start()
        return cold, False

    def close(self) -> int:
        with self._lock:
            self._closed = True
            ready = [sb for queue in self._ready.values() for _, sb in queue]
            self._ready.clear()
            self._lock.notify_all()
            thread = self._thread
        # The ready sandboxes first, the refill thread last: bubblewrap's --die-with-parent is
        # PR_SET_PDEATHSIG, which fires when the *thread* that started the sandbox exits, and a
        # sandbox killed that way would die before its close() (its teardown still runs, but
        # against a sandbox already gone). A start in progress is closed by the thread itself.
        for sandbox in ready:
            sandbox.close()
        if thread is not None:
            thread.join(_JOIN_S)
        return len(ready)

    def ready_count(self, key: str) -> int:
        """Ready sandboxes for ``key`` now (for reports and tests)."""
        with self._lock:
            return len(self._ready.get(key, ()))

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._refill, name="contain-fleet-warm", daemon=True)
            self._thread.start()

    def _next_wanted(self) -> tuple[str, Callable[[], Sandbox]] | None:
        """The next manifest short of spares, waiting until there is one; None once closed."""
        with self._lock:
            while not self._closed:
                for key, (make, keep) in self._wanted.items():
                    if len(self._ready.get(key, ())) < keep:
                        return key, make
                self._lock.wait()
            return None

    def _refill(self) -> None:
        while (wanted := self._next_wanted()) is not None:
            key, make = wanted
            try:
                sandbox = make()
                sandbox.start()
            except Exception as exc:  # no spare is made; nothing is allowed by this
                # A manifest whose sandbox cannot start is not retried in a loop: its jobs start
                # cold and report the cause themselves.
                cause = exc.cause if isinstance(exc, ContainError) else f"{type(exc).__name__}: {exc}"
                log.warning("a warm sandbox for manifest %s did not start: %s", key[:12], cause)
                with self._lock:
                    self._wanted.pop(key, None)
                continue
            with self._lock:
                if not self._closed:
                    self._ready.setdefault(key, deque()).append((self._clock(), sandbox))
                    continue
            sandbox.close()  # closed while it started: it is nobody's now
