"""Idempotency: one key, one effect, one stored answer.

Rules (issue 6), as a pure function of what is stored under a key (``plan_claim``):

  =============================  =========  ==================================================
  stored under (principal, key)  status     why
  =============================  =========  ==================================================
  nothing                        claim      first request with this key: go ahead
  same digest, finished          replay     the first result (success or failure) is returned again
  same digest, in flight         409        a concurrent duplicate must not run the executor twice
  same digest, outcome unknown   replay     a crash left the effect unknown; never retried blindly
  different argument digest      422        a reused key with different arguments is a client bug
  =============================  =========  ==================================================

Keys are scoped per principal, so one principal cannot read or block another's answers. When the
caller gives no key, ``derive_key`` binds it to the action, the argument digest and the grant: the
same call with the same grant is the same request.

What is not enforced: a caller that sends the same write twice under two different keys gets two
writes; that is what distinct keys mean. Derived keys make identical calls collapse into one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["IDEMPOTENCY_DOMAIN", "ClaimPlan", "IdempotencyRecord", "derive_key", "is_valid_key", "plan_claim"]

IDEMPOTENCY_DOMAIN = b"contain-idempotency-v1\x00"
_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,128}")

State = Literal["in_flight", "done", "unknown"]


@dataclass(frozen=True)
class IdempotencyRecord:
    """What the broker stored under (principal, key)."""

    principal: str
    key: str
    action: str
    argument_digest: str
    state: State
    status_code: int
    response: Mapping[str, Any]
    intent_seq: int


@dataclass(frozen=True)
class ClaimPlan:
    """What to do with a request given the stored record (see the module table)."""

    outcome: Literal["claim", "replay", "conflict", "mismatch"]
    status_code: int
    reason: str
    record: IdempotencyRecord | None = None


def is_valid_key(key: str) -> bool:
    """Keys are 1-128 characters of letters, digits and ``_ . : -`` (they appear in logs and URLs)."""
    return bool(_KEY.fullmatch(key))


def derive_key(*, action: str, argument_digest: str, grant_id: str | None) -> str:
    """The key for a request that gave none: bound to the action, the arguments and the grant."""
    material = IDEMPOTENCY_DOMAIN + "\x00".join((action, argument_digest, grant_id or "")).encode()
    return "d:" + hashlib.sha256(material).hexdigest()[:40]


def plan_claim(stored: IdempotencyRecord | None, *, action: str, argument_digest: str) -> ClaimPlan:
    """Decide what a request does with its key, given what is stored (pure)."""
    if stored is None:
        return ClaimPlan("claim", 0, "first use of this key")
    if stored.action != action or stored.argument_digest != argument_digest:
        return ClaimPlan(
            "mismatch",
            422,
            f"idempotency key {stored.key!r} was first used for {stored.action} with {stored.argument_digest}; "
            "use a new key for different arguments",
            stored,
        )
    if stored.state == "in_flight":
        return ClaimPlan("conflict", 409, f"a request with key {stored.key!r} is in flight; retry later", stored)
    return ClaimPlan("replay", stored.status_code, "replaying the stored result of the first request", stored)
