"""The idempotency table (plan_claim) row by row, and derived keys."""

from __future__ import annotations

import pytest

from contain.broker.idempotency import IdempotencyRecord, derive_key, is_valid_key, plan_claim


def _rec(state: str = "done", digest: str = "d1", action: str = "a", status: int = 200) -> IdempotencyRecord:
    return IdempotencyRecord("alice", "k1", action, digest, state, status, {"status": "x"}, 7)  # type: ignore[arg-type]


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


def test_derived_key_is_bound_to_action_arguments_and_grant() -> None:
    base = derive_key(action="a", argument_digest="d", grant_id=None)
    assert base == derive_key(action="a", argument_digest="d", grant_id=None)
    others = {
        derive_key(action="b", argument_digest="d", grant_id=None),
        derive_key(action="a", argument_digest="e", grant_id=None),
        derive_key(action="a", argument_digest="d", grant_id="g1"),
    }
    assert base not in others and len(others) == 3 and is_valid_key(base)


@pytest.mark.parametrize(("key", "ok"), [("abc-1", True), ("a" * 128, True), ("a" * 129, False), ("", False), ("a b", False), ("k/../x", False)])
def test_key_format(key: str, ok: bool) -> None:
    assert is_valid_key(key) is ok
