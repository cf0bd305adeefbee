"""The broker's SQL: the schema, and ``Txn``, the reads and writes one ``Store.run`` function may do.

Every query is written once with ``?`` placeholders; ``Txn`` rewrites them for a backend that uses
another (PostgreSQL: ``%s``). Ledger and idempotency writes are buffered and written by ``flush``
in one statement per table. Rows are turned into ``LedgerEntry`` and ``IdempotencyRecord`` values
here and nowhere else.

What is not here: transactions, locks and commits (``group_commit.Store`` and the backends), and
any judgement of what a row says (the hash chain is verified in ``ledger``/``verification``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from contain.broker.idempotency import IdempotencyRecord
from contain.broker.ledger import GENESIS_HASH, LedgerEntry

__all__ = ["COLUMNS", "COLUMN_NAMES", "SCHEMA", "Key", "Txn", "entry_from_row"]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ledger (
        seq BIGINT PRIMARY KEY, prev_hash TEXT NOT NULL, time DOUBLE PRECISION NOT NULL,
        kind TEXT NOT NULL, task TEXT NOT NULL, principal TEXT NOT NULL, action TEXT NOT NULL,
        idempotency_key TEXT NOT NULL, argument_digest TEXT NOT NULL, detail TEXT NOT NULL,
        hash TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS idempotency (
        principal TEXT NOT NULL, key TEXT NOT NULL, action TEXT NOT NULL,
        argument_digest TEXT NOT NULL, state TEXT NOT NULL, status_code INTEGER NOT NULL,
        response TEXT NOT NULL, intent_seq BIGINT NOT NULL, PRIMARY KEY (principal, key))""",
    "CREATE INDEX IF NOT EXISTS idempotency_state ON idempotency (state)",
    "CREATE TABLE IF NOT EXISTS grant_uses (grant_id TEXT PRIMARY KEY, used INTEGER NOT NULL)",
)
COLUMNS = "seq, prev_hash, time, kind, task, principal, action, idempotency_key, argument_digest, detail, hash"
COLUMN_NAMES = tuple(c.strip() for c in COLUMNS.split(","))


