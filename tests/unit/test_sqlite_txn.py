"""immediate_transaction: the write lock at BEGIN, commit on success, rollback on any exception."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from contain.sqlite_txn import immediate_transaction


def _connect(path: Path, *, timeout: float = 5.0) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=timeout, isolation_level=None)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "t.db"
    conn = _connect(path)
    conn.execute("CREATE TABLE t (v INTEGER)")
    conn.close()
    yield path


def _values(path: Path) -> list[int]:
    conn = _connect(path)
    try:
        return [row[0] for row in conn.execute("SELECT v FROM t ORDER BY v")]
    finally:
        conn.close()


def test_a_block_that_ends_normally_is_committed(db: Path) -> None:
    conn = _connect(db)
    with immediate_transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
    assert not conn.in_transaction
    conn.close()
    assert _values(db) == [1]


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_block_that_raises_anything_is_rolled_back_and_the_error_propagates(db: Path, error: BaseException) -> None:
    conn = _connect(db)
    with pytest.raises(type(error)), immediate_transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        raise error
    assert not conn.in_transaction
    conn.close()
    assert _values(db) == []


def test_the_write_lock_is_taken_at_begin_so_a_second_writer_cannot_start(db: Path) -> None:
    first, second = _connect(db), _connect(db, timeout=0.0)
    with immediate_transaction(first):
        with pytest.raises(sqlite3.OperationalError, match="locked"), immediate_transaction(second):
            pass  # pragma: no cover - BEGIN IMMEDIATE must already fail
        assert not second.in_transaction
    first.close()
    second.close()


def test_a_failing_commit_rolls_back_and_raises(db: Path) -> None:
    conn = _connect(db)
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE child (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)")
    conn.execute("PRAGMA foreign_keys=ON")
    with pytest.raises(sqlite3.IntegrityError), immediate_transaction(conn):
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("INSERT INTO child VALUES (42)")  # checked only at COMMIT
    assert not conn.in_transaction
    conn.close()
    assert _values(db) == []


def test_a_connection_that_manages_its_own_transactions_is_refused(db: Path) -> None:
    conn = sqlite3.connect(db)  # default isolation_level: Python's implicit transactions
    with pytest.raises(ValueError, match="isolation_level=None"), immediate_transaction(conn):
        pass  # pragma: no cover
    conn.close()


def test_a_transaction_cannot_nest(db: Path) -> None:
    conn = _connect(db)
    with immediate_transaction(conn), pytest.raises(ValueError, match="nest"), immediate_transaction(conn):
        pass  # pragma: no cover
    conn.close()
