"""``PostgresStore``: the broker's storage in a PostgreSQL database, through psycopg 3.

What is enforced: appends are serialised by a transaction-scoped advisory lock
(``pg_advisory_xact_lock``), so the chain head read and the append are atomic; commits use the
server's default ``synchronous_commit=on``; one broker per database (a session advisory lock on a
connection of its own, dropped by the server when a killed broker's socket closes). What is not:
the database is not tamper-proof (the hash chain and signed checkpoints in ``ledger`` are), and
who may connect (the DSN's credentials and ``pg_hba.conf`` decide). psycopg is imported only
when a PostgreSQL store is used.
"""

from __future__ import annotations

import contextlib
from typing import Any

from contain.broker.storage.group_commit import Store

__all__ = ["PostgresStore"]


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