class Cursorish(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


_RECORD_COLUMNS = "principal, key, action, argument_digest, state, status_code, response, intent_seq"
Key = tuple[str, str]


class Txn:
    """The operations allowed inside one ``Store.run`` function.

    Writes to the ledger and the idempotency table are buffered and written by ``flush`` in one
    statement per table (the store flushes before every commit): each statement costs the leader a
    GIL round trip, which other threads stretch. Reads see the buffered writes: ``head`` and
    ``get_record`` answer from the buffer, ``in_flight`` and ``entry`` flush first.
    """

    def __init__(self, cursor: Any, placeholder: str, head: tuple[int, str] | None = None) -> None:
        self._cur = cursor
        self._ph = placeholder
        self._head = head  # the store's head when known (it alone writes), else read once; reset on rollback
        self._entries: list[LedgerEntry] = []
        self._records: dict[Key, tuple[IdempotencyRecord, str] | None] = {}  # None: deleted
        self._deleted: set[Key] = set()
        self._fetched: dict[Key, IdempotencyRecord | None] = {}  # read ahead; dropped once written

    def forget_head(self) -> None:
        """Drop everything not yet written, and the cached head (after a rollback)."""
        self._head = None
        self.discard()

    def discard(self) -> None:
        self._entries.clear()
        self._records.clear()
        self._deleted.clear()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self._ph != "?":
            sql = sql.replace("?", self._ph)
        self._cur.execute(sql, tuple(params))
        return self._cur

    def head(self) -> tuple[int, str]:
        if self._head is None:
            row = self._exec("SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1").fetchone()
            self._head = (0, GENESIS_HASH) if row is None else (int(row[0]), str(row[1]))
        return self._head

    def append(self, *entries: LedgerEntry) -> None:
        """Append consecutive entries, already chained onto ``head()`` (written by ``flush``)."""
        if entries:
            self._entries.extend(entries)
            self._head = (entries[-1].seq, entries[-1].hash)

    def prefetch(self, keys: Sequence[Key]) -> None:
        """Read the records under ``keys`` in one query, for ``get_record`` to answer from."""
        wanted = sorted(set(keys) - set(self._fetched))
        if not wanted:
            return
        match = " OR ".join(["(principal = ? AND key = ?)"] * len(wanted))
        rows = self._exec(
            f"SELECT {_RECORD_COLUMNS} FROM idempotency WHERE {match}", [v for pair in wanted for v in pair]
        ).fetchall()
        self._fetched.update(dict.fromkeys(wanted))
        self._fetched.update({(str(row[0]), str(row[1])): _record(row) for row in rows})

    def get_record(self, principal: str, key: str) -> IdempotencyRecord | None:
        slot = (principal, key)
        if slot in self._records:
            buffered = self._records[slot]
            return None if buffered is None else replace(buffered[0], response=json.loads(buffered[1]))
        if slot in self._fetched:
            return self._fetched[slot]
        row = self._exec(
            f"SELECT {_RECORD_COLUMNS} FROM idempotency WHERE principal = ? AND key = ?", (principal, key)
        ).fetchone()
        return None if row is None else _record(row)

    def put_record(self, record: IdempotencyRecord) -> None:
        """Insert, or update state, status and response of the stored record (as SQL ON CONFLICT would)."""
        slot = (record.principal, record.key)
        self._fetched.pop(slot, None)
        earlier = self._records.get(slot)
        if earlier is not None:  # an update keeps the first insert's action, digest and intent_seq
            first = earlier[0]
            record = replace(first, state=record.state, status_code=record.status_code, response=record.response)
        self._records[slot] = (record, json.dumps(dict(record.response), sort_keys=True))

    def delete_record(self, principal: str, key: str) -> None:
        self._fetched.pop((principal, key), None)
        self._records[(principal, key)] = None
        self._deleted.add((principal, key))

    def flush(self) -> None:
        """Write what is buffered: deletions, then one INSERT per table."""
        for principal, key in sorted(self._deleted):
            self._exec("DELETE FROM idempotency WHERE principal = ? AND key = ?", (principal, key))
        if self._entries:
            rows = [_ledger_row(entry) for entry in self._entries]
            values = ",".join([_row_placeholders(len(COLUMN_NAMES))] * len(rows))
            self._exec(f"INSERT INTO ledger ({COLUMNS}) VALUES {values}", [v for row in rows for v in row])
        puts = [item for item in self._records.values() if item is not None]
        if puts:
            values = ",".join([_row_placeholders(8)] * len(puts))
            self._exec(
                f"INSERT INTO idempotency ({_RECORD_COLUMNS}) VALUES {values} ON CONFLICT (principal, key) DO UPDATE "
                "SET state = excluded.state, status_code = excluded.status_code, response = excluded.response",
                [v for record, text in puts for v in _record_row(record, text)],
            )
        self.discard()

    def in_flight(self) -> list[IdempotencyRecord]:
        self.flush()
        rows = self._exec(
            f"SELECT {_RECORD_COLUMNS} FROM idempotency WHERE state = 'in_flight' ORDER BY intent_seq"
        ).fetchall()
        return [_record(r) for r in rows]

    def entry(self, seq: int) -> LedgerEntry | None:
        self.flush()
        row = self._exec(f"SELECT {COLUMNS} FROM ledger WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else entry_from_row(row)

    def consume_use(self, grant_id: str, max_uses: int | None) -> bool:
        row = self._exec("SELECT used FROM grant_uses WHERE grant_id = ?", (grant_id,)).fetchone()
        used = 0 if row is None else int(row[0])
        if max_uses is not None and used >= max_uses:
            return False
        self._exec(
            "INSERT INTO grant_uses (grant_id, used) VALUES (?, 1) ON CONFLICT (grant_id) "
            "DO UPDATE SET used = grant_uses.used + 1",
            (grant_id,),
        )
        return True


def _row_placeholders(count: int) -> str:
    return "(" + ",".join("?" * count) + ")"


def _ledger_row(entry: LedgerEntry) -> tuple[Any, ...]:
    detail = entry.detail_json if entry.detail_json is not None else json.dumps(dict(entry.detail), sort_keys=True)
    return (
        entry.seq,
        entry.prev_hash,
        entry.time,
        entry.kind,
        entry.task,
        entry.principal,
        entry.action,
        entry.idempotency_key,
        entry.argument_digest,
        detail,
        entry.hash,
    )


def _record_row(record: IdempotencyRecord, response: str) -> tuple[Any, ...]:
    return (
        record.principal,
        record.key,
        record.action,
        record.argument_digest,
        record.state,
        record.status_code,
        response,
        record.intent_seq,
    )


def _record(row: Sequence[Any]) -> IdempotencyRecord:
    return IdempotencyRecord(
        principal=row[0],
        key=row[1],
        action=row[2],
        argument_digest=row[3],
        state=row[4],
        status_code=int(row[5]),
        response=json.loads(row[6]),
        intent_seq=int(row[7]),
    )


def entry_from_row(row: Sequence[Any]) -> LedgerEntry:
    data = dict(zip(COLUMN_NAMES, row, strict=True))
    data["detail"] = json.loads(data["detail"])
    return LedgerEntry.from_dict(data)

