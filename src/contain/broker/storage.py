"""Durable storage for the ledger, idempotency records and grant uses: SQLite (WAL) or PostgreSQL.

One interface, ``Store``, with two backends that share every query (written with ``?``; the
PostgreSQL backend rewrites them to ``%s``). All writes go through ``Store.run(fn)``: one writer
thread takes every queued function, runs each inside its own SAVEPOINT of one transaction, and
commits once (group commit, as PostgreSQL's ``commit_delay``): a function's effects are durable
when ``run`` returns, and one failing function rolls back only its own savepoint.

What is enforced: appends are serialised (SQLite ``BEGIN IMMEDIATE``; PostgreSQL
``pg_advisory_xact_lock``) so the chain head read and the append are atomic; SQLite runs with
``synchronous=FULL`` (an fsync per commit in WAL mode) and PostgreSQL with its default
``synchronous_commit=on``. What is not: the database itself is not tamper-proof; that is what
the hash chain and the signed checkpoints in ``ledger`` are for.
"""

from __future__ import annotations

import contextlib
import json
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from contain.broker.idempotency import IdempotencyRecord
from contain.broker.ledger import GENESIS_HASH, LedgerEntry

__all__ = ["PostgresStore", "SqliteStore", "Store", "Txn", "open_store"]

T = TypeVar("T")

