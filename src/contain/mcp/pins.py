"""Tool definitions pinned: a changed definition, or a new tool, is withheld until a person approves it.

The first listing of an upstream (no pin for that server yet) pins every tool it offers: that is
the upstream's first approval, "trust on first use" of the initial set. Each pin stores the tool's
digest (name, description, input schema, as the upstream sent them, see
``contain.gate.digests.tool_digest``) and the definition itself. Later listings are compared:

- same digest: the tool is exposed, with the *pinned* schema (the one the gate checks against);
- different digest: the tool is withheld (not listed, calls refused with rule ``pin-changed``) and
  the new definition is kept as the candidate;
- a name with no pin, on an upstream that has pins (``new_tools: withhold``, the default): the
  tool is withheld (calls refused with ``tool-not-approved``) and kept as a *new* candidate. With
  ``new_tools: trust_on_first_use`` it is pinned at once, as the first listing is.

``contain mcp pins approve SERVER TOOL --digest D`` makes a candidate (changed or new) the pin, and
only if D is still the candidate stored (compare-and-set in one transaction): a person approves
what they were shown, never what arrived since. Grants bound to an old digest stop matching.

Which form is pinned. The digest covers the raw definition, so a change a person cannot see (a
zero-width character, a reordered property with a new default) still withholds the tool. What a
model sees is ``contain.mcp.exposure.exposed_definition`` of the pinned raw definition, a pure
function of it, so approving a digest approves exactly one exposed form; ``pins list`` prints that
form (and the raw one when they differ).

Bounded: the listing reaching the store is already capped (``contain.mcp.exposure``: tools per
upstream, bytes per definition). New candidates are exactly the unpinned names of the latest
listing (older ones are dropped), and under ``trust_on_first_use`` no more than ``max_tools``
pins are made per server without a person, so an upstream that invents names cannot grow the
file without bound: per server at most ``max_tools`` pins (plus approved ones), one candidate
each, and ``max_tools`` new candidates, each at most ``max_definition_bytes``.

Not enforced: that the *first* listing is benign. Pin a server in a review session before giving
it to an agent, and read ``contain mcp pins list``.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any

from contain.errors import GateError
from contain.gate.digests import canonical_json, tool_digest
from contain.sqlite_txn import immediate_transaction

__all__ = ["NewTool", "NewToolPolicy", "Pin", "PinCheck", "PinState", "PinStore", "ToolDefinition"]

_SCHEMA = (
    """
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
)""",
    """
CREATE TABLE IF NOT EXISTS new_tools (
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    digest TEXT NOT NULL,
    definition TEXT NOT NULL,
    first_seen_at REAL NOT NULL,
    PRIMARY KEY (server, tool)
)""",
)


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as an upstream defines it (raw: before the description is cleaned); never mutated after use."""

    name: str
    description: str
    input_schema: Mapping[str, Any]

    @cached_property
    def digest(self) -> str:
        # Computed once per definition: a listing is planned, pinned and logged on every call.
        return tool_digest(name=self.name, description=self.description, input_schema=self.input_schema)

    @cached_property
    def _canonical(self) -> str:
        return canonical_json(
            {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema)}
        ).decode()

    def to_json(self) -> str:
        return self._canonical

    @classmethod
    def from_json(cls, text: str) -> ToolDefinition:
        data = json.loads(text)
        return cls(name=data["name"], description=data["description"], input_schema=data["input_schema"])


class NewToolPolicy(StrEnum):
    """What happens to a tool name an upstream offers after its first listing was pinned."""

    WITHHOLD = "withhold"  # default: kept as a new candidate, not exposed until approved
    TRUST_ON_FIRST_USE = "trust_on_first_use"  # pinned and exposed at once (an upstream can add tools)


class PinState(StrEnum):
    """What a listing found, compared with the pin."""

    NEW = "new"  # pinned now (the upstream's first listing, or trust_on_first_use)
    MATCH = "match"  # same digest as the pin
    CHANGED = "changed"  # differs from the pin: withheld until approved
    NEW_WITHHELD = "new-withheld"  # no pin, the upstream already has pins: withheld until approved


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
class NewTool:
    """A tool an upstream offers that has no pin yet, withheld until approved."""

    server: str
    tool: str
    digest: str
    definition: ToolDefinition
    first_seen_at: float


