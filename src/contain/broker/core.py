"""The broker's decision path: token → action → arguments → key → authorize → validate → grant →
intent → execute → outcome, each refusal recorded. Transport-free (``service`` speaks HTTP).

``Broker.handle(request)`` is the orchestrator, an ordered checklist; the order matters:
  1. verify the capability token (401 forged/expired, 403 contradictory): the principal and task
     come from the token only, never from the request body;
  2. the action must exist (404) and be in the token's scope (403);
  3. arguments must parse with the action's model (400); the argument digest is over the parsed
     arguments, which is what will execute and what a grant must name;
  4. the idempotency key: the client's key for this logical call (400 if malformed or of a form the
     broker reserves), else a fresh broker-assigned one; records live under ``<task>/<key>`` so no
     task reaches another's (``idempotency``);
  5. authorize (403) and the business validator (422 or review) — stored under the key and replayed;
  6. review: without a grant → 202 pending (not stored: the caller comes back with a grant); a
     grant is verified by the broker itself (``contain.gate.grants.verify_grant``) → 403 if bad;
  7. one durable transaction: claim the key, consume the grant use, append request + decision +
     intent — **before** the executor runs;
  8. execute with the action's own secrets; 9. append the outcome and store the reply.

On start, ``reconcile`` settles intents left in flight by a crash through the action's ``check``
hook: applied → the outcome is recorded and replayed; not applied → the key is released so a
retry executes; otherwise the outcome is declared unknown and never retried blindly.

Any exception inside a decision (authorize, validate) is a deny (fail closed). A token or body
that fails to parse (a caveat of ``10**400``, JSON nested too deep) is a recorded 400, never an
exception out of the path.

Refusals: once a token is valid, each refusal has its own ``denial`` entry. A refusal no valid
token vouches for (no token, a bad token, and the server's framing, timeout and capacity
refusals) goes through the peer's refusal window (``refusals``): the first in a window gets its
own entry, the others one summary entry, so that nobody without a token can buy an fsync per
request. Caller-chosen names are stored bounded (``bounded_text``).

The path from step 1 to step 9 is a generator of steps (``StoreWrite``: a function to run in a
store transaction; ``ExecutorCall``: a call that may block, such as the executor), and ``handle``
drives it one step at a time: every write durable before the path goes on, exactly as
straight-line code would. The HTTP server (``server_loop``) drives the paths of every request it
holds together instead: their writes go into one transaction and their blocking calls run on
executor threads, each path still taking its steps in order.

What is stored under the key always wins over the decision (``plan_claim``: replay a stored
result, 409 while in flight, 422 on a reused key with different arguments): every way out of
steps 5-7 (the claim, a refusal, a pending review) first settles the key inside the same write
transaction, so a retry is answered from the store and never by a decision re-made against a
record that the first write already changed. Reading the key once more before deciding would
cost every request a read for the rare retry.

Why one file past 600 lines: the decision path is one ordered checklist (above), and every
refusal it records sits beside the step that makes it, so the order and the durability of each
step can be checked in one read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pydantic import ValidationError

from contain._log import LazyLogger
from contain.boundary import ToolVerdict
from contain.broker.actions import Action, ActionFailed, CheckResult, Intent, Principal, SecretStore
from contain.broker.actions import action_tool_digest as _tool_digest
from contain.broker.idempotency import (
    IdempotencyRecord,
    State,
    assign_key,
    client_key_problem,
    plan_claim,
    record_key,
    should_look_up_v1_record,
    split_record_key,
)
from contain.broker.ledger import Checkpointer, EntryDraft, EntrySubject, chain, draft_entry, entry_subject
from contain.broker.refusals import RefusalTally, RefusalWindow, bounded_text
from contain.broker.storage import Store, Txn
from contain.broker.tokens import TokenCheck, TokenKey, TokenScope, verify_token
from contain.decision import Decision
from contain.gate.digests import DIGEST_PREFIX, canonical_json
from contain.gate.grants import GrantKey, verify_grant

__all__ = ["Broker", "BrokerReply", "BrokerRequest", "ExecutorCall", "Steps", "StoreWrite"]

log = LazyLogger(__name__)
_TOKEN_CACHE_SIZE = 1024
_REASON_LIMIT = 300  # characters of a refusal's reason kept in its entry and reply


@dataclass(frozen=True)
class BrokerRequest:
    """One call as it arrived: the bearer token, the action, raw JSON arguments, optional key and
    grant; ``peer`` names who connected (``uid:N``, ``tcp``; ``-`` in process) for refusals without
    a valid token (``refusals``); ``body_error`` says why the body was not a JSON object, if it was not."""

    token: str | None
    action: str
    arguments: Any
    idempotency_key: str | None = None
    grant: str | None = None
    peer: str = "-"
    body_error: str | None = None


@dataclass(frozen=True)
class BrokerReply:
    """HTTP status and JSON body."""

    status: int
    body: Mapping[str, Any]


@dataclass
class _Ctx:
    """What is known about a request so far (for ledger entries)."""

    task: str = "-"
    principal: str = "-"
    action: str = "-"
    key: str = ""  # the key as the client sent it (or as the broker assigned it): entries and replies
    digest: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    _subject: EntrySubject | None = None

    @property
    def record_key(self) -> str:
        """Where this request's idempotency record lives: ``<task>/<key>`` (see ``idempotency``)."""
        return record_key(self.task, self.key)

    def record(self, state: State, status_code: int, response: Mapping[str, Any], intent_seq: int) -> IdempotencyRecord:
        """The idempotency record this request stores under its own slot."""
        return IdempotencyRecord(
            self.principal, self.record_key, self.action, self.digest, state, status_code, response, intent_seq
        )

    def slots(self) -> list[tuple[str, str]]:
        """The (principal, record key) slots this request may read: its own, and the bare key a v1
        broker may have used for the same call."""
        own = [(self.principal, self.record_key)]
        return own + [(self.principal, self.key)] if should_look_up_v1_record(self.key) else own

    def subject(self) -> EntrySubject:
        """The encoded shared fields of this request's entries (re-encoded when a field changed)."""
        cached = self._subject
        fields = (self.task, self.principal, self.action, self.key, self.digest)
        if cached is None or fields != (
            cached.task,
            cached.principal,
            cached.action,
            cached.idempotency_key,
            cached.argument_digest,
        ):
            cached = self._subject = entry_subject(
                task=self.task,
                principal=self.principal,
                action=self.action,
                idempotency_key=self.key,
                argument_digest=self.digest,
            )
        return cached