_SCHEMA = (
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
_COLUMNS = "seq, prev_hash, time, kind, task, principal, action, idempotency_key, argument_digest, detail, hash"


class Cursorish(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Txn:
    """The operations allowed inside one ``Store.run`` function (one savepoint)."""

    def __init__(self, cursor: Any, placeholder: str) -> None:
        self._cur = cursor
        self._ph = placeholder
        self._head: tuple[int, str] | None = None  # cached within one transaction; reset on rollback

    def forget_head(self) -> None:
        self._head = None

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

    def append(self, entry: LedgerEntry) -> None:
        d = entry.to_dict()
        d["detail"] = json.dumps(d["detail"], sort_keys=True)
        self._exec(
            f"INSERT INTO ledger ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [d[c.strip()] for c in _COLUMNS.split(",")],
        )
        self._head = (entry.seq, entry.hash)

    def get_record(self, principal: str, key: str) -> IdempotencyRecord | None:
        row = self._exec(
            "SELECT principal, key, action, argument_digest, state, status_code, response, intent_seq "
            "FROM idempotency WHERE principal = ? AND key = ?",
            (principal, key),
        ).fetchone()
        return None if row is None else _record(row)

    def put_record(self, record: IdempotencyRecord) -> None:
        self._exec(
            "INSERT INTO idempotency (principal, key, action, argument_digest, state, status_code, response, "
            "intent_seq) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (principal, key) DO UPDATE SET "
            "state = excluded.state, status_code = excluded.status_code, response = excluded.response",
            (
                record.principal,
                record.key,
                record.action,
                record.argument_digest,
                record.state,
                record.status_code,
                json.dumps(dict(record.response), sort_keys=True),
                record.intent_seq,
            ),
        )

    def delete_record(self, principal: str, key: str) -> None:
        self._exec("DELETE FROM idempotency WHERE principal = ? AND key = ?", (principal, key))

    def in_flight(self) -> list[IdempotencyRecord]:
        rows = self._exec(
            "SELECT principal, key, action, argument_digest, state, status_code, response, intent_seq "
            "FROM idempotency WHERE state = 'in_flight' ORDER BY intent_seq"
        ).fetchall()
        return [_record(r) for r in rows]

    def entry(self, seq: int) -> LedgerEntry | None:
        row = self._exec(f"SELECT {_COLUMNS} FROM ledger WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else _entry(row)

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


def _entry(row: Sequence[Any]) -> LedgerEntry:
    names = [c.strip() for c in _COLUMNS.split(",")]
    data = dict(zip(names, row, strict=True))
    data["detail"] = json.loads(data["detail"])
    return LedgerEntry.from_dict(data)


class Store:
    """Base: the group-commit writer thread and the read side. Backends supply connections."""

    placeholder = "?"
    name = "store"

    def __init__(self, *, max_batch: int = 64) -> None:
        self._queue: queue.Queue[tuple[Callable[[Txn], Any], Future[Any]] | None] = queue.Queue()
        self._max_batch = max_batch
        self._writer: threading.Thread | None = None
        self._closed = False
        self.on_commit: Callable[[tuple[int, str]], None] | None = None
        self.commits = 0
        self._local = threading.local()

    # backends implement these
    def _connect(self) -> Any:
        raise NotImplementedError

    def _begin(self, conn: Any, cursor: Any) -> None:
        raise NotImplementedError

    def _create_schema(self) -> None:
        conn = self._connect()
        try:
            cur = conn.cursor()
            for statement in _SCHEMA:
                cur.execute(statement)
            conn.commit()
        finally:
            conn.close()

    def start(self) -> None:
        """Create the schema and start the writer thread."""
        self._create_schema()
        ready: Future[None] = Future()
        self._writer = threading.Thread(target=self._write_loop, args=(ready,), name=f"{self.name}-writer", daemon=True)
        self._writer.start()
        ready.result()

    def close(self) -> None:
        if self._writer is not None and not self._closed:
            self._closed = True
            self._queue.put(None)
            self._writer.join()

    def run(self, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` in the writer's next transaction and return its result once committed."""
        if self._writer is None or self._closed or not self._writer.is_alive():
            raise RuntimeError("the store is not running (not started, closed, or its writer died)")
        future: Future[T] = Future()
        self._queue.put((fn, future))
        return future.result()

    def _write_loop(self, ready: Future[None]) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                batch = [item]
                while len(batch) < self._max_batch:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._queue.put(None)
                        break
                    batch.append(more)
                self._commit_batch(conn, batch)
        finally:
            conn.close()
            self._fail_queued()

    def _fail_queued(self) -> None:
        """The writer is gone: nothing queued will ever commit, so say so instead of hanging."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None and not item[1].done():
                item[1].set_exception(RuntimeError("the store's writer stopped before this commit"))

    def _commit_batch(self, conn: Any, batch: list[tuple[Callable[[Txn], Any], Future[Any]]]) -> None:
        results: list[tuple[Future[Any], bool, Any]] = []
        cursor = conn.cursor()
        try:
            self._begin(conn, cursor)
            txn = Txn(cursor, self.placeholder)
            isolate = len(batch) > 1  # a lone function needs no savepoint: a failure rolls back all
            for number, (fn, future) in enumerate(batch):
                if isolate:
                    cursor.execute(f"SAVEPOINT s{number}")
                try:
                    value = fn(txn)
                except Exception as exc:  # the function's own failure: undo only its savepoint
                    if isolate:
                        cursor.execute(f"ROLLBACK TO SAVEPOINT s{number}")
                    else:
                        conn.rollback()
                        self._begin(conn, cursor)
                    txn.forget_head()
                    results.append((future, False, exc))
                else:
                    results.append((future, True, value))
                if isolate:
                    cursor.execute(f"RELEASE SAVEPOINT s{number}")
            head = txn.head()
            conn.commit()
            self.commits += 1
        except BaseException as exc:
            with contextlib.suppress(Exception):  # a broken connection: the failure below is what counts
                conn.rollback()
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        if self.on_commit is not None:
            self.on_commit(head)
        for future, ok, value in results:
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    # -- read side (own connection per call; never blocks the writer for long) --

    def read(self, fn: Callable[[Txn], T]) -> T:
        """Run a read-only ``fn`` on this thread's own connection, outside the writer's queue.

        It sees the last committed state; anything decided from it must be re-checked inside
        ``run`` (the broker re-checks the idempotency record when it claims the key).
        """
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect_reader()
        cursor = conn.cursor()
        try:
            return fn(Txn(cursor, self.placeholder))
        finally:
            conn.rollback()

    def _connect_reader(self) -> Any:
        return self._connect()

    def entries(self, *, after_seq: int = 0, limit: int | None = None) -> Iterator[LedgerEntry]:
        conn = self._connect()
        try:
            cur = conn.cursor()
            sql = f"SELECT {_COLUMNS} FROM ledger WHERE seq > ? ORDER BY seq"
            params: list[Any] = [after_seq]
            if limit is not None:
                sql += " LIMIT ?"
                params.append(limit)
            cur.execute(sql.replace("?", self.placeholder), params)
            for row in cur.fetchall():
                yield _entry(row)
        finally:
            conn.close()

    def raw_rows(self) -> list[dict[str, Any]]:
        """Every ledger row as stored, in seq order, without trusting it (for ``verify`` and export).

        ``detail`` is parsed when it is JSON and left as text otherwise, so a damaged row is
        reported by the verifier instead of stopping the read.
        """
        names = [c.strip() for c in _COLUMNS.split(",")]
        conn = self._connect()
        try:
            cur = conn.cursor()
            cur.execute(f"SELECT {_COLUMNS} FROM ledger ORDER BY seq")
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        finally:
            conn.close()
        for row in rows:
            with contextlib.suppress(ValueError, TypeError):
                row["detail"] = json.loads(row["detail"])
        return rows


class SqliteStore(Store):
    """SQLite in WAL mode with synchronous=FULL (durable at every commit)."""

    name = "sqlite"

    def __init__(self, path: str, *, max_batch: int = 64) -> None:
        super().__init__(max_batch=max_batch)
        self.path = path

    def _connect(self) -> Any:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return _SqliteConn(conn)

    def _begin(self, conn: Any, cursor: Any) -> None:
        cursor.execute("BEGIN IMMEDIATE")


class _SqliteConn:
    """sqlite3 in autocommit mode with explicit BEGIN, so SAVEPOINTs behave as in PostgreSQL."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def cursor(self) -> sqlite3.Cursor:
        return self._conn.cursor()

    def commit(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()


class PostgresStore(Store):
    """PostgreSQL through psycopg 3; writers serialise on a transaction-scoped advisory lock."""

    name = "postgres"
    placeholder = "%s"
    LOCK_ID = 0x636F6E74  # "cont"

    def __init__(self, dsn: str, *, max_batch: int = 64) -> None:
        super().__init__(max_batch=max_batch)
        self.dsn = dsn

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn)

    def _begin(self, conn: Any, cursor: Any) -> None:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (self.LOCK_ID,))


def open_store(storage: Mapping[str, str]) -> Store:
    """Build a store from the config's ``storage`` mapping: ``{sqlite: path}`` or ``{postgres: dsn}``."""
    if "sqlite" in storage:
        return SqliteStore(storage["sqlite"])
    if "postgres" in storage:
        return PostgresStore(storage["postgres"])
    raise ValueError("storage must name sqlite or postgres")
