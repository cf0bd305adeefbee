"""The invoices example: a SQLite database of invoices is the external record, written only here.

``update_invoice`` (registered in broker.yaml as ``invoice_actions:update_invoice``):
  * arguments: invoice_id, amount_cents, optional note (pydantic, extra keys refused);
  * authorization: the invoice belongs to the principal (read from the record, never from the
    request), so a model steered by an injected document cannot touch another customer's invoice;
  * business rule: the amount may change by at most 10% unless reviewed (a larger change gets the
    verdict ``review`` and needs a gate grant bound to these exact arguments);
  * executor: authenticates to the invoices database with the API key from the broker's secret
    file (``invoices_api_key``), updates the invoice and records the idempotency key in the same
    transaction (as payment APIs keep idempotency keys), so ``check`` can tell after a crash
    whether the write happened.

The "API key" check stands in for the credential a real billing API would require: the database
stores only its SHA-256, and the file itself is readable by the broker's user only.
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contain.broker import Action, ActionFailed, CheckResult, Decision, ExecContext, Intent, Principal

MAX_UNREVIEWED_CHANGE = 0.10  # the business rule: +-10% without review

SAMPLE_INVOICES = (
    ("INV-1", "alice", 10_000),
    ("INV-2", "bob", 20_000),
    ("INV-3", "alice", 50_000),
)


class UpdateInvoice(BaseModel):
    """Set an invoice's amount."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    invoice_id: str = Field(pattern=r"^INV-[0-9]{1,9}$", description="Invoice id, e.g. INV-1.")
    amount_cents: int = Field(ge=0, le=1_000_000_000, description="New amount in cents, e.g. 10500.")
    note: str = Field(default="", max_length=200, description="Why, e.g. 'late fee'.")


def create_database(path: str, *, api_key: str, invoices: tuple[tuple[str, str, int], ...] = SAMPLE_INVOICES) -> None:
    """Create the invoices database with sample rows and the API key's hash."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(
            """CREATE TABLE IF NOT EXISTS invoices (id TEXT PRIMARY KEY, owner TEXT NOT NULL,
                   amount_cents INTEGER NOT NULL, updated_at REAL NOT NULL DEFAULT 0);
               CREATE TABLE IF NOT EXISTS applied (idempotency_key TEXT PRIMARY KEY, invoice_id TEXT NOT NULL,
                   old_amount_cents INTEGER NOT NULL, new_amount_cents INTEGER NOT NULL, applied_at REAL NOT NULL);
               CREATE TABLE IF NOT EXISTS api_keys (key_sha256 TEXT PRIMARY KEY);"""
        )
        conn.execute("INSERT OR IGNORE INTO api_keys VALUES (?)", (hashlib.sha256(api_key.encode()).hexdigest(),))
        conn.executemany("INSERT OR IGNORE INTO invoices (id, owner, amount_cents) VALUES (?,?,?)", invoices)
    finally:
        conn.close()


def _read(database: str) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    return conn


def _authenticated(database: str, api_key: str) -> sqlite3.Connection:
    conn = sqlite3.connect(database, isolation_level=None, timeout=30)
    conn.execute("PRAGMA synchronous=FULL")
    digest = hashlib.sha256(api_key.encode()).hexdigest()
    known = [row[0] for row in conn.execute("SELECT key_sha256 FROM api_keys")]
    if not any(hmac.compare_digest(digest, k) for k in known):
        conn.close()
        raise ActionFailed("the invoices service refused the broker's credential")
    return conn


def update_invoice(options: Mapping[str, Any]) -> Action:
    """Factory named in broker.yaml; ``options["database"]`` is the invoices database path."""
    database = str(options["database"])

    def owner_and_amount(invoice_id: str) -> tuple[str, int] | None:
        conn = _read(database)
        try:
            row = conn.execute("SELECT owner, amount_cents FROM invoices WHERE id = ?", (invoice_id,)).fetchone()
        finally:
            conn.close()
        return None if row is None else (str(row[0]), int(row[1]))

    def authorize(principal: Principal, args: UpdateInvoice) -> Decision:
        found = owner_and_amount(args.invoice_id)
        if found is None or found[0] != principal.name:
            # One message for "absent" and "someone else's": existence is not leaked.
            return Decision.deny("invoice-owner", f"invoice {args.invoice_id} does not belong to {principal.name}")
        return Decision.allow("invoice-owner", f"invoice {args.invoice_id} belongs to {principal.name}")

    def validate(principal: Principal, args: UpdateInvoice) -> Decision:
        found = owner_and_amount(args.invoice_id)
        if found is None:
            return Decision.deny("invoice-exists", f"invoice {args.invoice_id} does not exist")
        old = found[1]
        change = abs(args.amount_cents - old) / old if old else (0.0 if args.amount_cents == 0 else 1.0)
        if change > MAX_UNREVIEWED_CHANGE:
            return Decision.review("max-change-10pct", f"amount changes by {change:.0%}, more than 10% needs review")
        return Decision.allow("max-change-10pct", f"amount changes by {change:.1%}")

    def execute(args: UpdateInvoice, context: ExecContext) -> Mapping[str, Any]:
        conn = _authenticated(database, context.secret("invoices_api_key"))
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT amount_cents FROM invoices WHERE id = ?", (args.invoice_id,)).fetchone()
            if row is None:
                conn.execute("ROLLBACK")
                raise ActionFailed(f"invoice {args.invoice_id} disappeared")
            now = time.time()
            conn.execute("UPDATE invoices SET amount_cents = ?, updated_at = ? WHERE id = ?",
                         (args.amount_cents, now, args.invoice_id))
            conn.execute("INSERT INTO applied VALUES (?,?,?,?,?)",
                         (context.intent.scoped_key, args.invoice_id, int(row[0]), args.amount_cents, now))
            conn.execute("COMMIT")
        finally:
            conn.close()
        return {"invoice_id": args.invoice_id, "old_amount_cents": int(row[0]), "new_amount_cents": args.amount_cents}

    def check(intent: Intent, context: ExecContext) -> CheckResult:
        conn = _authenticated(database, context.secret("invoices_api_key"))
        try:
            row = conn.execute("SELECT invoice_id, old_amount_cents, new_amount_cents FROM applied "
                               "WHERE idempotency_key = ?", (intent.scoped_key,)).fetchone()
        finally:
            conn.close()
        if row is None:
            return CheckResult("not_applied", reason="the invoices database has no write with this key")
        return CheckResult("applied", {"invoice_id": row[0], "old_amount_cents": row[1], "new_amount_cents": row[2]},
                           "the invoices database recorded this key")

    return Action(
        name="update_invoice",
        description="Set the amount of one of the principal's invoices (changes over 10% need review).",
        arguments=UpdateInvoice,
        authorize=authorize,
        validate=validate,
        execute=execute,
        verdict="allow",
        check=check,
        secrets=("invoices_api_key",),
    )
