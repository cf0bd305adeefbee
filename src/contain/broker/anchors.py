"""External anchors: every checkpoint line also goes somewhere the broker's state directory is not.

The broker's checkpoint file and key live next to its database, so whoever can write that
directory can remove checkpoints together with the entries they vouch for (``verification``). An
anchor is a copy of each checkpoint line kept where that attacker cannot write: a file on other
storage (``FileAnchorSink``) or a command the operator chooses (``CommandAnchorSink``: for example
``logger``, an ``ssh`` append to another host, a write to WORM storage), which receives the line on
its stdin. ``contain ledger verify --anchors FILE`` then fails when the ledger no longer contains
an anchored head.

How lines travel (``AnchorPublisher``): until a required anchor has taken one line, lines are sent
synchronously and a failure raises, so a broker whose required anchor does not work refuses to
start (``LedgerAnchorError`` from its start checkpoint). After that (for an optional anchor: after
the first attempt) lines go to the sink from a thread of its own and never delay a commit; lines
published while the sink is busy are coalesced into the newest (a head vouches for everything
before it). A failure is logged, counted, and the next checkpoint tries again. ``close`` delivers the last line (the
broker's stop checkpoint), waiting at most the sink's timeout.

What is enforced: the anchor file is opened with ``O_NOFOLLOW | O_APPEND`` and every line is
fsynced; the command runs without a shell and without the broker's ``CONTAIN_BROKER_SECRET_*``
environment, under a timeout; configuration refuses an anchor file inside the broker's state
directory (``config``). What is not: the anchor's own integrity (who else can write that file or
what the command does with the line); delivery while the broker runs (a failing anchor is logged,
the broker keeps serving; ``verify --anchors`` then shows the lag as unanchored entries); an
anchor of a ledger whose broker started empty is first written with its first checkpoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from contain._log import LazyLogger
from contain.broker.config import CheckpointAnchorConfig
from contain.errors import LedgerAnchorError
from contain.visible_text import for_terminal

__all__ = [
    "AnchorPublisher",
    "AnchorSink",
    "CommandAnchorSink",
    "FileAnchorSink",
    "RecordingAnchorSink",
    "anchor_environment",
    "publisher_for",
]

log = LazyLogger(__name__)

# Environment variables an anchor command never inherits: the executors' secrets (actions.SecretStore).
_WITHHELD_ENV_PREFIXES = ("CONTAIN_BROKER_SECRET_",)
_STDERR_SHOWN_BYTES = 300


class AnchorSink(Protocol):
    """Takes one checkpoint line (JSON + newline) and keeps it outside the state directory."""

    name: str

    def send(self, line: bytes) -> None:
        """Deliver ``line`` durably.

        Raises:
            LedgerAnchorError: it could not be delivered.
        """


class FileAnchorSink:
    """Appends each line to a file (``O_APPEND | O_NOFOLLOW``, fsync per line, created 0600)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open the file once to create it and prove it is writable.

        Raises:
            LedgerAnchorError: the file cannot be opened for appending (missing directory, a
                symlink, no permission).
        """
        self.path = Path(path)
        self.name = f"anchor file {self.path}"
        os.close(self._open())

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise LedgerAnchorError(
                f"cannot open the ledger anchor file {self.path} for appending: {exc.strerror}",
                "create its directory, make it writable by the broker, and name a file (not a symlink)",
            ) from exc

    def send(self, line: bytes) -> None:
        fd = self._open()
        try:
            os.write(fd, line)
            os.fsync(fd)
        except OSError as exc:
            raise LedgerAnchorError(
                f"cannot append to the ledger anchor file {self.path}: {exc.strerror}",
                "check the storage that holds it (full, read-only, unmounted)",
            ) from exc
        finally:
            os.close(fd)


def anchor_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment an anchor command gets: the broker's, without executor secrets (pure)."""
    source = dict(os.environ if environ is None else environ)
    return {k: v for k, v in source.items() if not k.startswith(_WITHHELD_ENV_PREFIXES)}


