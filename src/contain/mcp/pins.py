"""Tool definitions pinned on first use: a changed definition is withheld until approved again.

The first time the gateway sees an upstream tool it stores the tool's digest (name, description,
input schema, as the upstream sent them, see ``contain.gate.digests.tool_digest``) and the
definition itself. Later listings are compared with the pin:

- same digest: the tool is exposed, with the *pinned* schema (the one the gate checks against);
- different digest: the tool is withheld (not listed, calls refused with rule ``pin-changed``) and
  the new definition is kept as the candidate, until ``contain mcp pins approve SERVER TOOL``
  makes the candidate the pin. Grants bound to the old digest stop matching at the same moment.

Enforced: the pin decision is made from the digest of the raw upstream definition, so a change a
human cannot see (a zero-width character, a reordered schema property with a new default) still
withholds the tool. The store is SQLite with one row per (server, tool); approving is one
transaction that only succeeds when the candidate reviewed is the one stored (compare-and-set).

Not enforced: that the *first* definition is benign ("trust on first use"). Pin a server in a
review session before giving it to an agent, and read ``contain mcp pins list``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from contain.errors import GateError
from contain.gate.digests import canonical_json, tool_digest

__all__ = ["Pin", "PinCheck", "PinState", "PinStore", "ToolDefinition"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS pins (
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    digest TEXT NOT NULL,
    definition TEXT NOT NULL,
    pinned_at REAL NOT NULL,
    approved_by TEXT NOT NULL,
    candidate_digest TEXT,
    candidate_definition TEXT,
    candidate_seen_at REAL,
    PRIMARY KEY (server, tool)
)
"""


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as an upstream defines it (raw: before the description is cleaned)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]

    @property
    def digest(self) -> str:
        return tool_digest(name=self.name, description=self.description, input_schema=self.input_schema)

    def to_json(self) -> str:
        return canonical_json(
            {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema)}
        ).decode()

    @classmethod
    def from_json(cls, text: str) -> ToolDefinition:
        data = json.loads(text)
        return cls(name=data["name"], description=data["description"], input_schema=data["input_schema"])


class PinState(StrEnum):
    """What a listing found, compared with the pin."""

    NEW = "new"  # first use: pinned now
    MATCH = "match"  # same digest as the pin
    CHANGED = "changed"  # differs from the pin: withheld until approved


@dataclass(frozen=True)
class Pin:
    """One row of the pin store."""

    server: str
    tool: str
    digest: str
    definition: ToolDefinition
    pinned_at: float
    approved_by: str
    candidate_digest: str | None
    candidate: ToolDefinition | None


@dataclass(frozen=True)
class PinCheck:
    """The result of comparing an offered definition with the pin."""

    state: PinState
    pin: Pin

    @property
    def is_withheld(self) -> bool:
        return self.state is PinState.CHANGED


