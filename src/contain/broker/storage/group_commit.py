"""``Store``: group commit over one write connection, the instance lock, and the read side.

All writes go through ``Store.run(fn)``, a group commit without a writer thread: the calling
thread that finds no commit in progress leads, runs every queued function in one transaction and
commits once, then hands the lead to a caller that queued meanwhile. A function's effects are
durable when ``run`` returns, and one failing function rolls back only its own effects (the batch
is replayed with a savepoint per function).

One broker per store: ``start`` takes the backend's instance lock and a second broker refuses
with ``LedgerInUse``, waiting ``instance_wait_s`` first for one that was just killed to finish
exiting. Holding the lock also lets the store keep the chain head between transactions instead
of reading it in every one.

Backends (``sqlite.SqliteStore``, ``postgres.PostgresStore``) supply connections, the statement
that opens a serialised write transaction, and the instance lock. What is not here: SQL text
(``sql``), file modes (``sqlite``), and tamper evidence (the hash chain in ``ledger``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from contain._log import LazyLogger
from contain.broker.ledger import LedgerEntry
from contain.broker.storage.sql import COLUMN_NAMES, COLUMNS, SCHEMA, Key, Txn, entry_from_row
from contain.errors import LedgerInUse

__all__ = ["Store"]

T = TypeVar("T")
log = LazyLogger(__name__)


_Applied = tuple[list[tuple["_Waiter", Any, BaseException | None]], tuple[int, str]]


class _Waiter:
    """One queued ``Store.run`` call: its function, its result, and the lock its thread sleeps on.

    ``wake`` is created held; the thread that queued the call blocks on it until the leader
    releases it, either because the call committed or because this thread now leads.
    """

    __slots__ = ("error", "finished", "fn", "keys", "value", "wake")

    def __init__(self, fn: Callable[[Txn], Any], keys: Sequence[Key]) -> None:
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
            for statement in SCHEMA:
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
            sql = f"SELECT {COLUMNS} FROM ledger WHERE seq > ? ORDER BY seq"
            params: list[Any] = [after_seq]
            if limit is not None:
                sql += " LIMIT ?"
                params.append(limit)
            cur.execute(sql.replace("?", self.placeholder), params)
            for row in cur.fetchall():
                yield entry_from_row(row)
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
            cur.execute(f"SELECT {COLUMNS} FROM ledger ORDER BY seq")
            rows = [dict(zip(COLUMN_NAMES, row, strict=True)) for row in cur.fetchall()]
        finally:
            conn.close()
        for row in rows:
            with contextlib.suppress(ValueError, TypeError):
                row["detail"] = json.loads(row["detail"])
        return rows
