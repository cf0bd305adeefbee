"""The review queue: a SQLite store of tool calls waiting for, or having had, a human decision.

Each request keeps the exact call (principal, server, tool, tool digest, canonical arguments and
their digest), the gate's decision (rule id and reason), timestamps, and, once decided, the reviewer,
the reason and (when approved) the scope and the grant token. States::

    pending ──approve──▶ approved   (a grant is minted with the given scope and stored)
       │  ──deny─────▶ denied      (a reason is required)
       └──expire─────▶ expired     (nobody decided before the request's deadline)

Transitions happen only from ``pending``, inside ``BEGIN IMMEDIATE`` with a ``WHERE status =
'pending'`` guard, so two reviewers (CLI and web page) cannot both decide one request. The grant's
use counter (``grants.SqliteUseCounter``) lives in the same file, so approving, presenting and
counting share one database.

What is not enforced here: who the reviewer is (the CLI trusts the local user, the web page its
token), and that the caller presents the grant (the gateway, the broker or the agent runner does,
and ``grants.verify_grant`` checks it). The arguments are stored in clear: they may contain what the
agent wanted to write; protect the database file like the key (the store creates it 0600).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from contain.boundary import ToolVerdict
from contain.decision import Decision
from contain.errors import GateError
from contain.gate.digests import argument_digest, canonical_json
from contain.gate.grants import GrantKey, GrantScope, SqliteUseCounter, decode_grant, mint_grant
from contain.gate.model import ToolCall
from contain.sqlite_txn import immediate_transaction

__all__ = [
    "DEFAULT_PENDING_TTL_S",
    "ReviewRequest",
    "ReviewState",
    "ReviewStore",
    "default_key_path",
    "default_state_dir",
    "default_store_path",
]

DEFAULT_PENDING_TTL_S = 24 * 3600.0  # a request nobody looks at for a day is stale

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS requests (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
        principal TEXT NOT NULL,
        server TEXT NOT NULL,
        tool TEXT NOT NULL,
        tool_digest TEXT NOT NULL,
        arguments TEXT NOT NULL,
        argument_digest TEXT NOT NULL,
        input_schema TEXT,
        rule_id TEXT NOT NULL,
        decision_reason TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        decided_at REAL,
        reviewer TEXT,
        review_reason TEXT,
        scope_kind TEXT,
        scope_uses INTEGER,
        scope_expires_at REAL,
        grant_id TEXT,
        grant_token TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS requests_status ON requests (status, created_at)",
    "CREATE INDEX IF NOT EXISTS requests_call ON requests (principal, tool, tool_digest, argument_digest)",
)


def default_state_dir(environ: Mapping[str, str] | None = None, *, euid: int | None = None) -> Path:
    """Where contain keeps the review store and grant key by default.

    ``$CONTAIN_STATE_DIR`` when set; else ``/var/lib/contain`` for root; else
    ``$XDG_STATE_HOME/contain`` or ``~/.local/state/contain``.
    """
    env = os.environ if environ is None else environ
    if env.get("CONTAIN_STATE_DIR"):
        return Path(env["CONTAIN_STATE_DIR"])
    if (os.geteuid() if euid is None else euid) == 0:
        return Path("/var/lib/contain")
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(base) / "contain"


def default_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """The default review store: ``<state dir>/review.db``."""
    return default_state_dir(environ) / "review.db"


def default_key_path(environ: Mapping[str, str] | None = None) -> Path:
    """The default grant key file: ``<state dir>/grant.key``."""
    return default_state_dir(environ) / "grant.key"


class ReviewState(StrEnum):
    """Where a review request is in its life (the one enum: the MCP gateway's ``ReviewStatus`` uses it too)."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


@dataclass(frozen=True)
class ReviewRequest:
    """One row of the queue, as stored."""

    request_id: str
    status: ReviewState
    principal: str
    server: str
    tool: str
    tool_digest: str
    arguments: dict[str, Any]
    argument_digest: str
    input_schema: dict[str, Any] | None
    rule_id: str
    decision_reason: str
    created_at: float
    expires_at: float
    decided_at: float | None
    reviewer: str | None
    review_reason: str | None
    scope: GrantScope | None
    grant_id: str | None
    grant_token: str | None

    def as_call(self) -> ToolCall:
        """The stored call, as the gate saw it."""
        return ToolCall(
            principal=self.principal,
            server=self.server,
            tool=self.tool,
            tool_digest=self.tool_digest,
            arguments=self.arguments,
            input_schema=self.input_schema,
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the grant token included; it is a bearer credential)."""
        scope = None
        if self.scope is not None:
            scope = {"kind": self.scope.kind, "uses": self.scope.uses, "expires_at": self.scope.expires_at}
        return {
            "id": self.request_id,
            "status": self.status.value,
            "principal": self.principal,
            "server": self.server,
            "tool": self.tool,
            "tool_digest": self.tool_digest,
            "arguments": self.arguments,
            "argument_digest": self.argument_digest,
            "rule_id": self.rule_id,
            "decision_reason": self.decision_reason,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "decided_at": self.decided_at,
            "reviewer": self.reviewer,
            "review_reason": self.review_reason,
            "scope": scope,
            "grant_id": self.grant_id,
            "grant_token": self.grant_token,
        }


def _row_to_request(row: sqlite3.Row) -> ReviewRequest:
    scope = None
    if row["scope_kind"] is not None:
        scope = GrantScope(row["scope_kind"], row["scope_uses"], float(row["scope_expires_at"]))
    schema = json.loads(row["input_schema"]) if row["input_schema"] is not None else None
    return ReviewRequest(
        request_id=row["id"],
        status=ReviewState(row["status"]),
        principal=row["principal"],
        server=row["server"],
        tool=row["tool"],
        tool_digest=row["tool_digest"],
        arguments=json.loads(row["arguments"]),
        argument_digest=row["argument_digest"],
        input_schema=schema,
        rule_id=row["rule_id"],
        decision_reason=row["decision_reason"],
        created_at=float(row["created_at"]),
        expires_at=float(row["expires_at"]),
        decided_at=None if row["decided_at"] is None else float(row["decided_at"]),
        reviewer=row["reviewer"],
        review_reason=row["review_reason"],
        scope=scope,
        grant_id=row["grant_id"],
        grant_token=row["grant_token"],
    )


class ReviewStore:
    """The persistent review queue (SQLite, WAL). Safe to share between threads and processes.

    Args:
        path: the database file; created (mode 0600, parent 0700) when absent.
        clock: returns the current unix time; injected by tests.

    Raises:
        GateError: when the file cannot be opened as a review store.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.path.exists():
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        try:
            with self._transaction() as conn:
                for statement in _SCHEMA:
                    conn.execute(statement)
            self.uses = SqliteUseCounter(self.path)
        except sqlite3.DatabaseError as exc:
            raise GateError(
                f"{self.path} is not a usable review store: {exc}",
                "point --db at a new file, or move the damaged one away",
            ) from exc

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with closing(self._connect()) as conn, immediate_transaction(conn):
            yield conn

    def now(self) -> float:
        """The store's clock."""
        return self._clock()

    def submit(self, call: ToolCall, decision: Decision, *, ttl_s: float = DEFAULT_PENDING_TTL_S) -> ReviewRequest:
        """Queue a call the gate sent for review; an identical pending call returns the existing request.

        Args:
            call: the exact call (its arguments must be JSON).
            decision: the gate's ``review`` decision.
            ttl_s: how long the request stays pending before it expires.

        Raises:
            GateError: when the decision is not ``review`` or the arguments are not JSON.
        """
        if decision.verdict is not ToolVerdict.REVIEW:
            raise GateError(
                f"only review decisions are queued; this one is {decision.verdict.value}",
                "submit a call only when the gate answered review",
            )
        try:
            arguments_json = canonical_json(dict(call.arguments)).decode("utf-8")
            digest = argument_digest(call.arguments)
            schema_json = None if call.input_schema is None else canonical_json(dict(call.input_schema)).decode()
        except ValueError as exc:
            raise GateError(f"the call's arguments cannot be stored: {exc}", "the gate denies such calls") from exc
        now = self.now()
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT * FROM requests WHERE status = 'pending' AND principal = ? AND server = ? AND tool = ? "
                "AND tool_digest = ? AND argument_digest = ? AND expires_at > ? ORDER BY created_at LIMIT 1",
                (call.principal, call.server, call.tool, call.tool_digest, digest, now),
            ).fetchone()
            if row is not None:
                return _row_to_request(row)
            request_id = "r-" + secrets.token_hex(6)
            conn.execute(
                "INSERT INTO requests (id, status, principal, server, tool, tool_digest, arguments, "
                "argument_digest, input_schema, rule_id, decision_reason, created_at, expires_at) "
                "VALUES (?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    request_id,
                    call.principal,
                    call.server,
                    call.tool,
                    call.tool_digest,
                    arguments_json,
                    digest,
                    schema_json,
                    decision.rule_id,
                    decision.reason,
                    now,
                    now + ttl_s,
                ),
            )
            created = conn.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
        return _row_to_request(created)

    def get(self, request_id: str) -> ReviewRequest:
        """Return one request.

        Raises:
            GateError: when no request has that id.
        """
        conn = self._connect()
        try:
            row = conn.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
        finally:
            conn.close()
        if row is None:
            raise GateError(f"no review request {request_id!r}", "list requests with: contain review list")
        return _row_to_request(row)

    def list(self, status: ReviewState | None = None, *, limit: int = 200) -> list[ReviewRequest]:
        """Requests, newest first, optionally only those with ``status``."""
        conn = self._connect()
        try:
            if status is None:
                rows = conn.execute("SELECT * FROM requests ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
            else:
                rows = conn.execute(
                    "SELECT * FROM requests WHERE status = ? ORDER BY created_at DESC LIMIT ?", (status.value, limit)
                ).fetchall()
        finally:
            conn.close()
        return [_row_to_request(row) for row in rows]

    def _pending_row(self, conn: sqlite3.Connection, request_id: str, now: float) -> sqlite3.Row:
        row = conn.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
        if row is None:
            raise GateError(f"no review request {request_id!r}", "list requests with: contain review list")
        status = row["status"]
        if status == "pending" and row["expires_at"] <= now:
            status = "expired"  # expire_stale() ran before this transaction; this covers the gap
        if status != "pending":
            raise GateError(
                f"review request {request_id} is already {status}",
                "only pending requests can be decided; the agent can ask again",
            )
        return row  # type: ignore[no-any-return]

    def approve(
        self, request_id: str, *, key: GrantKey, scope: GrantScope, reviewer: str, reason: str = ""
    ) -> ReviewRequest:
        """Approve a pending request: mint a grant bound to its exact call and store the token.

        Raises:
            GateError: unknown id, not pending (already decided or expired), or a scope already expired.
        """
        self.expire_stale()
        now = self.now()
        if scope.expires_at <= now:
            raise GateError("the grant would already be expired", "choose a scope that ends in the future")
        with self._transaction() as conn:
            row = self._pending_row(conn, request_id, now)
            token = mint_grant(
                key,
                principal=row["principal"],
                tool=row["tool"],
                tool_digest=row["tool_digest"],
                argument_digest=row["argument_digest"],
                scope=scope,
                reviewer=reviewer,
                reason=reason,
                now=now,
            )
            conn.execute(
                "UPDATE requests SET status = 'approved', decided_at = ?, reviewer = ?, review_reason = ?, "
                "scope_kind = ?, scope_uses = ?, scope_expires_at = ?, grant_id = ?, grant_token = ? "
                "WHERE id = ? AND status = 'pending'",
                (
                    now,
                    reviewer,
                    reason,
                    scope.kind,
                    scope.uses,
                    scope.expires_at,
                    decode_grant(token).grant_id,
                    token,
                    request_id,
                ),
            )
        return self.get(request_id)

    def deny(self, request_id: str, *, reviewer: str, reason: str) -> ReviewRequest:
        """Deny a pending request with a reason (required: the agent is told why).

        Raises:
            GateError: empty reason, unknown id, or not pending.
        """
        if not reason.strip():
            raise GateError("a denial needs a reason", "say why, e.g. --reason 'writes outside the project'")
        self.expire_stale()
        now = self.now()
        with self._transaction() as conn:
            self._pending_row(conn, request_id, now)
            conn.execute(
                "UPDATE requests SET status = 'denied', decided_at = ?, reviewer = ?, review_reason = ? "
                "WHERE id = ? AND status = 'pending'",
                (now, reviewer, reason, request_id),
            )
        return self.get(request_id)

    def expire_stale(self) -> int:
        """Mark every pending request past its deadline as expired; returns how many."""
        now = self.now()
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE requests SET status = 'expired', decided_at = ? WHERE status = 'pending' AND expires_at <= ?",
                (now, now),
            )
            return int(cursor.rowcount)

    def grant_for(self, call: ToolCall) -> str | None:
        """The newest grant token approved for exactly this call, unexpired and not used up, if any.

        The token still has to pass ``verify_grant`` (which consumes the use); this only finds it.
        """
        row = self._newest_for(
            call,
            "SELECT r.grant_token FROM requests r LEFT JOIN grant_uses u ON u.grant_id = r.grant_id "
            "WHERE r.status = 'approved' AND r.principal = ? AND r.server = ? AND r.tool = ? "
            "AND r.tool_digest = ? AND r.argument_digest = ? AND r.scope_expires_at > ? "
            "AND (r.scope_uses IS NULL OR COALESCE(u.used, 0) < r.scope_uses) "
            "ORDER BY r.decided_at DESC LIMIT 1",
            self.now(),
        )
        return None if row is None else str(row["grant_token"])

    def latest_for(self, call: ToolCall) -> ReviewRequest | None:
        """The newest request for exactly this call (same principal, server, tool and digests), if any."""
        row = self._newest_for(
            call,
            "SELECT * FROM requests WHERE principal = ? AND server = ? AND tool = ? AND tool_digest = ? "
            "AND argument_digest = ? ORDER BY created_at DESC LIMIT 1",
        )
        return None if row is None else _row_to_request(row)

    def _newest_for(self, call: ToolCall, sql: str, *more: object) -> sqlite3.Row | None:
        """The first row of ``sql`` for exactly this call: its parameters are the call's principal,
        server, tool, tool digest and argument digest, then ``more``. None when the arguments have
        no digest (``argument_digest`` refuses them), so nothing can match them."""
        try:
            digest = argument_digest(call.arguments)
        except ValueError:
            return None
        with closing(self._connect()) as conn:
            row: sqlite3.Row | None = conn.execute(
                sql, (call.principal, call.server, call.tool, call.tool_digest, digest, *more)
            ).fetchone()
        return row
