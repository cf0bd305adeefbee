"""Txn: buffered writes that reads see, an update that keeps the first insert's fields, the head."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from contain.broker.idempotency import IdempotencyRecord
from contain.broker.ledger import GENESIS_HASH, chain, draft_entry, entry_subject
from contain.broker.storage.sql import SCHEMA, Txn

SUBJECT = entry_subject(task="t", principal="alice", action="a", idempotency_key="k", argument_digest="sha256:d")
IN_FLIGHT = IdempotencyRecord("alice", "t/k", "a", "sha256:d", "in_flight", 0, {}, 3)


@pytest.fixture
def cursor() -> Iterator[sqlite3.Cursor]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for statement in SCHEMA:
        conn.execute(statement)
    yield conn.cursor()
    conn.close()


def test_a_buffered_record_is_read_back_before_it_is_written(cursor: sqlite3.Cursor) -> None:
    txn = Txn(cursor, "?")
    txn.put_record(IN_FLIGHT)
    assert cursor.execute("SELECT count(*) FROM idempotency").fetchone() == (0,)
    assert txn.get_record("alice", "t/k") == IN_FLIGHT
    txn.flush()
    assert Txn(cursor, "?").get_record("alice", "t/k") == IN_FLIGHT


@pytest.mark.parametrize("flush_between", [False, True], ids=["buffered", "written"])
def test_an_update_keeps_the_first_inserts_action_digest_and_intent(cursor: sqlite3.Cursor, flush_between: bool) -> None:
    txn = Txn(cursor, "?")
    txn.put_record(IN_FLIGHT)
    if flush_between:
        txn.flush()
    txn.put_record(IdempotencyRecord("alice", "t/k", "other", "sha256:x", "done", 200, {"ok": True}, 99))
    txn.flush()
    stored = Txn(cursor, "?").get_record("alice", "t/k")
    assert stored == IdempotencyRecord("alice", "t/k", "a", "sha256:d", "done", 200, {"ok": True}, 3)


def test_a_deleted_record_reads_as_absent_and_is_gone_after_flush(cursor: sqlite3.Cursor) -> None:
    Txn(cursor, "?").put_record(IN_FLIGHT)  # never flushed: nothing stored
    txn = Txn(cursor, "?")
    txn.put_record(IN_FLIGHT)
    txn.flush()
    txn.delete_record("alice", "t/k")
    assert txn.get_record("alice", "t/k") is None
    txn.flush()
    assert cursor.execute("SELECT count(*) FROM idempotency").fetchone() == (0,)


def test_the_head_is_genesis_then_follows_appends_and_entries_read_back(cursor: sqlite3.Cursor) -> None:
    txn = Txn(cursor, "?")
    assert txn.head() == (0, GENESIS_HASH)
    first = chain(draft_entry(SUBJECT, "request", {"replayed": False}), txn.head(), now=1.0)
    second = chain(draft_entry(SUBJECT, "intent", {"arguments": {}}), (first.seq, first.hash), now=2.0)
    txn.append(first, second)
    assert txn.head() == (2, second.hash)
    assert txn.entry(2) == second  # entry() writes the buffer first
    assert Txn(cursor, "?").head() == (2, second.hash)


def test_queries_are_rewritten_for_a_backend_with_another_placeholder() -> None:
    seen: list[str] = []

    class Recorder:
        def execute(self, sql: str, params: object = ()) -> Recorder:
            seen.append(sql)
            return self

        def fetchone(self) -> None:
            return None

    Txn(Recorder(), "%s").get_record("alice", "t/k")
    assert seen and "?" not in seen[0] and seen[0].count("%s") == 2
