"""The decision path: every refusal with its ledger entry, idempotency, review grants, reconcile."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from broker_testkit import Clock, make_broker
from pydantic import BaseModel

from contain.broker import (
    Action,
    ActionFailed,
    Broker,
    BrokerRequest,
    CheckResult,
    Decision,
    ExecContext,
    Intent,
    Principal,
    SecretStore,
    SqliteStore,
    TokenKey,
    attenuate,
    mint_token,
    read_checkpoints,
    verify_entries,
)
from contain.broker.report import summarize
from contain.gate.grants import GrantKey, GrantScope, mint_grant

TOKEN_KEY = TokenKey(b"t" * 32)
GRANT_KEY = GrantKey.from_bytes(b"g" * 32)


def tok(clock: Clock, principal: str = "alice", actions: tuple[str, ...] = ("update_invoice",), ttl: float = 60) -> str:
    return mint_token(TOKEN_KEY, task="t1", principal=principal, actions=list(actions), ttl_s=ttl, now=clock.now)


def call(broker: Broker, token: str | None, args: Any, *, action: str = "update_invoice", key: str | None = None,
         grant: str | None = None) -> tuple[int, Mapping[str, Any]]:
    reply = broker.handle(BrokerRequest(token, action, args, key, grant))
    return reply.status, reply.body


def last_entry(broker: Broker) -> dict[str, Any]:
    return broker.store.raw_rows()[-1]


def amount(db: str, invoice: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT amount_cents FROM invoices WHERE id = ?", (invoice,)).fetchone()[0])
    finally:
        conn.close()


def applied_count(db: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM applied").fetchone()[0])
    finally:
        conn.close()


OK_ARGS = {"invoice_id": "INV-1", "amount_cents": 10500}


def test_allowed_write_records_request_decision_intent_before_outcome(broker: Broker, clock: Clock, invoices_db: str) -> None:
    status, body = call(broker, tok(clock), OK_ARGS)
    assert status == 200 and body["status"] == "succeeded" and body["result"]["new_amount_cents"] == 10500
    assert amount(invoices_db, "INV-1") == 10500
    kinds = [(r["kind"], r["principal"], r["task"]) for r in broker.store.raw_rows()]
    assert kinds == [("request", "alice", "t1"), ("decision", "alice", "t1"), ("intent", "alice", "t1"), ("outcome", "alice", "t1")]
    assert verify_entries(broker.store.raw_rows()) == []


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("no_token", 401, "no_token"),
        ("forged", 401, "token"),
        ("expired", 401, "token"),
        ("out_of_scope", 403, "out_of_scope"),
        ("widened", 403, "out_of_scope"),
        ("unknown_action", 404, "unknown_action"),
        ("bad_arguments", 400, "bad_arguments"),
        ("extra_argument", 400, "bad_arguments"),
        ("bad_key", 400, "bad_key"),
        ("other_principals_invoice", 403, "unauthorized"),
    ],
)
def test_each_refusal_has_its_ledger_entry(broker: Broker, clock: Clock, invoices_db: str, case: str, status: int, code: str) -> None:
    token: str | None = tok(clock)
    args: Any = dict(OK_ARGS)
    action, key = "update_invoice", None
    if case == "no_token":
        token = None
    elif case == "forged":
        token = mint_token(TokenKey(b"z" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=60, now=clock.now)
    elif case == "expired":
        clock.now += 3600
    elif case == "out_of_scope":
        token = tok(clock, actions=("read_invoice",))
        broker.actions["read_invoice"] = broker.actions["update_invoice"]  # exists, but not in this token
        action = "update_invoice"
    elif case == "widened":
        token = attenuate(tok(clock, actions=("read_invoice",)), {"actions": ["read_invoice", "update_invoice"]})
    elif case == "unknown_action":
        action = "drop_tables"
        token = tok(clock, actions=("drop_tables",))
    elif case == "bad_arguments":
        args = {"invoice_id": "INV-1", "amount_cents": "lots"}
    elif case == "extra_argument":
        args = {**OK_ARGS, "owner": "alice"}
    elif case == "bad_key":
        key = "has spaces"
    elif case == "other_principals_invoice":
        args = {"invoice_id": "INV-2", "amount_cents": 20100}
    got, body = call(broker, token, args, action=action, key=key)
    assert (got, body["error"]["code"]) == (status, code)
    entry = last_entry(broker)
    assert (entry["kind"], entry["detail"]["status"], entry["detail"]["code"]) == ("denial", status, code)
    assert entry["seq"] == body["ledger_seq"]
    assert amount(invoices_db, "INV-1") == 10000 and amount(invoices_db, "INV-2") == 20000
    if case == "other_principals_invoice":
        assert entry["principal"] == "alice" and entry["detail"]["rule_id"] == "invoice-owner"


def test_principal_comes_from_the_token_not_the_body(broker: Broker, clock: Clock, invoices_db: str) -> None:
    status, _ = call(broker, tok(clock, principal="mallory"), OK_ARGS)
    assert status == 403 and amount(invoices_db, "INV-1") == 10000


def test_retry_replays_the_first_success_without_a_second_write(broker: Broker, clock: Clock, invoices_db: str) -> None:
    first = call(broker, tok(clock), OK_ARGS, key="k-1")
    second = call(broker, tok(clock), OK_ARGS, key="k-1")
    assert first[0] == second[0] == 200 and second[1]["replayed"] is True
    assert second[1]["result"] == first[1]["result"] and applied_count(invoices_db) == 1
    assert last_entry(broker)["kind"] == "request" and last_entry(broker)["detail"]["replayed"] is True


def test_identical_calls_without_a_key_are_two_writes(broker: Broker, clock: Clock, invoices_db: str) -> None:
    call(broker, tok(clock), OK_ARGS)
    status, body = call(broker, tok(clock), OK_ARGS)
    assert status == 200 and not body["replayed"] and applied_count(invoices_db) == 2


def test_reused_key_with_different_arguments_is_422_with_entry(broker: Broker, clock: Clock, invoices_db: str) -> None:
    call(broker, tok(clock), OK_ARGS, key="k-1")
    status, body = call(broker, tok(clock), {"invoice_id": "INV-1", "amount_cents": 10600}, key="k-1")
    assert (status, body["error"]["code"]) == (422, "key_reused")
    assert last_entry(broker)["kind"] == "denial" and amount(invoices_db, "INV-1") == 10500


def test_keys_are_scoped_per_principal(broker: Broker, clock: Clock) -> None:
    call(broker, tok(clock), OK_ARGS, key="shared")
    status, body = call(broker, tok(clock, principal="bob"), {"invoice_id": "INV-2", "amount_cents": 20100}, key="shared")
    assert status == 200 and body["replayed"] is False


def test_refused_authorization_is_stored_and_replayed(broker: Broker, clock: Clock) -> None:
    args = {"invoice_id": "INV-2", "amount_cents": 20100}
    assert call(broker, tok(clock), args, key="k-9")[0] == 403
    status, body = call(broker, tok(clock), args, key="k-9")
    assert status == 403 and body["replayed"] is True


class Args(BaseModel):
    n: int


def _custom(name: str, execute: Any, check: Any = None, verdict: str = "allow") -> Action:
    return Action(name=name, description=name, arguments=Args,
                  authorize=lambda p, a: Decision.allow("any"), validate=lambda p, a: Decision.allow("any"),
                  execute=execute, check=check, verdict=verdict, secrets=("s",))  # type: ignore[arg-type]


def _broker_with(tmp_path: Path, clock: Clock, *actions: Action) -> Broker:
    b = Broker(actions={a.name: a for a in actions}, store=SqliteStore(str(tmp_path / "b.db")), token_key=TOKEN_KEY,
               grant_key=GRANT_KEY, secrets=SecretStore({"s": "hunter2-secret"}), clock=clock)
    b.start()
    return b


def test_concurrent_duplicate_gets_409_and_runs_the_executor_once(tmp_path: Path, clock: Clock) -> None:
    entered, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def slow(args: Args, ctx: ExecContext) -> Mapping[str, Any]:
        runs.append(args.n)
        entered.set()
        release.wait(5)
        return {"n": args.n}

    b = _broker_with(tmp_path, clock, _custom("slow", slow))
    token = mint_token(TOKEN_KEY, task="t", principal="p", actions=["slow"], ttl_s=60, now=clock.now)
    results: list[int] = []
    first = threading.Thread(target=lambda: results.append(call(b, token, {"n": 1}, action="slow", key="x")[0]))
    first.start()
    assert entered.wait(5)
    status, body = call(b, token, {"n": 1}, action="slow", key="x")
    release.set()
    first.join()
    assert (status, body["error"]["code"], results, runs) == (409, "in_flight", [200], [1])
    assert any(r["kind"] == "denial" and r["detail"]["status"] == 409 for r in b.store.raw_rows())
    b.close()


def test_executor_failure_is_stored_and_replayed_and_its_message_never_leaks(tmp_path: Path, clock: Clock) -> None:
    calls: list[int] = []

    def boom(args: Args, ctx: ExecContext) -> Mapping[str, Any]:
        calls.append(1)
        raise RuntimeError(f"connect failed with password {ctx.secret('s')}")

    def refused(args: Args, ctx: ExecContext) -> Mapping[str, Any]:
        raise ActionFailed("upstream said no")

    b = _broker_with(tmp_path, clock, _custom("boom", boom), _custom("refused", refused))
    token = mint_token(TOKEN_KEY, task="t", principal="p", actions=["boom", "refused"], ttl_s=60, now=clock.now)
    assert call(b, token, {"n": 1}, action="boom", key="f1")[0] == 502
    status, body = call(b, token, {"n": 1}, action="boom", key="f1")
    assert (status, body["replayed"], len(calls)) == (502, True, 1)
    assert call(b, token, {"n": 1}, action="refused")[1]["error"]["reason"] == "upstream said no"
    dump = str(b.store.raw_rows())
    assert "hunter2" not in dump and "executor raised RuntimeError" in dump
    b.close()


def test_secrets_reach_only_actions_that_declare_them(tmp_path: Path, clock: Clock) -> None:
    seen: dict[str, Any] = {}

    def peek(args: Args, ctx: ExecContext) -> Mapping[str, Any]:
        try:
            ctx.secret("other")
        except KeyError as exc:
            seen["other"] = str(exc)
        seen["s"] = ctx.secret("s")
        return {}

    b = _broker_with(tmp_path, clock, _custom("peek", peek))
    b._secrets = SecretStore({"s": "v1", "other": "v2"})
    token = mint_token(TOKEN_KEY, task="t", principal="p", actions=["peek"], ttl_s=60, now=clock.now)
    assert call(b, token, {"n": 1}, action="peek")[0] == 200
    assert seen["s"] == "v1" and "not available" in seen["other"]
    assert "v1" not in repr(b._secrets) and "v1" not in repr(b._secrets.get("s"))
    b.close()


def test_authorize_that_raises_denies_fail_closed(tmp_path: Path, clock: Clock) -> None:
    def bad(p: Principal, a: Args) -> Decision:
        raise LookupError("db down")

    action = Action(name="x", description="x", arguments=Args, authorize=bad, validate=lambda p, a: Decision.allow("v"),
                    execute=lambda a, c: {})
    b = _broker_with(tmp_path, clock, action)
    token = mint_token(TOKEN_KEY, task="t", principal="p", actions=["x"], ttl_s=60, now=clock.now)
    status, body = call(b, token, {"n": 1}, action="x")
    assert status == 403 and "LookupError" in body["error"]["reason"]
    b.close()


@pytest.mark.parametrize("rule", ["authorize", "validate"])
def test_a_rule_that_returns_a_misspelt_verdict_is_refused_and_nothing_is_executed(
    tmp_path: Path, clock: Clock, rule: str
) -> None:
    executed: list[Any] = []

    def misspelt(p: Principal, a: Args) -> Decision:
        return Decision("alow", "typo", "an action author's typo")  # type: ignore[arg-type]

    rules = {"authorize": lambda p, a: Decision.allow("a"), "validate": lambda p, a: Decision.allow("v"), rule: misspelt}
    action = Action(name="x", description="x", arguments=Args, execute=lambda a, c: executed.append(a) or {}, **rules)
    b = _broker_with(tmp_path, clock, action)
    token = mint_token(TOKEN_KEY, task="t", principal="p", actions=["x"], ttl_s=60, now=clock.now)
    status, body = call(b, token, {"n": 1}, action="x")
    assert (status, executed) == ({"authorize": 403, "validate": 422}[rule], [])
    assert "ValueError" in body["error"]["reason"]
    b.close()


@pytest.mark.parametrize("quick", [False, True])
def test_rules_are_a_blocking_step_unless_the_action_declares_them_quick(tmp_path: Path, clock: Clock,
                                                                         quick: bool) -> None:
    """A server runs an ExecutorCall off its loop: rules that may do I/O must be one; quick ones run inline."""
    from contain.broker.core import ExecutorCall, StoreWrite

    seen: list[str] = []

    def authorize(p: Principal, a: Args) -> Decision:
        seen.append("authorize")
        return Decision.allow("a")

    action = Action(name="x", description="x", arguments=Args, authorize=authorize,
                    validate=lambda p, a: Decision.allow("v"), execute=lambda a, c: {"n": a.n}, quick_rules=quick)
    b = _broker_with(tmp_path, clock, action)
    token = mint_token(TOKEN_KEY, task="t", principal="p", actions=["x"], ttl_s=60, now=clock.now)
    steps = b.steps(BrokerRequest(token, "x", {"n": 1}, "k1"))
    first = next(steps)
    if quick:
        assert isinstance(first, StoreWrite) and seen == ["authorize"]  # decided inline, now the claim
    else:
        assert isinstance(first, ExecutorCall) and seen == []  # nothing decided yet on the caller's thread
        first = steps.send(first.call())
        assert isinstance(first, StoreWrite) and seen == ["authorize"]
    steps.close()
    assert call(b, token, {"n": 2}, action="x", key="k2")[0] == 200  # and handle() drives either
    b.close()


# -- review and grants ----------------------------------------------------------------------------

BIG = {"invoice_id": "INV-3", "amount_cents": 90000}


def _grant(broker: Broker, clock: Clock, body: Mapping[str, Any], *, principal: str = "alice", uses: int = 1) -> str:
    return mint_grant(GRANT_KEY, principal=principal, tool=body["tool"], tool_digest=body["tool_digest"],
                      argument_digest=body["argument_digest"], scope=GrantScope.n_uses(uses, now=clock.now) if uses > 1
                      else GrantScope.once(now=clock.now), reviewer="carol", reason="checked the contract", now=clock.now)


def test_large_change_is_pending_review_then_executes_with_a_grant(broker: Broker, clock: Clock, invoices_db: str) -> None:
    status, body = call(broker, tok(clock), BIG)
    assert status == 202 and body["status"] == "pending_review" and amount(invoices_db, "INV-3") == 50000
    assert last_entry(broker)["kind"] == "decision" and last_entry(broker)["detail"]["pending"] is True
    grant = _grant(broker, clock, body)
    status, _done = call(broker, tok(clock), BIG, grant=grant, key="big-1")
    assert status == 200 and amount(invoices_db, "INV-3") == 90000
    decision = [r for r in broker.store.raw_rows() if r["kind"] == "decision"][-1]
    assert decision["detail"]["grant_id"] and decision["detail"]["reviewer"] == "carol"
    # a retry of that call (same key) replays, no second use consumed
    again = call(broker, tok(clock), BIG, grant=grant, key="big-1")
    assert again[0] == 200 and again[1]["replayed"] is True and applied_count(invoices_db) == 1


def test_grant_for_other_arguments_or_principal_is_403_with_entry(broker: Broker, clock: Clock) -> None:
    _, body = call(broker, tok(clock), BIG)
    other = dict(body, argument_digest="sha256:" + "0" * 64)
    status, refused = call(broker, tok(clock), BIG, grant=_grant(broker, clock, other))
    assert (status, refused["error"]["code"]) == (403, "grant") and "argument digest" in refused["error"]["reason"]
    assert last_entry(broker)["kind"] == "denial"
    status, refused = call(broker, tok(clock), BIG, grant=_grant(broker, clock, body, principal="bob"))
    assert status == 403 and "principal" in refused["error"]["reason"]


def test_once_grant_cannot_be_used_under_a_second_key(tmp_path: Path, clock: Clock) -> None:
    runs: list[int] = []

    def write(args: Args, ctx: ExecContext) -> Mapping[str, Any]:
        runs.append(args.n)
        return {"n": args.n}

    b = _broker_with(tmp_path, clock, _custom("reviewed", write, verdict="review"))
    token = mint_token(TOKEN_KEY, task="t", principal="alice", actions=["reviewed"], ttl_s=60, now=clock.now)
    status, body = call(b, token, {"n": 1}, action="reviewed")
    assert status == 202
    grant = _grant(b, clock, body)
    assert call(b, token, {"n": 1}, action="reviewed", grant=grant, key="a")[0] == 200
    status, refused = call(b, token, {"n": 1}, action="reviewed", grant=grant, key="b")
    assert status == 403 and "already used" in refused["error"]["reason"] and runs == [1]
    assert b.store.raw_rows()[-1]["kind"] == "denial"
    b.close()


def test_expired_or_forged_grant_is_refused(broker: Broker, clock: Clock) -> None:
    _, body = call(broker, tok(clock), BIG)
    grant = _grant(broker, clock, body)
    forged = grant[:-4] + ("AAAA" if not grant.endswith("AAAA") else "BBBB")
    assert call(broker, tok(clock), BIG, grant=forged)[0] == 403
    clock.now += 7200
    status, refused = call(broker, tok(clock), BIG, grant=grant)
    assert status == 403 and "expired" in refused["error"]["reason"]


# -- crash recovery ---------------------------------------------------------------------------------


def _leave_in_flight(tmp_path: Path, invoices_db: str, clock: Clock, *, apply: bool) -> tuple[Broker, str]:
    """Simulate a crash between intent and outcome: claim, optionally apply, never record the outcome."""
    b = make_broker(tmp_path, invoices_db, clock)
    b.start()
    action = b.actions["update_invoice"]
    original = action.execute

    class Crash(BaseException):
        pass

    def crashing(args: Any, ctx: ExecContext) -> Mapping[str, Any]:
        if apply:
            original(args, ctx)
        raise Crash()

    b.actions["update_invoice"] = Action(**{**action.__dict__, "execute": crashing})
    with pytest.raises(Crash):
        call(b, tok(clock), OK_ARGS, key="crash-1")
    b.store.close()  # the process "died": no outcome entry
    return make_broker(tmp_path, invoices_db, clock), "crash-1"


def test_restart_reconciles_an_applied_intent_and_replays_it(tmp_path: Path, invoices_db: str, clock: Clock) -> None:
    b, key = _leave_in_flight(tmp_path, invoices_db, clock, apply=True)
    report = b.start()
    assert report == [{"idempotency_key": key, "principal": "alice", "result": "applied"}]
    status, body = call(b, tok(clock), OK_ARGS, key=key)
    assert (status, body["replayed"], body["reconciled"]) == (200, True, True) and applied_count(invoices_db) == 1
    writes = summarize(b.store.entries()).writes
    assert [(w.status, w.reconciled) for w in writes] == [("succeeded", True)]
    b.close()


def test_restart_releases_a_never_applied_intent_so_the_retry_executes_once(tmp_path: Path, invoices_db: str, clock: Clock) -> None:
    b, key = _leave_in_flight(tmp_path, invoices_db, clock, apply=False)
    assert b.start()[0]["result"] == "not_applied"
    status, body = call(b, tok(clock), OK_ARGS, key=key)
    assert (status, body["replayed"]) == (200, False) and applied_count(invoices_db) == 1
    assert verify_entries(b.store.raw_rows()) == []
    b.close()


def test_without_a_check_hook_the_outcome_is_unknown_and_never_retried(tmp_path: Path, clock: Clock) -> None:
    runs: list[int] = []

    class Crash(BaseException):
        pass

    def dies(args: Args, ctx: ExecContext) -> Mapping[str, Any]:
        runs.append(1)
        raise Crash()

    b = _broker_with(tmp_path, clock, _custom("w", dies))
    token = mint_token(TOKEN_KEY, task="t", principal="p", actions=["w"], ttl_s=60, now=clock.now)
    with pytest.raises(Crash):
        call(b, token, {"n": 1}, action="w", key="u1")
    b.store.close()
    b2 = _broker_with(tmp_path, clock, _custom("w", dies))
    status, body = call(b2, token, {"n": 1}, action="w", key="u1")
    assert (status, body["status"], len(runs)) == (500, "outcome_unknown", 1)
    assert [w.status for w in summarize(b2.store.entries()).writes] == ["unknown"]
    b2.close()


def test_check_hook_is_used_with_the_intent_arguments(tmp_path: Path, clock: Clock) -> None:
    seen: list[Intent] = []

    def check(intent: Intent, ctx: ExecContext) -> CheckResult:
        seen.append(intent)
        return CheckResult("applied", {"n": intent.arguments["n"]})

    class Crash(BaseException):
        pass

    def dies(args: Args, ctx: ExecContext) -> Mapping[str, Any]:
        raise Crash()

    b = _broker_with(tmp_path, clock, _custom("w", dies, check))
    token = mint_token(TOKEN_KEY, task="t", principal="p", actions=["w"], ttl_s=60, now=clock.now)
    with pytest.raises(Crash):
        call(b, token, {"n": 7}, action="w", key="c1")
    b.store.close()
    b2 = _broker_with(tmp_path, clock, _custom("w", dies, check))
    assert seen[0].arguments == {"n": 7} and seen[0].principal == "p" and seen[0].task == "t"
    assert call(b2, token, {"n": 7}, action="w", key="c1")[1]["result"] == {"n": 7}
    b2.close()


def test_checkpoints_are_written_and_the_ledger_verifies_after_many_calls(broker: Broker, clock: Clock, tmp_path: Path) -> None:
    from contain.broker import load_public_key

    for n in range(5):
        call(broker, tok(clock), {"invoice_id": "INV-1", "amount_cents": 10000 + n}, key=f"k{n}")
    broker.checkpoint()
    points = read_checkpoints(tmp_path / "ledger.checkpoints")
    assert len(points) >= 3 and points[-1].seq == broker.store.raw_rows()[-1]["seq"]
    assert verify_entries(broker.store.raw_rows(), points, load_public_key(tmp_path / "checkpoint.key.pub")) == []


def test_a_retry_is_answered_from_the_store_even_when_a_new_decision_would_differ(broker: Broker, clock: Clock,
                                                                                   invoices_db: str) -> None:
    """k-1 moved INV-1 by 5%; a reviewed write then moved it far away. Deciding k-1 again would now
    ask for review (or refuse a bad grant), but a retry replays what k-1 did and writes nothing."""
    first = call(broker, tok(clock), OK_ARGS, key="k-1")
    far = {"invoice_id": "INV-1", "amount_cents": 30000}
    _, pending = call(broker, tok(clock), far, key="k-far")
    assert call(broker, tok(clock), far, key="k-far", grant=_grant(broker, clock, pending))[0] == 200
    for grant in (None, "cg1.not-a-grant"):
        status, body = call(broker, tok(clock), OK_ARGS, key="k-1", grant=grant)
        assert (status, body["replayed"], body["result"]) == (200, True, first[1]["result"])
        assert last_entry(broker)["kind"] == "request" and last_entry(broker)["detail"]["replayed"] is True
    assert amount(invoices_db, "INV-1") == 30000 and applied_count(invoices_db) == 2


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        # float(10**400) once raised inside token verification: 503, no entry. A token that cannot
        # be read is a malformed credential: 401 (RFC 6750 invalid_token), recorded like a forged one.
        ("huge_expiry_caveat", 401, "token"),
        ("grant_not_a_string", 400, "bad_grant"),
        ("body_not_json", 400, "bad_body"),
    ],
)
def test_input_that_fails_to_parse_is_a_recorded_4xx(
    broker: Broker, clock: Clock, case: str, status: int, code: str
) -> None:
    token = tok(clock)
    request = BrokerRequest(token, "update_invoice", OK_ARGS)
    if case == "huge_expiry_caveat":
        request = BrokerRequest(attenuate(token, {"expires_at": 10**400}), "update_invoice", OK_ARGS)
    elif case == "grant_not_a_string":
        request = BrokerRequest(token, "update_invoice", OK_ARGS, grant={"forged": 10**400})  # type: ignore[arg-type]
    elif case == "body_not_json":
        request = BrokerRequest(token, "update_invoice", None, body_error="the body is not JSON (RecursionError)")
    reply = broker.handle(request)
    assert (reply.status, reply.body["error"]["code"]) == (status, code)
    entry = last_entry(broker)
    assert (entry["kind"], entry["detail"]["status"], entry["detail"]["code"]) == ("denial", status, code)
    assert entry["seq"] == reply.body["ledger_seq"]
