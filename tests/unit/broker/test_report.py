"""`summarize`: each write's final status from its intent and outcome/reconcile entries."""

from __future__ import annotations

from typing import Any

from contain.broker.ledger import GENESIS_HASH, LedgerEntry, plan_entry
from contain.broker.report import summarize


def _chain(specs: list[tuple[str, str, str, dict[str, Any]]]) -> list[LedgerEntry]:
    head, out = (0, GENESIS_HASH), []
    for kind, principal, task, detail in specs:
        e = plan_entry(head, kind=kind, task=task, principal=principal, action="a", idempotency_key="k",
                       argument_digest="d", detail=detail, now=1.0)
        out.append(e)
        head = (e.seq, e.hash)
    return out


def test_statuses_and_filters() -> None:
    entries = _chain([
        ("intent", "alice", "t1", {"arguments": {"x": 1}}),                     # 1 succeeded
        ("outcome", "alice", "t1", {"intent_seq": 1, "status": "succeeded", "result": {"ok": 1}}),
        ("intent", "alice", "t2", {"arguments": {"x": 2}}),                     # 3 failed
        ("outcome", "alice", "t2", {"intent_seq": 3, "status": "failed", "error": {"code": "executor"}}),
        ("intent", "bob", "t1", {"arguments": {"x": 3}}),                       # 5 reconciled applied
        ("reconcile", "bob", "t1", {"intent_seq": 5, "status": "succeeded", "result_value": {"ok": 3}}),
        ("intent", "bob", "t1", {"arguments": {"x": 4}}),                       # 7 in flight
        ("denial", "mallory", "t1", {"status": 403}),
        ("decision", "alice", "t1", {"verdict": "review", "pending": True}),
    ])
    s = summarize(entries)
    assert [(w.intent_seq, w.status, w.reconciled) for w in s.writes] == [
        (1, "succeeded", False), (3, "failed", False), (5, "succeeded", True), (7, "in_flight", False)]
    assert s.writes[0].result == {"ok": 1} and s.writes[1].result == {"code": "executor"} and s.writes[2].result == {"ok": 3}
    assert len(s.refusals) == 1 and len(s.pending_reviews) == 1
    assert [w.intent_seq for w in summarize(entries, principal="bob").writes] == [5, 7]
    assert [w.intent_seq for w in summarize(entries, task="t2").writes] == [3]
