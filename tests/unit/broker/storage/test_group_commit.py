"""Store: one transaction per batch, a failing function undoes only its own writes, durable on return."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contain.broker.idempotency import IdempotencyRecord
from contain.broker.storage import SqliteStore, Txn


def _record(key: str) -> IdempotencyRecord:
    return IdempotencyRecord("alice", key, "a", "sha256:d", "done", 200, {"key": key}, 1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(str(tmp_path / "state" / "broker.db"))
    s.start()
    yield s
    s.close()


def _stored_keys(store: SqliteStore) -> list[str]:
    return sorted(r.key for r in store.run(lambda t: [t.get_record("alice", k) for k in "abc"]) if r is not None)


def test_a_batch_commits_once_and_a_failing_function_undoes_only_its_own_writes(store: SqliteStore) -> None:
    def put(key: str, *, fail: bool = False) -> Callable[[Txn], str]:
        def fn(txn: Txn) -> str:
            txn.put_record(_record(key))
            if fail:
                raise LookupError(key)
            return key

        return fn

    commits = store.commits
    results = store.run_all([(put("a"), []), (put("b", fail=True), []), (put("c"), [])])
    assert store.commits == commits + 1
    assert [(value, type(error).__name__ if error else None) for value, error in results] == [
        ("a", None),
        (None, "LookupError"),
        ("c", None),
    ]
    assert _stored_keys(store) == ["a", "c"]


def test_a_write_is_committed_when_run_returns(store: SqliteStore) -> None:
    store.run(lambda t: t.put_record(_record("a")))
    conn = sqlite3.connect(store.path)  # another connection sees it: nothing is left to commit
    try:
        assert conn.execute("SELECT key FROM idempotency").fetchall() == [("a",)]
    finally:
        conn.close()


def test_a_closed_store_refuses_new_work(store: SqliteStore) -> None:
    store.close()
    with pytest.raises(RuntimeError, match="not running"):
        store.run(lambda t: None)
    with pytest.raises(RuntimeError, match="not running"):
        store.run_all([(lambda t: None, [])])