class CommandAnchorSink:
    """Runs ``argv`` (no shell) once per line, the line on its stdin; exit 0 means delivered."""

    def __init__(self, argv: Sequence[str], *, timeout_s: float) -> None:
        """Check that the program exists and is executable.

        Raises:
            LedgerAnchorError: empty argv, or the program is not found.
        """
        if not argv:
            raise LedgerAnchorError("the ledger anchor command is empty", "name a program and its arguments")
        self.argv = tuple(argv)
        self.timeout_s = timeout_s
        self.name = f"anchor command {self.argv[0]}"
        if shutil.which(self.argv[0]) is None:
            raise LedgerAnchorError(
                f"the ledger anchor command {self.argv[0]} is not an executable program",
                "give its absolute path, or install it",
            )

    def send(self, line: bytes) -> None:
        try:
            done = subprocess.run(  # argv from broker.yaml, never a shell
                self.argv,
                input=line,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=self.timeout_s,
                env=anchor_environment(),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LedgerAnchorError(
                f"the ledger anchor command {self.argv[0]} ran longer than {self.timeout_s:g} s",
                "make it faster, or raise checkpoint_anchor.timeout_s",
            ) from exc
        except OSError as exc:
            raise LedgerAnchorError(
                f"the ledger anchor command {self.argv[0]} could not run: {exc.strerror}", "check the program"
            ) from exc
        if done.returncode != 0:
            said = for_terminal(done.stderr[:_STDERR_SHOWN_BYTES].decode(errors="replace").strip())
            raise LedgerAnchorError(
                f"the ledger anchor command {self.argv[0]} exited {done.returncode}: {said}",
                "check where the command sends checkpoints",
            )


class RecordingAnchorSink:
    """Keeps lines in memory, or refuses them while ``failing`` is set (for tests and dry runs)."""

    def __init__(self) -> None:
        self.name = "recording anchor"
        self.lines: list[bytes] = []
        self.failing = False

    def send(self, line: bytes) -> None:
        if self.failing:
            raise LedgerAnchorError("the recording anchor was told to fail", "clear RecordingAnchorSink.failing")
        self.lines.append(line)


class AnchorPublisher:
    """Hands checkpoint lines to a sink: the first synchronously, then off the commit path,
    coalesced to the newest (see the module docstring). Implements ``ledger.CheckpointAnchor``."""

    def __init__(self, sink: AnchorSink, *, required: bool, close_timeout_s: float = 10.0) -> None:
        self.sink = sink
        self.required = required
        self.close_timeout_s = close_timeout_s
        self.sent = 0
        self.failures = 0
        self.last_error: str | None = None
        self._cond = threading.Condition()
        self._pending: bytes | None = None
        self._started = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def publish(self, line: bytes) -> None:
        """Send now while nothing was delivered yet (raising when the anchor is required), else from the thread.

        Raises:
            LedgerAnchorError: no line has been delivered yet, this one failed too, and the anchor
                is required (so ``Broker.start``'s checkpoint refuses to start the broker).
        """
        with self._cond:
            first, self._started = not self._started, True
            undelivered = self.required and self.sent == 0
            synchronous = first or undelivered or self._closed
        if synchronous:
            self._send(line, raise_failure=undelivered)
            return
        with self._cond:
            self._pending = line  # a newer head replaces one not yet sent
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="contain-ledger-anchor", daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        """Deliver the pending line, if any, waiting at most ``close_timeout_s``; later lines go synchronously."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(self.close_timeout_s)
            if thread.is_alive():
                log.error("%s did not take the last checkpoint within %ss", self.sink.name, self.close_timeout_s)

    def _send(self, line: bytes, *, raise_failure: bool) -> None:
        try:
            self.sink.send(line)
        except LedgerAnchorError as exc:
            self.failures += 1
            self.last_error = exc.cause
            log.error("ledger anchor failed (%d so far): %s", self.failures, exc.cause)
            if raise_failure:
                raise
            return
        self.sent += 1

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                line, self._pending = self._pending, None
            if line is None:
                return  # closed, nothing left
            self._send(line, raise_failure=False)


def publisher_for(config: CheckpointAnchorConfig | None) -> AnchorPublisher | None:
    """The publisher broker.yaml's ``checkpoint_anchor`` asks for (None when it asks for none).

    Raises:
        LedgerAnchorError: the file cannot be opened for appending, or the program is not found.
    """
    if config is None:
        return None
    sink: AnchorSink
    if config.file is not None:
        sink = FileAnchorSink(config.file)
    else:
        sink = CommandAnchorSink(config.command or (), timeout_s=config.timeout_s)
    return AnchorPublisher(sink, required=config.required, close_timeout_s=config.timeout_s)
