"""The gateway's seam to the review queue: submit a ``review`` call, later read its decision.

The gateway does not approve anything. It submits the exact call (principal, tool, tool digest,
arguments) and the gate's decision, and gets a request id the agent can quote. A reviewer decides
elsewhere (``contain review``, the web page); an approval mints a signed grant, and the gateway
verifies that grant itself (``contain.gate.grants.verify_grant``) before forwarding, so a store
that says "approved" without a valid grant for these exact arguments does not let a call through.

``ReviewQueue`` is the interface; ``MemoryReviewQueue`` is the in-package fake for tests and
embedding; ``StoreReviewQueue`` adapts the SQLite queue of ``contain.gate.store`` (the one
``contain review`` and its web page decide on).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Protocol

from contain.decision import Decision
from contain.errors import GateError
from contain.gate.digests import argument_digest
from contain.gate.model import ToolCall
from contain.gate.store import ReviewState, ReviewStore

__all__ = ["MemoryReviewQueue", "ReviewQueue", "ReviewState", "ReviewStatus", "StoreReviewQueue"]


@dataclass(frozen=True)
class ReviewStatus:
    """A request's state; ``grant_token`` is set once approved, ``reason`` says why when denied."""

    request_id: str
    state: ReviewState
    grant_token: str | None = None
    reason: str = ""


class ReviewQueue(Protocol):
    """Where ``review`` calls wait for a person."""

    def submit(self, call: ToolCall, decision: Decision) -> str:
        """Queue the call; returns the request id."""
        ...

    def status(self, request_id: str) -> ReviewStatus:
        """The request's current state (an unknown id is EXPIRED)."""
        ...

    def approved_grant(self, call: ToolCall) -> str | None:
        """A grant token a reviewer approved for exactly this call, if any (still to be verified)."""
        ...


class MemoryReviewQueue:
    """A ReviewQueue in memory: tests (and embedders) approve with a token they mint themselves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.calls: dict[str, tuple[ToolCall, Decision]] = {}
        self._status: dict[str, ReviewStatus] = {}

    def submit(self, call: ToolCall, decision: Decision) -> str:
        with self._lock:
            request_id = f"r{next(self._ids)}"
            self.calls[request_id] = (call, decision)
            self._status[request_id] = ReviewStatus(request_id, ReviewState.PENDING)
        return request_id

    def status(self, request_id: str) -> ReviewStatus:
        with self._lock:
            return self._status.get(request_id, ReviewStatus(request_id, ReviewState.EXPIRED, reason="unknown id"))

    def approved_grant(self, call: ToolCall) -> str | None:
        with self._lock:
            for request_id, (queued, _decision) in reversed(self.calls.items()):
                status = self._status[request_id]
                if (
                    status.state is ReviewState.APPROVED
                    and (queued.principal, queued.tool, queued.tool_digest)
                    == (call.principal, call.tool, call.tool_digest)
                    and argument_digest(queued.arguments) == argument_digest(call.arguments)
                ):
                    return status.grant_token
        return None

    def approve(self, request_id: str, grant_token: str) -> None:
        with self._lock:
            self._status[request_id] = ReviewStatus(request_id, ReviewState.APPROVED, grant_token)

    def deny(self, request_id: str, reason: str) -> None:
        with self._lock:
            self._status[request_id] = ReviewStatus(request_id, ReviewState.DENIED, reason=reason)


class StoreReviewQueue:
    """A ReviewQueue on ``contain.gate.store.ReviewStore`` (SQLite, shared with ``contain review``)."""

    def __init__(self, store: ReviewStore) -> None:
        self.store = store

    def submit(self, call: ToolCall, decision: Decision) -> str:
        return self.store.submit(call, decision).request_id

    def status(self, request_id: str) -> ReviewStatus:
        try:
            request = self.store.get(request_id)
        except GateError as exc:
            return ReviewStatus(request_id, ReviewState.EXPIRED, reason=exc.cause)
        if request.status is ReviewState.PENDING and request.expires_at <= self.store.now():
            return ReviewStatus(request_id, ReviewState.EXPIRED, reason="nobody decided in time")
        return ReviewStatus(request_id, request.status, request.grant_token, request.review_reason or "")

    def approved_grant(self, call: ToolCall) -> str | None:
        return self.store.grant_for(call)
