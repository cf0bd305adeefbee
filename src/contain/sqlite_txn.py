"""One write transaction on a SQLite connection: ``BEGIN IMMEDIATE``, then COMMIT or ROLLBACK.

The gate's review store, its grant-use counter and the MCP pin store all read a row and then
write depending on what they read (a request still ``pending``, a grant not yet used up, a pin
not yet recorded). ``immediate_transaction`` takes the database's write lock *before* that read,
so two processes cannot both see the old row and both act on it.

What is enforced here:

* the write lock is taken at ``BEGIN IMMEDIATE`` (a waiter blocks, up to the connection's busy
  timeout, then gets ``sqlite3.OperationalError``: the caller fails closed);
* the block's changes are committed only when the block ends normally; any exception, including
  ``KeyboardInterrupt`` and a failing COMMIT, rolls them back and propagates;
* the connection must be in autocommit mode (``isolation_level=None``): otherwise Python's
  ``sqlite3`` opens and commits transactions of its own and the boundaries here would not hold,
  so such a connection is refused with ``ValueError``.

What is not: opening or closing the connection (the caller owns it), the busy timeout, and the
journal mode (WAL is each store's choice).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["immediate_transaction"]


@contextmanager
def immediate_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Run the ``with`` block as one write transaction on ``conn``; yields ``conn``.

    Raises:
        ValueError: ``conn`` is not in autocommit mode, or already inside a transaction.
        sqlite3.OperationalError: the write lock was not free within the busy timeout.
    """
    if conn.isolation_level is not None:
        raise ValueError("immediate_transaction needs a connection opened with isolation_level=None")
    if conn.in_transaction:
        raise ValueError("immediate_transaction cannot nest inside an open transaction")
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
