"""Durable storage for the ledger, idempotency records and grant uses: SQLite (WAL) or PostgreSQL.

One interface, ``Store``, with two backends that share every query (written with ``?``; the
PostgreSQL backend rewrites them to ``%s``). All writes go through ``Store.run(fn)``, a group
commit without a writer thread: the calling thread that finds no commit in progress leads, runs
every queued function in one transaction and commits once, then hands the lead to a caller that
queued meanwhile. A function's effects are durable when ``run`` returns, and one failing
function rolls back only its own effects (the batch is replayed with a savepoint per function).

One broker per store: ``start`` takes an instance lock (SQLite: ``flock`` on ``<db>-broker.lock``;
PostgreSQL: a session advisory lock on a connection of its own) and a second broker refuses with
``LedgerInUse``, waiting a few seconds first for one that was just killed to finish exiting. A
broker reconciles whatever is in flight when it starts, which is only safe if nobody else is
writing; holding the lock also lets the store keep the chain head between transactions instead
of reading it in every one.

File modes (SQLite): ``start`` creates the database's directory 0700 when it is missing and
refuses (``BrokerStateUnsafe``) a directory that group or others may write, or any ancestor
that others may write without the sticky bit: whoever can rename entries there can swap the
database or its WAL. The database file is created 0600 (through ``O_NOFOLLOW``) before SQLite
opens it, and an existing one, its ``-wal``, ``-shm`` and ``-journal`` are set to 0600; SQLite
creates the WAL and shared-memory files with the database file's mode, so they follow it.

What is enforced: appends are serialised (SQLite ``BEGIN IMMEDIATE``; PostgreSQL
``pg_advisory_xact_lock``) so the chain head read and the append are atomic; SQLite runs with
``synchronous=FULL`` (an fsync per commit in WAL mode) and PostgreSQL with its default
``synchronous_commit=on``. What is not: the database itself is not tamper-proof; that is what
the hash chain and the signed checkpoints in ``ledger`` are for.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from contain._log import LazyLogger
from contain.broker.idempotency import IdempotencyRecord
from contain.broker.ledger import GENESIS_HASH, LedgerEntry
from contain.errors import BrokerStateUnsafe, LedgerInUse

__all__ = ["PostgresStore", "SqliteStore", "Store", "Txn", "check_private_directory", "open_store"]

T = TypeVar("T")
log = LazyLogger(__name__)

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
_NAMES = tuple(c.strip() for c in _COLUMNS.split(","))


class Cursorish(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


_RECORD_COLUMNS = "principal, key, action, argument_digest, state, status_code, response, intent_seq"
_Key = tuple[str, str]


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
        self._records: dict[_Key, tuple[IdempotencyRecord, str] | None] = {}  # None: deleted
        self._deleted: set[_Key] = set()
        self._fetched: dict[_Key, IdempotencyRecord | None] = {}  # read ahead; dropped once written

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

    def prefetch(self, keys: Sequence[_Key]) -> None:
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
            values = ",".join([_row_placeholders(len(_NAMES))] * len(rows))
            self._exec(f"INSERT INTO ledger ({_COLUMNS}) VALUES {values}", [v for row in rows for v in row])
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


def _entry(row: Sequence[Any]) -> LedgerEntry:
    data = dict(zip(_NAMES, row, strict=True))
    data["detail"] = json.loads(data["detail"])
    return LedgerEntry.from_dict(data)


_Applied = tuple[list[tuple["_Waiter", Any, BaseException | None]], tuple[int, str]]


class _Waiter:
    """One queued ``Store.run`` call: its function, its result, and the lock its thread sleeps on.

    ``wake`` is created held; the thread that queued the call blocks on it until the leader
    releases it, either because the call committed or because this thread now leads.
    """

    __slots__ = ("error", "finished", "fn", "keys", "value", "wake")

    def __init__(self, fn: Callable[[Txn], Any], keys: Sequence[_Key]) -> None:
        self.fn = fn
        self.keys = keys
        self.finished = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()

    def settle(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error, self.finished = value, error, True

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class Store:
    """Base: leader-based group commit and the read side. Backends supply connections."""

    placeholder = "?"
    name = "store"

    def __init__(self, *, max_batch: int = 64, instance_wait_s: float = 5.0) -> None:
        self._max_batch = max_batch
        self._instance_wait_s = instance_wait_s
        self._conn: Any = None
        self._head: tuple[int, str] | None = None  # after each commit; None when unknown (a rollback)
        self._mutex = threading.Lock()
        self._idle = threading.Condition(self._mutex)
        self._pending: list[_Waiter] = []
        self._leading = False
        self._closed = False
        self.on_commit: Callable[[tuple[int, str]], None] | None = None
        self.commits = 0

    # backends implement these
    def _connect(self) -> Any:
        raise NotImplementedError

    def _begin(self, conn: Any, cursor: Any) -> None:
        raise NotImplementedError

    def _try_lock_instance(self) -> str | None:
        """Take the instance lock without waiting; None when taken, else who holds it (for the message)."""
        raise NotImplementedError

    def _unlock_instance(self) -> None:
        raise NotImplementedError

    def _lock_instance(self) -> None:
        deadline = time.monotonic() + self._instance_wait_s
        while (holder := self._try_lock_instance()) is not None:
            if time.monotonic() >= deadline:
                raise LedgerInUse(
                    f"another broker is serving this ledger ({holder}); a second one would reconcile "
                    "its writes in flight as crashed",
                    "stop the running broker first, or give this one its own storage",
                )
            time.sleep(0.05)

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
        """Take the instance lock, create the schema and open the write connection.

        Raises:
            LedgerInUse: another broker holds this store (after waiting ``instance_wait_s``).
        """
        try:
            self._lock_instance()
            self._create_schema()
            self._conn = self._connect()
        except BaseException:
            self._unlock_instance()  # a refused or failed start keeps no descriptor or session
            raise

    def close(self) -> None:
        """Refuse new calls, let the current leader finish what is queued, close the connection."""
        with self._mutex:
            if self._conn is None or self._closed:
                return
            self._closed = True
            while self._leading:
                self._idle.wait()
        try:
            self._conn.close()
        finally:
            self._unlock_instance()

    def run(self, fn: Callable[[Txn], T], *, records: Sequence[tuple[str, str]] = ()) -> T:
        """Run ``fn`` in the next transaction and return its result once committed (durable).

        Group commit without a writer thread: the caller that finds no commit in progress leads;
        it takes every queued call (up to ``max_batch``), runs them in one transaction, commits
        once and wakes their callers, then hands the lead to the oldest call queued meanwhile.
        A lone caller commits on its own thread, so an uncontended write costs no thread handoff.
        ``fn`` may run twice (see ``_commit_batch``), so it must act only through its ``Txn``.
        ``records`` names the (principal, key) idempotency records ``fn`` will read: the batch
        reads all of them in one query.
        """
        waiter = _Waiter(fn, records)
        with self._mutex:
            if self._conn is None or self._closed:
                raise RuntimeError("the store is not running (not started, or closed)")
            self._pending.append(waiter)
            lead = not self._leading
            self._leading = True
        if not lead:
            waiter.wake.acquire()  # released when committed, or when this call is handed the lead
        if not waiter.finished:
            self._lead()
        return cast(T, waiter.result())

    def run_all(
        self, calls: Sequence[tuple[Callable[[Txn], Any], Sequence[tuple[str, str]]]]
    ) -> list[tuple[Any, BaseException | None]]:
        """Run every ``(fn, records)`` of ``calls`` as ``run`` would, committed together when no other
        thread is queued; returns each call's ``(value, error)`` in order once all are durable.

        For a server thread that holds many requests: one call instead of a thread per write. A
        function's own exception is its error only; a failed commit is every call's error.
        """
        waiters = [_Waiter(fn, records) for fn, records in calls]
        if not waiters:
            return []
        with self._mutex:
            if self._conn is None or self._closed:
                raise RuntimeError("the store is not running (not started, or closed)")
            self._pending.extend(waiters)
            lead = not self._leading
            self._leading = True
        for number, waiter in enumerate(waiters):
            if number > 0 or not lead:
                waiter.wake.acquire()  # released when committed, or when this call is handed the lead
            if not waiter.finished:
                self._lead(limit=max(self._max_batch, len(waiters)))
        return [(waiter.value, waiter.error) for waiter in waiters]

    def _lead(self, limit: int | None = None) -> None:
        """Commit one batch (this thread's call is first in it), then pass the lead on or stop leading."""
        size = self._max_batch if limit is None else limit
        with self._mutex:
            batch = self._pending[:size]
            del self._pending[:size]
        try:
            self._commit_batch(self._conn, batch)
        finally:
            with self._mutex:
                successor = self._pending[0] if self._pending else None
                if successor is None:
                    self._leading = False
                    if self._closed:
                        self._idle.notify_all()  # close() waits for the last commit
            if successor is not None:
                successor.wake.release()  # it leads the next batch
            for waiter in batch[1:]:  # batch[0] is this thread's own call
                waiter.wake.release()

    def _commit_batch(self, conn: Any, batch: list[_Waiter]) -> None:
        """Run the batch in one transaction and settle every waiter; re-raises only non-Exceptions.

        The batch first runs without savepoints (each costs two statements, and every statement
        lets other threads take the GIL while the leader holds the write lock). When a function
        fails, everything is rolled back and the batch runs again with one savepoint per function,
        so the failure undoes only its own effects; functions act only through ``Txn``, so running
        one again is safe.
        """
        try:
            applied = self._apply(conn, batch, isolate=False)
            if applied is None:
                applied = self._apply(conn, batch, isolate=True)
            assert applied is not None  # with savepoints every failure is contained
            results, head = applied
            conn.commit()
            self.commits += 1
            self._head = head
        except BaseException as exc:
            self._head = None  # read it again from the database next time
            with contextlib.suppress(Exception):  # a broken connection: the failure below is what counts
                conn.rollback()
            for waiter in batch:
                waiter.settle(error=exc)
            if not isinstance(exc, Exception):
                raise
            return
        try:
            if self.on_commit is not None:
                self.on_commit(head)
        except Exception:  # the batch is committed; a failed checkpoint must not turn it into a failure
            log.exception("the commit hook failed (no checkpoint for head %s)", head[0])
        for waiter, value, error in results:
            waiter.settle(value, error)

    def _apply(self, conn: Any, batch: list[_Waiter], *, isolate: bool) -> _Applied | None:
        """Run every function in one open transaction; None when one failed and isolation is needed."""
        cursor = conn.cursor()
        self._begin(conn, cursor)
        txn = Txn(cursor, self.placeholder, self._head)
        txn.prefetch([key for waiter in batch for key in waiter.keys])
        results: list[tuple[_Waiter, Any, BaseException | None]] = []
        for number, waiter in enumerate(batch):
            if isolate:
                cursor.execute(f"SAVEPOINT s{number}")
            try:
                value = waiter.fn(txn)
                if isolate:
                    txn.flush()  # inside the savepoint, so a failing write is this function's failure
                results.append((waiter, value, None))
            except Exception as exc:  # the function's own failure: undo only its effects
                if isolate:
                    cursor.execute(f"ROLLBACK TO SAVEPOINT s{number}")
                else:
                    conn.rollback()
                    if len(batch) > 1:
                        return None
                    self._begin(conn, cursor)
                txn.forget_head()
                results.append((waiter, None, exc))
            if isolate:
                cursor.execute(f"RELEASE SAVEPOINT s{number}")
        head = txn.head()
        try:
            txn.flush()
        except Exception:
            if isolate or len(batch) == 1:
                raise  # nothing to separate: the whole batch fails
            conn.rollback()
            return None
        return results, head

    # -- read side (own connection per call, for verify, export and show) --

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
        conn = self._connect()
        try:
            cur = conn.cursor()
            cur.execute(f"SELECT {_COLUMNS} FROM ledger ORDER BY seq")
            rows = [dict(zip(_NAMES, row, strict=True)) for row in cur.fetchall()]
        finally:
            conn.close()
        for row in rows:
            with contextlib.suppress(ValueError, TypeError):
                row["detail"] = json.loads(row["detail"])
        return rows


_DB_MODE = 0o600
_SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's own files beside the database


def check_private_directory(path: str | os.PathLike[str], *, what: str) -> None:
    """Refuse a directory whose entries other users could replace.

    ``path`` must be a directory owned by root or by this process's user and not writable by
    group or others, and no ancestor may be writable by others unless it has the sticky bit
    (as /tmp does: others cannot rename what they do not own there).

    Raises:
        BrokerStateUnsafe: the directory or an ancestor fails the rule (named, with its mode).
    """
    real = Path(os.path.realpath(path))
    owners = (0, os.geteuid())
    try:
        info = os.lstat(real)
    except FileNotFoundError as exc:
        raise BrokerStateUnsafe(f"{what} {real} does not exist", f"create {real} with mode 0700") from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in owners or info.st_mode & 0o022:
        raise BrokerStateUnsafe(
            f"{what} {real} (mode {stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid}) can be changed by "
            "other users, who could replace what the broker keeps there",
            f"use a directory owned by the broker's user and not writable by others (chmod go-w {real})",
        )
    for ancestor in real.parents:
        info = os.lstat(ancestor)
        if info.st_mode & 0o002 and not info.st_mode & stat.S_ISVTX:
            raise BrokerStateUnsafe(
                f"{ancestor}, above {what} {real}, is writable by everyone without the sticky bit",
                f"move the broker's files under a directory no other user can rename (chmod o-w {ancestor})",
            )


def _make_private_file(path: str, *, create: bool) -> None:
    """Create ``path`` 0600 (without following a symlink), or set an existing one to 0600."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), _DB_MODE)
    except FileNotFoundError:
        return  # a side file that does not exist (yet): SQLite creates it with the database's mode
    except OSError as exc:
        raise BrokerStateUnsafe(
            f"cannot open the broker database file {path} safely: {exc.strerror}",
            "it must be a regular file, not a symlink",
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BrokerStateUnsafe(f"{path} is not a regular file", "remove it; the broker creates its files")
        if stat.S_IMODE(info.st_mode) != _DB_MODE:
            os.fchmod(fd, _DB_MODE)
    finally:
        os.close(fd)


class SqliteStore(Store):
    """SQLite in WAL mode with synchronous=FULL (durable at every commit); files 0600 (module docstring)."""

    name = "sqlite"

    def __init__(self, path: str, *, max_batch: int = 64, instance_wait_s: float = 5.0) -> None:
        super().__init__(max_batch=max_batch, instance_wait_s=instance_wait_s)
        self.path = path
        self.lock_path = path + "-broker.lock"
        self._lock_fd: int | None = None

    def start(self) -> None:
        """Make the database's directory and files private, then start (see ``Store.start``).

        Raises:
            BrokerStateUnsafe: the directory can be changed by others, or a file is not regular.
            LedgerInUse: another broker holds this store.
        """
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.lexists(directory):
            os.makedirs(directory, mode=0o700)
        check_private_directory(directory, what="the broker database's directory")
        _make_private_file(self.path, create=True)
        for suffix in _SIDE_FILES:
            _make_private_file(self.path + suffix, create=False)
        super().start()

    def _try_lock_instance(self) -> str | None:
        if self._lock_fd is None:
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock_fd, 32, 0).decode(errors="replace").strip()
            return f"{self.lock_path} is locked by pid {holder or '?'}"
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)
        return None

    def _unlock_instance(self) -> None:
        # closing drops the flock; the file stays (removing it would race a broker taking it)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

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
    LOCK_ID = 0x636F6E74  # "cont": transaction-scoped, serialises appends
    INSTANCE_LOCK_ID = 0x636F6E62  # "conb": session-scoped, one broker per database

    def __init__(self, dsn: str, *, max_batch: int = 64, instance_wait_s: float = 5.0) -> None:
        super().__init__(max_batch=max_batch, instance_wait_s=instance_wait_s)
        self.dsn = dsn
        self._lock_conn: Any = None

    def _try_lock_instance(self) -> str | None:
        # A connection of its own: the lock lives as long as this session, whatever the write
        # connection's transactions do, and the server drops it when a killed broker's socket closes.
        if self._lock_conn is None:
            import psycopg

            self._lock_conn = psycopg.connect(self.dsn, autocommit=True)
        row = self._lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (self.INSTANCE_LOCK_ID,)).fetchone()
        if row is not None and row[0]:
            return None
        held = self._lock_conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND granted",
            (self.INSTANCE_LOCK_ID,),
        ).fetchone()
        return f"PostgreSQL advisory lock {self.INSTANCE_LOCK_ID:#x} is held by server pid {held[0] if held else '?'}"

    def _unlock_instance(self) -> None:
        if self._lock_conn is not None:
            with contextlib.suppress(Exception):  # closing the session releases the lock anyway
                self._lock_conn.close()
            self._lock_conn = None

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
