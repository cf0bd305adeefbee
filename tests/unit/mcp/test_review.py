"""The gateway's review seam: the store adapter maps states and finds approved grants."""

from __future__ import annotations

import pytest

from contain.boundary import ToolVerdict
from contain.gate import Decision, GrantKey, GrantScope, ToolCall
from contain.gate.store import ReviewStore
from contain.mcp.review import MemoryReviewQueue, ReviewState, StoreReviewQueue

NOW = 1_800_000_000.0
CALL = ToolCall("alice", "fs", "fs__write_file", "sha256:t", {"path": "/w/a", "content": "x"})
REVIEW = Decision(ToolVerdict.REVIEW, "tools[1]", "writes need a reviewer")


@pytest.fixture
def queue(tmp_path):
    clock = {"now": NOW}
    store = ReviewStore(tmp_path / "review.db", clock=lambda: clock["now"])
    return StoreReviewQueue(store), store, clock


def test_submitted_call_is_pending_with_its_exact_arguments(queue):
    reviews, store, _ = queue
    request_id = reviews.submit(CALL, REVIEW)
    assert reviews.status(request_id).state is ReviewState.PENDING
    assert store.get(request_id).arguments == CALL.arguments
    assert reviews.approved_grant(CALL) is None


def test_approval_exposes_the_minted_grant_for_that_call_only(queue):
    reviews, store, _ = queue
    request_id = reviews.submit(CALL, REVIEW)
    store.approve(request_id, key=GrantKey.from_bytes(b"k" * 32), scope=GrantScope.once(now=NOW), reviewer="bob")
    status = reviews.status(request_id)
    assert status.state is ReviewState.APPROVED and status.grant_token
    assert reviews.approved_grant(CALL) == status.grant_token
    other = ToolCall("alice", "fs", "fs__write_file", "sha256:t", {"path": "/w/b", "content": "x"})
    assert reviews.approved_grant(other) is None


def test_denial_carries_the_reason_and_unknown_ids_are_expired(queue):
    reviews, store, _ = queue
    request_id = reviews.submit(CALL, REVIEW)
    store.deny(request_id, reviewer="bob", reason="outside the task")
    assert reviews.status(request_id) == reviews.status(request_id)
    assert reviews.status(request_id).state is ReviewState.DENIED
    assert reviews.status(request_id).reason == "outside the task"
    assert reviews.status("nope").state is ReviewState.EXPIRED


def test_a_pending_request_past_its_deadline_reads_as_expired(queue):
    reviews, _, clock = queue
    request_id = reviews.submit(CALL, REVIEW)
    clock["now"] = NOW + 10 * 24 * 3600
    assert reviews.status(request_id).state is ReviewState.EXPIRED


def test_memory_queue_matches_only_identical_approved_calls():
    reviews = MemoryReviewQueue()
    request_id = reviews.submit(CALL, REVIEW)
    assert reviews.approved_grant(CALL) is None
    reviews.approve(request_id, "token")
    assert reviews.approved_grant(CALL) == "token"
    assert reviews.approved_grant(ToolCall("bob", "fs", "fs__write_file", "sha256:t", CALL.arguments)) is None


def test_the_gateway_and_the_review_store_share_one_state_enum():
    import contain.gate
    import contain.mcp

    assert contain.mcp.ReviewState is contain.gate.ReviewState is ReviewState
