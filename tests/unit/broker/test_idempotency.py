"""Idempotency keys: the plan_claim table, key forms, and what keys mean through the broker.

A key names one logical call: two deliberate calls are two writes, a retry of one call is one, and
keys are scoped to the token's task so that no task can reach another task's record.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from broker_testkit import Clock, make_broker

from contain.broker import Broker, BrokerRequest, TokenKey, mint_token
from contain.broker.idempotency import IdempotencyRecord, is_valid_key, plan_claim
from contain.broker.ledger import chain, draft_entry, entry_subject
from contain.gate.digests import DIGEST_PREFIX, canonical_json

TOKEN_KEY = TokenKey(b"t" * 32)


def _rec(state: str = "done", digest: str = "d1", action: str = "a", status: int = 200) -> IdempotencyRecord:
    return IdempotencyRecord("alice", "t1/k1", action, digest, state, status, {"status": "x"}, 7)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("stored", "outcome", "status"),
    [
        (None, "claim", 0),
        (_rec(), "replay", 200),
        (_rec(status=502), "replay", 502),
        (_rec(state="unknown", status=500), "replay", 500),
        (_rec(state="in_flight"), "conflict", 409),
        (_rec(digest="d2"), "mismatch", 422),
        (_rec(action="b"), "mismatch", 422),
        (_rec(state="in_flight", digest="d2"), "mismatch", 422),
    ],
)
def test_plan_claim_table(stored: IdempotencyRecord | None, outcome: str, status: int) -> None:
    plan = plan_claim(stored, action="a", argument_digest="d1")
    assert (plan.outcome, plan.status_code) == (outcome, status)


def test_plan_claim_names_the_key_as_the_client_sent_it_not_the_record_key() -> None:
    plan = plan_claim(_rec(digest="d2"), action="a", argument_digest="d1")
    assert "'k1'" in plan.reason and "t1/" not in plan.reason


@pytest.mark.parametrize(("key", "ok"), [("abc-1", True), ("a" * 128, True), ("a" * 129, False), ("", False), ("a b", False), ("k/../x", False)])
def test_key_format(key: str, ok: bool) -> None:
    assert is_valid_key(key) is ok


def test_every_reserved_prefix_is_refused_from_clients_in_any_case_with_its_reason() -> None:
    from contain.broker.idempotency import RESERVED_KEY_PREFIXES, assign_key, client_key_problem

    assert RESERVED_KEY_PREFIXES, "the table cannot be empty"
    for row in RESERVED_KEY_PREFIXES:
        for spelling in (row.prefix + "abc", row.prefix.upper() + "abc"):
            problem = client_key_problem(spelling)
            assert problem is not None and row.why in problem, spelling
    assigned = assign_key()
    assert is_valid_key(assigned) and client_key_problem(assigned) is not None
    assert assign_key(bytes(16)) == "s:" + "00" * 16 and assign_key() != assign_key()
    assert client_key_problem("call-7f3a") is None
    assert client_key_problem(7) is not None and client_key_problem("a/b") is not None


def test_record_keys_keep_tasks_apart_even_when_a_task_name_contains_the_separator() -> None:
    from contain.broker.idempotency import client_key_problem, record_key, split_record_key

    assert client_key_problem("b/c") is not None  # so "a" + "b/c" can never be sent to meet ("a/b", "c")
    assert split_record_key(record_key("a/b", "c")) == ("a/b", "c")
    assert split_record_key("bare-v1-key") == (None, "bare-v1-key")


# -- through the broker ---------------------------------------------------------------------------------


def _tok(clock: Clock, *, task: str = "t1", principal: str = "alice", actions: tuple[str, ...] = ("update_invoice",)) -> str:
    return mint_token(TOKEN_KEY, task=task, principal=principal, actions=list(actions), ttl_s=600, now=clock.now)


def _call(broker: Broker, token: str, amount: int, *, key: str | None = None, invoice: str = "INV-1") -> tuple[int, Mapping[str, Any]]:
    reply = broker.handle(BrokerRequest(token, "update_invoice", {"invoice_id": invoice, "amount_cents": amount}, key))
    return reply.status, reply.body


def _amount(db: str, invoice: str = "INV-1") -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT amount_cents FROM invoices WHERE id = ?", (invoice,)).fetchone()[0])
    finally:
        conn.close()


def _applied(db: str) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [str(r[0]) for r in conn.execute("SELECT idempotency_key FROM applied ORDER BY rowid")]
    finally:
        conn.close()


def test_setting_11000_then_10500_then_11000_without_keys_is_three_writes_and_ends_at_11000(
    broker: Broker, clock: Clock, invoices_db: str
) -> None:
    replies = [_call(broker, _tok(clock), amount) for amount in (11000, 10500, 11000)]
    assert [(status, body["status"], body["replayed"]) for status, body in replies] == [(200, "succeeded", False)] * 3
    assert _amount(invoices_db) == 11000 and len(_applied(invoices_db)) == 3
    keys = [body["idempotency_key"] for _, body in replies]
    assert len(set(keys)) == 3 and all(k.startswith("s:") for k in keys)


def test_two_deliberate_calls_with_their_own_keys_are_two_writes_and_a_retry_is_none(
    broker: Broker, clock: Clock, invoices_db: str
) -> None:
    assert _call(broker, _tok(clock), 11000, key="call-1")[0] == 200
    assert _call(broker, _tok(clock), 10500, key="call-2")[0] == 200
    status, body = _call(broker, _tok(clock), 11000, key="call-3")
    retry = _call(broker, _tok(clock), 11000, key="call-3")
    assert (status, body["replayed"], retry[0], retry[1]["replayed"]) == (200, False, 200, True)
    assert _amount(invoices_db) == 11000 and len(_applied(invoices_db)) == 3


def _v1_derived_key(broker: Broker, amount: int) -> str:
    """The key a v1 broker derived for a keyless update_invoice of INV-1 to ``amount`` (no grant)."""
    model = broker.actions["update_invoice"].arguments
    parsed = model.model_validate({"invoice_id": "INV-1", "amount_cents": amount}).model_dump(mode="json")
    digest = DIGEST_PREFIX + hashlib.sha256(canonical_json(parsed)).hexdigest()
    material = b"contain-idempotency-v1\x00" + "\x00".join(("update_invoice", digest, "")).encode()
    return "d:" + hashlib.sha256(material).hexdigest()[:40]


def test_a_task_cannot_pre_claim_another_tasks_call_with_a_derived_shaped_key(
    broker: Broker, clock: Clock, invoices_db: str
) -> None:
    forged = _v1_derived_key(broker, 10500)
    attacker = _call(broker, _tok(clock, task="evil"), 10100, key=forged)
    victim = _call(broker, _tok(clock, task="victim"), 10500)
    assert (attacker[0], attacker[1].get("error", {}).get("code")) == (400, "bad_key")
    assert (victim[0], victim[1]["replayed"]) == (200, False) and _amount(invoices_db) == 10500


def test_the_same_key_in_two_tasks_of_one_principal_is_two_independent_calls(
    broker: Broker, clock: Clock, invoices_db: str
) -> None:
    assert _call(broker, _tok(clock, task="t1"), 10500, key="shared")[0] == 200
    other_args = _call(broker, _tok(clock, task="t2"), 10600, key="shared")
    same_args = _call(broker, _tok(clock, task="t3"), 10600, key="shared")
    assert [(s, b["replayed"]) for s, b in (other_args, same_args)] == [(200, False), (200, False)]
    assert _applied(invoices_db) == ["alice/t1/shared", "alice/t2/shared", "alice/t3/shared"]


def test_ledger_entries_and_replies_carry_the_clients_key_and_the_task(broker: Broker, clock: Clock) -> None:
    status, body = _call(broker, _tok(clock, task="t9"), 10500, key="mine-1")
    assert status == 200 and body["idempotency_key"] == "mine-1"
    rows = broker.store.raw_rows()
    assert {(r["task"], r["idempotency_key"]) for r in rows} == {("t9", "mine-1")}


def _write_v1_call(broker: Broker, *, task: str, key: str, amount: int, state: str, status: int = 200) -> int:
    """Store a call as a v1 broker did: ledger entries, and the record under the bare key."""
    model = broker.actions["update_invoice"].arguments
    arguments = model.model_validate({"invoice_id": "INV-1", "amount_cents": amount}).model_dump(mode="json")
    digest = DIGEST_PREFIX + hashlib.sha256(canonical_json(arguments)).hexdigest()
    subject = entry_subject(task=task, principal="alice", action="update_invoice", idempotency_key=key,
                            argument_digest=digest)
    body = {"action": "update_invoice", "idempotency_key": key, "status": "succeeded", "result": {"v1": True}}

    def write(txn: Any) -> int:
        head = txn.head()
        entries = []
        for kind, detail in (("request", {"replayed": False}), ("decision", {"verdict": "allow"}),
                             ("intent", {"arguments": arguments})):
            entry = chain(draft_entry(subject, kind, detail), head, now=1_800_000_000.0)
            entries.append(entry)
            head = (entry.seq, entry.hash)
        txn.append(*entries)
        intent_seq = head[0]
        txn.put_record(IdempotencyRecord("alice", key, "update_invoice", digest, state,  # type: ignore[arg-type]
                                         status, body if state == "done" else {}, intent_seq))
        return intent_seq

    return int(broker.store.run(write))


def test_a_retry_of_a_call_stored_by_a_v1_broker_replays_in_its_task_and_nowhere_else(
    broker: Broker, clock: Clock, invoices_db: str
) -> None:
    _write_v1_call(broker, task="t1", key="old-1", amount=10500, state="done")
    status, body = _call(broker, _tok(clock, task="t1"), 10500, key="old-1")
    assert (status, body["replayed"], body["result"]) == (200, True, {"v1": True})
    assert _applied(invoices_db) == []
    other = _call(broker, _tok(clock, task="t2"), 10500, key="old-1")
    assert (other[0], other[1]["replayed"]) == (200, False) and _applied(invoices_db) == ["alice/t2/old-1"]


def test_a_v1_call_left_in_flight_is_reconciled_under_the_key_its_executor_used(
    tmp_path: Path, invoices_db: str, clock: Clock
) -> None:
    first = make_broker(tmp_path, invoices_db, clock)
    first.start()
    _write_v1_call(first, task="t1", key="old-2", amount=10500, state="in_flight", status=0)
    first.store.close()
    conn = sqlite3.connect(invoices_db)  # the v1 executor had applied it under principal/key
    conn.execute("INSERT INTO applied VALUES ('alice/old-2', 'INV-1', 10000, 10500, 0)")
    conn.commit()
    conn.close()
    second = make_broker(tmp_path, invoices_db, clock)
    report = second.start()
    assert report == [{"idempotency_key": "old-2", "principal": "alice", "result": "applied"}]
    status, body = _call(second, _tok(clock, task="t1"), 10500, key="old-2")
    assert (status, body["replayed"], body.get("reconciled")) == (200, True, True)
    second.close()


def test_executors_and_check_hooks_see_the_task_scoped_key(broker: Broker, clock: Clock, invoices_db: str) -> None:
    _call(broker, _tok(clock, task="t7"), 10500, key="k1")
    assert _applied(invoices_db) == ["alice/t7/k1"]