@dataclass(frozen=True)
class PinCheck:
    """The result of comparing an offered definition with the pin (``pin`` None: not pinned)."""

    state: PinState
    pin: Pin | None
    new: NewTool | None = None

    @property
    def is_withheld(self) -> bool:
        return self.state in (PinState.CHANGED, PinState.NEW_WITHHELD)


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
                for statement in _SCHEMA:
                    db.execute(statement)
        except (OSError, sqlite3.Error) as exc:
            raise GateError(f"cannot open the pin store {self.path}: {exc}", "check the pins: path") from exc

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            if not self._wal:
                db.execute("PRAGMA journal_mode=WAL")  # persistent in the file; set once per store
                self._wal = True
            with immediate_transaction(db):
                yield db
        finally:
            db.close()

    def check(
        self,
        server: str,
        offered: ToolDefinition,
        *,
        new_tools: NewToolPolicy = NewToolPolicy.WITHHOLD,
        max_tools: int = 256,
    ) -> PinCheck:
        """Compare ``offered`` with the pin of (server, tool); see ``check_all``."""
        return self.check_all(server, [offered], new_tools=new_tools, max_tools=max_tools)[0]

    def check_all(
        self,
        server: str,
        offered: Sequence[ToolDefinition],
        *,
        new_tools: NewToolPolicy = NewToolPolicy.WITHHOLD,
        max_tools: int = 256,
    ) -> list[PinCheck]:
        """Compare a whole listing of one upstream with its pins, in one transaction.

        Args:
            server: the upstream's name.
            offered: its listing (already planned by ``contain.mcp.exposure``: unique names).
            new_tools: what happens to a name with no pin once the server has pins.
            max_tools: at most this many pins per server are made without a person
                (trust_on_first_use); past it a new name is withheld like under ``withhold``.

        Returns:
            One check per offered definition, in order: NEW (pinned now), MATCH, CHANGED (the
            offer is stored as the candidate) or NEW_WITHHELD (stored as a new candidate).

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
            first_listing = not rows
            waiting = {
                row[0]: (row[1], row[2])
                for row in db.execute("SELECT tool, digest, first_seen_at FROM new_tools WHERE server = ?", (server,))
            }
            checks: list[PinCheck] = []
            for tool in offered:
                row = rows.get(tool.name)
                if row is None:
                    pin_now = first_listing or (
                        new_tools is NewToolPolicy.TRUST_ON_FIRST_USE and len(rows) < max_tools
                    )
                    if pin_now:
                        rows[tool.name] = self._insert_pin(db, server, tool, now)
                        checks.append(PinCheck(PinState.NEW, self._read(db, server, tool.name)))
                    else:
                        checks.append(self._withhold_new(db, server, tool, waiting, now))
                elif row[2] == tool.digest:
                    if row[3] is not None:
                        # The upstream is back to the approved definition: the stale candidate goes.
                        db.execute(
                            "UPDATE pins SET candidate_digest = NULL, candidate_definition = NULL, "
                            "candidate_seen_at = NULL WHERE server = ? AND tool = ?",
                            (server, tool.name),
                        )
                    checks.append(PinCheck(PinState.MATCH, self._read(db, server, tool.name)))
                else:
                    if row[3] != tool.digest:
                        db.execute(
                            "UPDATE pins SET candidate_digest = ?, candidate_definition = ?, candidate_seen_at = ? "
                            "WHERE server = ? AND tool = ?",
                            (tool.digest, tool.to_json(), now, server, tool.name),
                        )
                    checks.append(PinCheck(PinState.CHANGED, self._read(db, server, tool.name)))
            # New candidates are the unpinned names of this listing: a name no longer offered goes.
            offered_names = {tool.name for tool in offered}
            for name in waiting.keys() - offered_names:
                db.execute("DELETE FROM new_tools WHERE server = ? AND tool = ?", (server, name))
        return checks

    @staticmethod
    def _insert_pin(db: sqlite3.Connection, server: str, tool: ToolDefinition, now: float) -> tuple[Any, ...]:
        digest = tool.digest
        db.execute(
            "INSERT INTO pins (server, tool, digest, definition, pinned_at, approved_by) VALUES (?, ?, ?, ?, ?, ?)",
            (server, tool.name, digest, tool.to_json(), now, "first-use"),
        )
        return (server, tool.name, digest, None)

    @staticmethod
    def _withhold_new(
        db: sqlite3.Connection,
        server: str,
        tool: ToolDefinition,
        waiting: dict[str, tuple[str, float]],
        now: float,
    ) -> PinCheck:
        digest = tool.digest
        known = waiting.get(tool.name)
        if known is not None and known[0] == digest:
            first_seen = known[1]
        else:  # a new name, or a new candidate that changed again: the latest offer is what is shown
            first_seen = now
            db.execute(
                "INSERT OR REPLACE INTO new_tools (server, tool, digest, definition, first_seen_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (server, tool.name, digest, tool.to_json(), now),
            )
        return PinCheck(PinState.NEW_WITHHELD, None, NewTool(server, tool.name, digest, tool, first_seen))

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

    def list_new(self) -> builtins.list[NewTool]:
        """Every new tool waiting for approval, ordered by server then tool."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT server, tool, digest, definition, first_seen_at FROM new_tools ORDER BY server, tool"
            ).fetchall()
        return [NewTool(r[0], r[1], r[2], ToolDefinition.from_json(r[3]), r[4]) for r in rows]

    def approve(self, server: str, tool: str, *, reviewer: str, candidate_digest: str) -> Pin:
        """Make the stored candidate (a changed definition, or a new tool) the pin.

        Args:
            candidate_digest: the digest the reviewer was shown; approval happens only if this is
                still the stored candidate (the reviewer approves what they read, not what
                arrived since). Required: approving "whatever is current" would be a race.

        Raises:
            GateError: no such pin or new tool, no candidate, or the candidate changed since it
                was shown.
        """
        with self._connect() as db:
            pin = self._read(db, server, tool)
            if pin is None:
                return self._approve_new(db, server, tool, reviewer=reviewer, candidate_digest=candidate_digest)
            if pin.candidate is None or pin.candidate_digest is None:
                raise GateError(f"{server} {tool} has no changed definition to approve", "nothing to do")
            if candidate_digest != pin.candidate_digest:
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

    def _approve_new(
        self, db: sqlite3.Connection, server: str, tool: str, *, reviewer: str, candidate_digest: str
    ) -> Pin:
        row = db.execute(
            "SELECT digest, definition FROM new_tools WHERE server = ? AND tool = ?", (server, tool)
        ).fetchone()
        if row is None:
            raise GateError(f"no pin and no new tool for {server} {tool}", "run `contain mcp pins list`")
        if row[0] != candidate_digest:
            raise GateError(
                f"the new tool {server} {tool} is now {row[0]}, not {candidate_digest}",
                "review it again with `contain mcp pins list`",
            )
        db.execute(
            "INSERT INTO pins (server, tool, digest, definition, pinned_at, approved_by) VALUES (?, ?, ?, ?, ?, ?)",
            (server, tool, row[0], row[1], self._clock(), reviewer),
        )
        db.execute("DELETE FROM new_tools WHERE server = ? AND tool = ?", (server, tool))
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