class PinStore:
    """SQLite-backed pins; safe to share between a running gateway and the CLI.

    Args:
        path: the database file (created with mode 0600 if missing).
        clock: seconds since the epoch; tests pass a fixed one.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Any = time.time) -> None:
        self.path = os.fspath(path)
        self._clock = clock
        self._wal = False
        try:
            if not os.path.exists(self.path):
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            with self._connect() as db:
                db.execute(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise GateError(f"cannot open the pin store {self.path}: {exc}", "check the pins: path") from exc

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            if not self._wal:
                db.execute("PRAGMA journal_mode=WAL")  # persistent in the file; set once per store
                self._wal = True
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def check(self, server: str, offered: ToolDefinition) -> PinCheck:
        """Compare ``offered`` with the pin of (server, tool): pin it on first use.

        Returns:
            NEW (pinned now), MATCH, or CHANGED (the offer is stored as the candidate).
        """
        return self.check_all(server, [offered])[0]

    def check_all(self, server: str, offered: Sequence[ToolDefinition]) -> list[PinCheck]:
        """``check`` for a whole listing, in one transaction (a listing is checked on every call).

        Rows are written only when something changed (a new pin, a new or dropped candidate), so
        the common case (every tool matches) is one read.
        """
        now = self._clock()
        with self._connect() as db:
            rows = {
                row[1]: row
                for row in db.execute(
                    "SELECT server, tool, digest, candidate_digest FROM pins WHERE server = ?", (server,)
                )
            }
            states: list[tuple[str, PinState]] = []
            for tool in offered:
                digest = tool.digest
                row = rows.get(tool.name)
                if row is None:
                    db.execute(
                        "INSERT INTO pins (server, tool, digest, definition, pinned_at, approved_by) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (server, tool.name, digest, tool.to_json(), now, "first-use"),
                    )
                    rows[tool.name] = (server, tool.name, digest, None)
                    states.append((tool.name, PinState.NEW))
                elif row[2] == digest:
                    if row[3] is not None:
                        # The upstream is back to the approved definition: the stale candidate goes.
                        db.execute(
                            "UPDATE pins SET candidate_digest = NULL, candidate_definition = NULL, "
                            "candidate_seen_at = NULL WHERE server = ? AND tool = ?",
                            (server, tool.name),
                        )
                    states.append((tool.name, PinState.MATCH))
                else:
                    if row[3] != digest:
                        db.execute(
                            "UPDATE pins SET candidate_digest = ?, candidate_definition = ?, candidate_seen_at = ? "
                            "WHERE server = ? AND tool = ?",
                            (digest, tool.to_json(), now, server, tool.name),
                        )
                    states.append((tool.name, PinState.CHANGED))
            checks = []
            for name, state in states:
                pin = self._read(db, server, name)
                assert pin is not None
                checks.append(PinCheck(state, pin))
        return checks

    def get(self, server: str, tool: str) -> Pin | None:
        """The pin of (server, tool), or None."""
        with self._connect() as db:
            return self._read(db, server, tool)

    def list(self) -> list[Pin]:
        """Every pin, ordered by server then tool."""
        with self._connect() as db:
            keys = db.execute("SELECT server, tool FROM pins ORDER BY server, tool").fetchall()
            pins = [self._read(db, server, tool) for server, tool in keys]
        return [pin for pin in pins if pin is not None]

    def approve(self, server: str, tool: str, *, reviewer: str, candidate_digest: str | None = None) -> Pin:
        """Make the stored candidate the pin.

        Args:
            candidate_digest: when given, approve only if this is still the stored candidate (the
                reviewer approves what they read, not what arrived since).

        Raises:
            GateError: no such pin, no candidate, or the candidate changed since it was shown.
        """
        with self._connect() as db:
            pin = self._read(db, server, tool)
            if pin is None:
                raise GateError(f"no pin for {server} {tool}", "run `contain mcp pins list`")
            if pin.candidate is None or pin.candidate_digest is None:
                raise GateError(f"{server} {tool} has no changed definition to approve", "nothing to do")
            if candidate_digest is not None and candidate_digest != pin.candidate_digest:
                raise GateError(
                    f"the changed definition of {server} {tool} is now {pin.candidate_digest}, "
                    f"not {candidate_digest}",
                    "review it again with `contain mcp pins list`",
                )
            db.execute(
                "UPDATE pins SET digest = candidate_digest, definition = candidate_definition, pinned_at = ?, "
                "approved_by = ?, candidate_digest = NULL, candidate_definition = NULL, "
                "candidate_seen_at = NULL WHERE server = ? AND tool = ?",
                (self._clock(), reviewer, server, tool),
            )
            approved = self._read(db, server, tool)
        assert approved is not None
        return approved

    @staticmethod
    def _read(db: sqlite3.Connection, server: str, tool: str) -> Pin | None:
        row = db.execute(
            "SELECT server, tool, digest, definition, pinned_at, approved_by, candidate_digest, "
            "candidate_definition FROM pins WHERE server = ? AND tool = ?",
            (server, tool),
        ).fetchone()
        if row is None:
            return None
        return Pin(
            server=row[0],
            tool=row[1],
            digest=row[2],
            definition=ToolDefinition.from_json(row[3]),
            pinned_at=row[4],
            approved_by=row[5],
            candidate_digest=row[6],
            candidate=ToolDefinition.from_json(row[7]) if row[7] else None,
        )
