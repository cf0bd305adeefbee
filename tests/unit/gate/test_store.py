"""The review queue: submit, approve (grant minted), deny (reason), expire; one decision per request."""

import dataclasses
import os
import threading

import pytest

from contain.boundary import ToolVerdict
from contain.decision import Decision
from contain.errors import GateError
from contain.gate.digests import argument_digest
from contain.gate.grants import GrantKey, GrantScope, decode_grant, verify_grant
from contain.gate.model import ToolCall
from contain.gate.store import ReviewState, ReviewStore

KEY = GrantKey.from_bytes(b"s" * 32)
REVIEW = Decision(ToolVerdict.REVIEW, "tools[1]", "tools[1] requires a human review")


class Clock:
    def __init__(self, now=1_800_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def _call(**arguments):
    return ToolCall(
        principal="alice",
        server="fs",
        tool="fs__write_file",
        tool_digest="sha256:tool",
        arguments=arguments or {"path": "/work/out/a.txt", "content": "hi"},
        input_schema={"type": "object"},
    )


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    return ReviewStore(tmp_path / "state" / "review.db", clock=clock)


def test_submit_stores_the_exact_call_and_decision(store, clock):
    request = store.submit(_call(), REVIEW, ttl_s=600)
    assert request.request_id.startswith("r-")
    assert request.status is ReviewState.PENDING
    assert request.arguments == {"path": "/work/out/a.txt", "content": "hi"}
    assert request.argument_digest == argument_digest(request.arguments)
    assert (request.rule_id, request.decision_reason) == ("tools[1]", "tools[1] requires a human review")
    assert (request.created_at, request.expires_at) == (clock.now, clock.now + 600)
    assert request.as_call() == _call()
    assert os.stat(store.path).st_mode & 0o777 == 0o600
    assert store.list(ReviewState.PENDING) == [request]


def test_submitting_the_same_pending_call_returns_the_same_request(store):
    first = store.submit(_call(), REVIEW)
    assert store.submit(_call(), REVIEW).request_id == first.request_id
    assert store.submit(_call(path="/other"), REVIEW).request_id != first.request_id


def test_only_review_decisions_are_queued(store):
    with pytest.raises(GateError, match="only review decisions"):
        store.submit(_call(), Decision(ToolVerdict.DENY, "tools[0]", "no"))


def test_approve_mints_a_grant_bound_to_the_stored_call(store, clock):
    request = store.submit(_call(), REVIEW)
    approved = store.approve(request.request_id, key=KEY, scope=GrantScope.once(now=clock.now), reviewer="bob", reason="ok")
    assert approved.status is ReviewState.APPROVED
    assert (approved.reviewer, approved.review_reason, approved.decided_at) == ("bob", "ok", clock.now)
    grant = decode_grant(approved.grant_token)
    assert grant.grant_id == approved.grant_id
    assert (grant.principal, grant.tool, grant.tool_digest, grant.argument_digest) == (
        "alice", "fs__write_file", "sha256:tool", request.argument_digest,
    )
    assert store.grant_for(_call()) == approved.grant_token
    assert store.grant_for(_call(path="/x")) is None
    check = verify_grant(KEY, approved.grant_token, principal="alice", tool="fs__write_file", tool_digest="sha256:tool",
                         argument_digest=request.argument_digest, uses=store.uses, now=clock.now + 1)
    assert check.ok
    assert store.grant_for(_call()) is None  # used up: nothing to present any more
    assert not verify_grant(KEY, approved.grant_token, principal="alice", tool="fs__write_file",
                            tool_digest="sha256:tool", argument_digest=request.argument_digest,
                            uses=store.uses, now=clock.now + 2).ok


def test_deny_needs_a_reason_and_stores_it(store):
    request = store.submit(_call(), REVIEW)
    with pytest.raises(GateError, match="needs a reason"):
        store.deny(request.request_id, reviewer="bob", reason="  ")
    denied = store.deny(request.request_id, reviewer="bob", reason="writes outside the project")
    assert (denied.status, denied.review_reason, denied.grant_token) == (ReviewState.DENIED, "writes outside the project", None)


def test_a_decided_request_cannot_be_decided_again(store, clock):
    request = store.submit(_call(), REVIEW)
    store.deny(request.request_id, reviewer="bob", reason="no")
    with pytest.raises(GateError, match="already denied"):
        store.approve(request.request_id, key=KEY, scope=GrantScope.once(now=clock.now), reviewer="eve")


def test_pending_requests_expire(store, clock):
    old = store.submit(_call(), REVIEW, ttl_s=60)
    fresh = store.submit(_call(path="/y"), REVIEW, ttl_s=600)
    clock.now += 61
    with pytest.raises(GateError, match="already expired"):
        store.approve(old.request_id, key=KEY, scope=GrantScope.once(now=clock.now), reviewer="bob")
    assert store.get(old.request_id).status is ReviewState.EXPIRED
    assert store.expire_stale() == 0
    clock.now += 600
    assert store.expire_stale() == 1
    assert store.get(fresh.request_id).status is ReviewState.EXPIRED
    # An expired request does not block a new one for the same call.
    assert store.submit(_call(), REVIEW).request_id != old.request_id


def test_an_already_expired_scope_is_refused(store, clock):
    request = store.submit(_call(), REVIEW)
    with pytest.raises(GateError, match="already be expired"):
        store.approve(request.request_id, key=KEY, scope=GrantScope.until(clock.now - 1), reviewer="bob")


def test_unknown_request_ids_are_errors(store):
    with pytest.raises(GateError, match="no review request"):
        store.get("r-nope")
    with pytest.raises(GateError, match="no review request"):
        store.deny("r-nope", reviewer="b", reason="x")


def test_racing_reviewers_decide_a_request_once(store, clock):
    request = store.submit(_call(), REVIEW)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def decide(i):
        barrier.wait()
        try:
            if i % 2:
                store.approve(request.request_id, key=KEY, scope=GrantScope.once(now=clock.now), reviewer=f"r{i}")
            else:
                store.deny(request.request_id, reviewer=f"r{i}", reason="no")
            outcomes.append("won")
        except GateError:
            outcomes.append("lost")

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]


def test_a_file_that_is_not_a_database_is_refused(tmp_path):
    path = tmp_path / "bad.db"
    path.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(GateError, match="not a usable review store"):
        ReviewStore(path)


def test_latest_for_finds_the_newest_request_for_the_exact_call(store, clock):
    assert store.latest_for(_call()) is None
    first = store.submit(_call(), REVIEW)
    store.deny(first.request_id, reviewer="bob", reason="no")
    clock.now += 1
    second = store.submit(_call(), REVIEW)
    assert store.latest_for(_call()).request_id == second.request_id
    assert store.latest_for(_call(path="/elsewhere")) is None


def test_a_call_whose_arguments_have_no_digest_has_no_grant_and_no_latest_request(store):
    undigestable = dataclasses.replace(_call(), arguments=["not", "an", "object"])  # type: ignore[arg-type]
    assert store.grant_for(undigestable) is None
    assert store.latest_for(undigestable) is None