class _DeferredUse:
    """A UseCounter that only remembers the grant; the use is consumed in the claim transaction."""

    def __init__(self) -> None:
        self.grant_id: str | None = None
        self.max_uses: int | None = None

    def consume(self, grant_id: str, max_uses: int | None) -> bool:
        self.grant_id, self.max_uses = grant_id, max_uses
        return True


@dataclass(frozen=True)
class StoreWrite:
    """A step of the decision path: run ``fn`` in a store transaction; the step gets its result."""

    fn: Callable[[Txn], Any]
    records: Sequence[tuple[str, str]] = ()
    on_failure: Callable[[], None] | None = None  # called when the write did not happen


@dataclass(frozen=True)
class ExecutorCall:
    """A step of the decision path: a call that may block (the executor, and rules not marked
    ``quick_rules``), which a server runs off its loop; the step gets its result or its exception."""

    call: Callable[[], Any]


Steps = Generator[StoreWrite | ExecutorCall, Any, BrokerReply]


class Broker:
    """The trusted write broker (see the module docstring for the order of checks)."""

    def __init__(
        self,
        *,
        actions: Mapping[str, Action],
        store: Store,
        token_key: TokenKey,
        grant_key: GrantKey,
        secrets: SecretStore,
        checkpointer: Checkpointer | None = None,
        checkpoint_every: int = 256,
        clock: Callable[[], float] = time.time,
        refusal_window_s: float = 5.0,
    ) -> None:
        self.actions = dict(actions)
        self.store = store
        self._token_key = token_key
        self._grant_key = grant_key
        self._secrets = secrets
        self._checkpointer = checkpointer
        self._checkpoint_every = checkpoint_every
        self._last_checkpoint = 0
        self._clock = clock
        self._cp_lock = threading.Lock()
        self.tool_digests = {name: _tool_digest(a) for name, a in self.actions.items()}
        self._token_cache: dict[str, TokenCheck] = {}
        self.refusals = RefusalTally(window_s=refusal_window_s)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> list[dict[str, Any]]:
        """Open the store, reconcile intents left in flight, checkpoint the head; returns the reconcile report."""
        self.store.on_commit = self._maybe_checkpoint
        self.store.start()
        report = self.reconcile()
        self.checkpoint()
        return report

    def close(self) -> None:
        """Write the summaries of refusals still counted, sign the head, close the store."""
        try:
            self.flush_refusals(everything=True)
        except Exception:  # the store is broken: closing it still matters more than the counts
            log.exception("broker could not write the summaries of refusals still counted; they are lost")
        self.checkpoint()
        if self._checkpointer is not None:
            self._checkpointer.close()  # the stop checkpoint reaches the external anchor too
        self.store.close()

    def checkpoint(self) -> None:
        """Sign the current head into the checkpoint file (no-op when nothing changed)."""
        head = self.store.run(lambda t: t.head())
        self._write_checkpoint(head)

    def _maybe_checkpoint(self, head: tuple[int, str]) -> None:
        if head[0] - self._last_checkpoint >= self._checkpoint_every:
            self._write_checkpoint(head)

    def _write_checkpoint(self, head: tuple[int, str]) -> None:
        with self._cp_lock:
            if self._checkpointer is None or head[0] <= self._last_checkpoint:
                return
            self._checkpointer.append(head, now=self._clock())
            self._last_checkpoint = head[0]

    def now(self) -> float:
        """The broker's clock (what ledger entries and token expiry are judged by)."""
        return self._clock()

    def verify(self, token: str) -> TokenCheck:
        """Verify a capability token against this broker's key and clock.

        A token that verified once is remembered (bounded cache keyed by the exact token text),
        so its HMAC chain is not rebuilt per request; expiry is still checked against the clock
        on every use, and only successful verifications are cached.
        """
        now = self._clock()
        cached = self._token_cache.get(token)
        if cached is not None and cached.scope is not None:
            if now < cached.scope.expires_at:
                return cached
            self._token_cache.pop(token, None)
        try:
            check = verify_token(self._token_key, token, now=now)
        except Exception as exc:  # verify_token promises never to raise; a caveat of 10**400 once did
            check = TokenCheck(False, 400, f"malformed token ({type(exc).__name__})")
        if check.ok:
            if len(self._token_cache) >= _TOKEN_CACHE_SIZE:
                self._token_cache.clear()
            self._token_cache[token] = check
        return check

    # -- ledger helpers ----------------------------------------------------------------------------

    def _draft(self, ctx: _Ctx, kind: str, detail: Mapping[str, Any]) -> EntryDraft:
        """Encode an entry on the caller's thread; only chaining it waits for the commit."""
        return draft_entry(ctx.subject(), kind, {**ctx.extra, **detail})

    def _chain(self, txn: Txn, *drafts: EntryDraft) -> int:
        """Append ``drafts`` after the head, in order; returns the last seq."""
        head = txn.head()
        entries = []
        for draft in drafts:
            entry = chain(draft, head, now=self._clock())
            entries.append(entry)
            head = (entry.seq, entry.hash)
        txn.append(*entries)
        return head[0]

    def _append(self, txn: Txn, ctx: _Ctx, kind: str, detail: Mapping[str, Any]) -> int:
        return self._chain(txn, self._draft(ctx, kind, detail))

    def _refuse(
        self,
        ctx: _Ctx,
        status: int,
        code: str,
        reason: str,
        *,
        store: bool = False,
        settle: bool = False,
        summaries: bool = False,
    ) -> Steps:
        """Record a denial (and with ``store``, keep it under the key); with ``store`` or ``settle``
        a record already under the key answers instead (see the module docstring)."""
        reason = reason[:_REASON_LIMIT]
        body = {
            "status": "refused",
            "error": {"code": code, "reason": reason},
            "action": ctx.action,
            "idempotency_key": ctx.key or None,
            "argument_digest": ctx.digest or None,
        }

        denial = self._draft(ctx, "denial", {"status": status, "code": code, "reason": reason})
        # a refusal without a token takes the summaries that are due along (one commit, not two)
        due = self.refusals.take_due(now=self._clock()) if summaries else []
        earlier = self._summary_drafts(due)

        def write(txn: Txn) -> BrokerReply:
            if store or settle:  # what is stored under the key answers instead
                raced = self._settle_existing(txn, ctx)
                if raced is not None:
                    return raced
            seq = self._chain(txn, *earlier, denial)
            if store:
                txn.put_record(ctx.record("done", status, body, seq))
            return BrokerReply(status, {**body, "ledger_seq": seq, "replayed": False})

        keys = ctx.slots() if store or settle else []
        undo = functools.partial(self.refusals.give_back, due) if due else None
        reply: BrokerReply = yield StoreWrite(write, keys, on_failure=undo)
        return reply

    def _refuse_unvouched(self, ctx: _Ctx, status: int, code: str, reason: str, *, peer: str) -> Steps:
        """A refusal no valid token vouches for: its own entry when it is the first of its peer's
        window, else counted for the window's summary entry (``refusals``); the reply says which."""
        reason = reason[:_REASON_LIMIT]
        if self.refusals.note(peer, now=self._clock(), status=status, code=code, reason=reason, action=ctx.action):
            ctx.extra = {**ctx.extra, "peer": peer}
            return (yield from self._refuse(ctx, status, code, reason, summaries=True))
        body = {
            "status": "refused",
            "error": {"code": code, "reason": reason},
            "action": ctx.action,
            "idempotency_key": None,
            "argument_digest": None,
            "ledger_seq": None,
            "recorded": f"counted in the summary entry of {peer}'s refusals (window {self.refusals.window_s:g} s)",
            "replayed": False,
        }
        return BrokerReply(status, body)

    def _summary_drafts(self, windows: Sequence[RefusalWindow]) -> list[EntryDraft]:
        return [self._draft(_Ctx(), "denial", window.summary(self.refusals.window_s)) for window in windows]

    def refusal_summary_write(self, *, everything: bool = False) -> StoreWrite | None:
        """The write of every summary of refusals whose window is over (all with ``everything``),
        or None. A server runs it from its loop; ``on_failure`` hands the windows back."""
        windows = self.refusals.take_due(now=self._clock(), everything=everything)
        if not windows:
            return None
        drafts = self._summary_drafts(windows)

        def write(txn: Txn) -> int:
            return self._chain(txn, *drafts)

        return StoreWrite(write, (), on_failure=functools.partial(self.refusals.give_back, windows))

    def flush_refusals(self, *, everything: bool = False) -> None:
        """Write the summaries that are due now (every one with ``everything``) and wait for them.

        Raises:
            Exception: whatever the store raised (the windows are kept for the next attempt).
        """
        step = self.refusal_summary_write(everything=everything)
        if step is None:
            return
        try:
            self.store.run(step.fn)
        except Exception:
            if step.on_failure is not None:
                step.on_failure()
            raise

    def record_refusal(
        self, status: int, code: str, reason: str, *, token: str | None = None, peer: str = "-"
    ) -> BrokerReply:
        """Record a refusal made before the decision path (malformed HTTP, unknown path, a bad
        token on a read endpoint): its own entry, or without a valid token possibly a count in
        its peer's summary (``refusals``)."""
        return self.drive(self.refusal_steps(status, code, reason, token=token, peer=peer))

    def refusal_steps(self, status: int, code: str, reason: str, *, token: str | None = None, peer: str = "-") -> Steps:
        """``record_refusal`` as steps, for a server that drives many paths at once."""
        ctx = _Ctx()
        if token:
            check = self.verify(token)
            if check.scope is not None:
                ctx.task, ctx.principal = check.scope.task, check.scope.principal
                return self._refuse(ctx, status, code, reason)
        return self._refuse_unvouched(ctx, status, code, reason, peer=peer)

    # -- the decision path -----------------------------------------------------------------------

    def handle(self, request: BrokerRequest) -> BrokerReply:
        """Decide, execute at most once, and record; never raises for a bad request."""
        return self.drive(self.steps(request))

    def drive(self, steps: Steps) -> BrokerReply:
        """Run one path one step at a time: each write in its own ``Store.run`` (durable before the
        path goes on), the executor on this thread. ``server_loop`` drives many paths at once instead.

        A storage failure propagates (the request did not complete); an executor's exception is
        handed back to the path, which records it as the write's outcome.
        """
        sent: Any = None
        failed: Exception | None = None
        while True:
            try:
                step = steps.send(sent) if failed is None else steps.throw(failed)
            except StopIteration as done:
                return cast(BrokerReply, done.value)
            sent, failed = None, None
            if isinstance(step, StoreWrite):
                try:
                    sent = self.store.run(step.fn, records=step.records)
                except BaseException:
                    if step.on_failure is not None:
                        step.on_failure()
                    raise
            else:
                try:
                    sent = step.call()
                except Exception as exc:  # the path's own except clauses decide what it means
                    failed = exc

    def steps(self, request: BrokerRequest) -> Steps:
        """The decision path for ``request`` as a generator of steps (see the module docstring)."""
        name = request.action if isinstance(request.action, str) else "-"
        ctx = _Ctx(action=name if name in self.actions else bounded_text(name))  # an unknown name can be 8 KiB
        # 1. token
        if not request.token:
            reason = "no capability token (Authorization: Bearer ...)"
            return (yield from self._refuse_unvouched(ctx, 401, "no_token", reason, peer=request.peer))
        check = self.verify(request.token)
        if not check.ok or check.scope is None:
            return (yield from self._refuse_unvouched(ctx, check.status, "token", check.reason, peer=request.peer))
        scope = check.scope
        ctx.task, ctx.principal = scope.task, scope.principal
        ctx.extra = {"token_id": scope.token_id}
        # 2. action
        action = self.actions.get(ctx.action)
        if action is None:
            return (yield from self._refuse(ctx, 404, "unknown_action", f"no action named {ctx.action!r}"))
        if ctx.action not in scope.actions:
            allowed = f"the token allows {sorted(scope.actions)}, not {ctx.action}"
            return (yield from self._refuse(ctx, 403, "out_of_scope", allowed))
        # 3. arguments
        if request.body_error is not None:
            return (yield from self._refuse(ctx, 400, "bad_body", request.body_error))
        if request.grant is not None and not isinstance(request.grant, str):
            return (yield from self._refuse(ctx, 400, "bad_grant", "grant must be a string (cg1....)"))
        if not isinstance(request.arguments, dict):
            return (yield from self._refuse(ctx, 400, "bad_arguments", "arguments must be a JSON object"))
        try:
            args = action.arguments.model_validate(request.arguments)
            canonical = canonical_json(args.model_dump(mode="json"))
            arguments = json.loads(canonical)
            ctx.digest = DIGEST_PREFIX + hashlib.sha256(canonical).hexdigest()  # == argument_digest(arguments)
        except (ValidationError, ValueError, RecursionError) as exc:  # deep JSON: RecursionError
            return (yield from self._refuse(ctx, 400, "bad_arguments", _short(exc)))
        # 4. idempotency key: the client's key for this logical call, or a fresh one (never derived
        # from the arguments: two deliberate calls are two writes; see ``idempotency``)
        if request.idempotency_key is not None:
            problem = client_key_problem(request.idempotency_key)
            if problem is not None:
                return (yield from self._refuse(ctx, 400, "bad_key", problem))
            ctx.key = request.idempotency_key
        else:
            ctx.key = assign_key()
        return (yield from self._decide_and_execute(ctx, action, args, arguments, request.grant, scope))

    def _stored(self, txn: Txn, ctx: _Ctx) -> IdempotencyRecord | None:
        """The record of this call: under ``<task>/<key>``, else (a call a v1 broker stored under the
        bare key) the bare record, only when its ledger entry names this request's task."""
        record = txn.get_record(ctx.principal, ctx.record_key)
        if record is not None or not should_look_up_v1_record(ctx.key):
            return record
        bare = txn.get_record(ctx.principal, ctx.key)
        if bare is None:
            return None
        entry = txn.entry(bare.intent_seq)
        return bare if entry is not None and entry.task == ctx.task else None

    def _settle_existing(self, txn: Txn, ctx: _Ctx) -> BrokerReply | None:
        plan = plan_claim(self._stored(txn, ctx), action=ctx.action, argument_digest=ctx.digest)
        if plan.outcome == "claim":
            return None
        if plan.outcome == "replay" and plan.record is not None:
            seq = self._append(
                txn,
                ctx,
                "request",
                {"replayed": True, "status": plan.status_code, "first_intent_seq": plan.record.intent_seq},
            )
            return BrokerReply(plan.status_code, {**plan.record.response, "replayed": True, "ledger_seq": seq})
        code = "key_reused" if plan.outcome == "mismatch" else "in_flight"
        seq = self._append(txn, ctx, "denial", {"status": plan.status_code, "code": code, "reason": plan.reason})
        return BrokerReply(
            plan.status_code,
            {
                "status": "refused",
                "error": {"code": code, "reason": plan.reason},
                "action": ctx.action,
                "idempotency_key": ctx.key,
                "argument_digest": ctx.digest,
                "ledger_seq": seq,
                "replayed": False,
            },
        )

    def _decide(self, action: Action, principal: Principal, args: Any) -> tuple[Decision, int]:
        try:
            authz = action.authorize(principal, args)
        except Exception as exc:  # fail closed: an authorization rule that breaks denies
            authz = Decision.deny("authorize", f"authorization rule failed: {type(exc).__name__}")
        if authz.verdict is not ToolVerdict.ALLOW:
            return authz, 403
        if action.validate is None:  # registered without a business rule (contain check flags it)
            business = Decision.allow("validate", f"{action.name} has no business rule")
        else:
            try:
                business = action.validate(principal, args)
            except Exception as exc:  # fail closed
                business = Decision.deny("validate", f"business rule failed: {type(exc).__name__}")
        registered = f"{action.name} is registered with verdict {action.verdict}"
        base = Decision(ToolVerdict(action.verdict), "action.verdict", registered)
        return base.stricter(authz).stricter(business), 422

    def _decide_and_execute(
        self, ctx: _Ctx, action: Action, args: Any, arguments: dict[str, Any], grant: str | None, scope: TokenScope
    ) -> Steps:
        principal = Principal(scope.principal, scope.task)
        if action.quick_rules:
            decision, deny_status = self._decide(action, principal, args)
        else:  # rules may do I/O: a server runs them off its loop (``_decide`` never raises an Exception)
            decision, deny_status = yield ExecutorCall(functools.partial(self._decide, action, principal, args))
        ctx.extra = {**ctx.extra, "rule_id": decision.rule_id}
        if decision.verdict is ToolVerdict.DENY:
            code = "unauthorized" if deny_status == 403 else "business_rule"
            return (yield from self._refuse(ctx, deny_status, code, decision.reason, store=True))
        uses = _DeferredUse()
        grant_detail: dict[str, Any] = {}
        if decision.verdict is ToolVerdict.REVIEW:
            if not grant:
                return (yield from self._pending(ctx, action, arguments, decision))
            verdict = verify_grant(
                self._grant_key,
                grant,
                principal=ctx.principal,
                tool=action.name,
                tool_digest=self.tool_digests[action.name],
                argument_digest=ctx.digest,
                uses=uses,
                now=self._clock(),
            )
            if not verdict.ok or verdict.grant is None:
                return (yield from self._refuse(ctx, 403, "grant", verdict.reason, settle=True))
            grant_detail = {"grant_id": verdict.grant.grant_id, "reviewer": verdict.grant.reviewer}
        intent = Intent(action.name, ctx.principal, ctx.task, ctx.record_key, ctx.digest, arguments)
        drafts = (
            self._draft(ctx, "request", {"replayed": False}),
            self._draft(
                ctx, "decision", {"verdict": decision.verdict.value, "reason": decision.reason, **grant_detail}
            ),
            self._draft(ctx, "intent", {"arguments": arguments}),
        )
        claimed = yield StoreWrite(lambda t: self._claim(t, ctx, drafts, uses), ctx.slots())
        if isinstance(claimed, BrokerReply):
            return claimed
        return (yield from self._execute(ctx, action, args, intent, claimed))

    def _pending(self, ctx: _Ctx, action: Action, arguments: dict[str, Any], decision: Decision) -> Steps:
        body = {
            "status": "pending_review",
            "action": action.name,
            "reason": decision.reason,
            "rule_id": decision.rule_id,
            "idempotency_key": ctx.key,
            "argument_digest": ctx.digest,
            "tool": action.name,
            "tool_digest": self.tool_digests[action.name],
            "principal": ctx.principal,
            "arguments": arguments,
        }
        pending = self._draft(ctx, "decision", {"verdict": "review", "pending": True, "reason": decision.reason})

        def write(txn: Txn) -> BrokerReply:
            stored = self._settle_existing(txn, ctx)  # a retry of a reviewed write replays
            if stored is not None:
                return stored
            return BrokerReply(202, {**body, "ledger_seq": self._chain(txn, pending), "replayed": False})

        reply: BrokerReply = yield StoreWrite(write, ctx.slots())
        return reply

    def _claim(
        self, txn: Txn, ctx: _Ctx, drafts: tuple[EntryDraft, EntryDraft, EntryDraft], uses: _DeferredUse
    ) -> int | BrokerReply:
        """Claim the key and record request, decision and intent (``drafts``), or answer as stored."""
        raced = self._settle_existing(txn, ctx)
        if raced is not None:
            return raced
        if uses.grant_id is not None and not txn.consume_use(uses.grant_id, uses.max_uses):
            reason = f"grant already used {uses.max_uses}/{uses.max_uses}; ask for a new review"
            seq = self._append(txn, ctx, "denial", {"status": 403, "code": "grant", "reason": reason})
            return BrokerReply(
                403,
                {
                    "status": "refused",
                    "error": {"code": "grant", "reason": reason},
                    "action": ctx.action,
                    "idempotency_key": ctx.key,
                    "ledger_seq": seq,
                    "replayed": False,
                },
            )
        seq = self._chain(txn, *drafts)
        txn.put_record(ctx.record("in_flight", 0, {}, seq))
        return seq

    def _execute(self, ctx: _Ctx, action: Action, args: Any, intent: Intent, intent_seq: int) -> Steps:
        base = {
            "action": action.name,
            "idempotency_key": ctx.key,
            "argument_digest": ctx.digest,
            "intent_seq": intent_seq,
        }
        try:
            returned = yield ExecutorCall(lambda: action.execute(args, action.context(intent, self._secrets)))
            try:  # the write happened: a result that is not JSON must not turn it into a failure
                result = json.loads(canonical_json(dict(returned)))
            except (TypeError, ValueError):
                result = {"note": "the executor returned a result that is not a JSON object"}
            status, body = 200, {**base, "status": "succeeded", "result": result}
        except ActionFailed as exc:
            status, body = 502, {**base, "status": "failed", "error": {"code": "executor", "reason": exc.reason}}
        except Exception as exc:  # executor crashed: record that it failed; never echo its message (secrets)
            log.warning("executor of %s raised %s", action.name, type(exc).__name__)
            status, body = (
                502,
                {
                    **base,
                    "status": "failed",
                    "error": {"code": "executor", "reason": f"executor raised {type(exc).__name__}"},
                },
            )

        outcome = self._draft(
            ctx,
            "outcome",
            {
                "status": body["status"],
                "http_status": status,
                "intent_seq": intent_seq,
                "result": body.get("result"),
                "error": body.get("error"),
            },
        )

        def finish(txn: Txn) -> int:
            seq = self._chain(txn, outcome)
            txn.put_record(ctx.record("done", status, body, intent_seq))
            return seq

        seq = yield StoreWrite(finish)
        return BrokerReply(status, {**body, "ledger_seq": seq, "replayed": False})

    # -- recovery ----------------------------------------------------------------------------------

    def reconcile(self) -> list[dict[str, Any]]:
        """Settle every in-flight intent (see the module docstring); returns one dict per intent."""
        pending = self.store.run(lambda t: [(r, t.entry(r.intent_seq)) for r in t.in_flight()])
        report: list[dict[str, Any]] = []
        for record, entry in pending:
            action = self.actions.get(record.action)
            arguments = dict(entry.detail.get("arguments", {})) if entry is not None else {}
            stored_task, key = split_record_key(record.key)  # task None: stored bare by a v1 broker
            task = stored_task if stored_task is not None else entry.task if entry is not None else "-"
            # the executor saw the record key (a v1 one: the bare key), so the check hook must too
            intent = Intent(record.action, record.principal, task, record.key, record.argument_digest, arguments)
            found = self._check(action, intent)
            ctx = _Ctx(task, record.principal, record.action, key, record.argument_digest)
            report.append({"idempotency_key": key, "principal": record.principal, "result": found.state})
            self.store.run(functools.partial(self._settle, record=record, ctx=ctx, found=found))
        return report

    def _check(self, action: Action | None, intent: Intent) -> CheckResult:
        if action is None or action.check is None:
            return CheckResult("unknown", reason="the action has no check hook")
        try:
            return action.check(intent, action.context(intent, self._secrets))
        except Exception as exc:  # a failing check cannot prove anything either way
            return CheckResult("unknown", reason=f"check hook raised {type(exc).__name__}")

    def _settle(self, txn: Txn, *, record: IdempotencyRecord, ctx: _Ctx, found: CheckResult) -> None:
        base = {
            "action": record.action,
            "idempotency_key": ctx.key,  # as the client sent it; the record stays under record.key
            "argument_digest": record.argument_digest,
            "intent_seq": record.intent_seq,
        }
        detail = {"intent_seq": record.intent_seq, "result": found.state, "reason": found.reason}
        if found.state == "applied":
            result = json.loads(canonical_json(dict(found.result or {})))
            body = {**base, "status": "succeeded", "result": result, "reconciled": True}
            self._append(txn, ctx, "reconcile", {**detail, "status": "succeeded", "result_value": result})
            txn.put_record(replace(record, state="done", status_code=200, response=body))
        elif found.state == "not_applied":
            self._append(txn, ctx, "reconcile", {**detail, "status": "not_applied"})
            txn.delete_record(record.principal, record.key)
        else:
            body = {
                **base,
                "status": "outcome_unknown",
                "error": {
                    "code": "outcome_unknown",
                    "reason": "the broker stopped during this write and "
                    "cannot tell whether it happened; an operator must check the record",
                },
            }
            self._append(txn, ctx, "reconcile", {**detail, "status": "unknown"})
            txn.put_record(replace(record, state="unknown", status_code=500, response=body))


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())[:500]
    return str(exc)[:500]
