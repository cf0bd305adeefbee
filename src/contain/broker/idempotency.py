"""Idempotency: one key per logical call, scoped to the task; one effect and one stored answer per key.

What a key means. A key names one *logical call*: the client library makes a fresh random key
when the caller starts a call and sends the same key on every retry of that call. So two
deliberate calls are two writes even when their arguments are equal (set 11000, then 10500, then
11000 again: three writes, the invoice ends at 11000), and a retry after a lost response is one
write. A call sent without a key gets a key the broker assigns (``assign_key``): it is executed
once and can never be retried into the stored answer (the ``s:`` form is refused from clients).

Why not keys derived from the arguments (the first design, ``d:`` keys): the same arguments are not
the same call. Deriving collapsed a later deliberate write into the replay of an earlier one (the
third call above answered "succeeded, replayed" and left 10500), and because derived keys were
shared by every task of a principal and never expired, one task could pre-claim another task's
future write, replaying or refusing it (422) for good.

Where a key lives. The broker stores a record under (principal, ``record_key(task, key)``) =
(principal, ``<task>/<key>``); principal and task come from the capability token, never from the
request. A key cannot contain ``/``, so the split is unambiguous and no key of one task can name
another task's record. Executors receive the stored form as ``Intent.idempotency_key`` (so
``Intent.scoped_key`` is ``<principal>/<task>/<key>``).

Records written before this scheme (ledger format v1 brokers) are stored under the bare key.
They stay valid: reconcile settles them under the bare key, and a retry of such a call from the
task that made it still finds its answer (``should_look_up_v1_record``; the broker checks that the
record's ledger entry names the same task). Derived ``d:`` records are never looked up again.

Rules (``plan_claim``), a pure function of what is stored under a key:

  =============================  =========  ==================================================
  stored under the record key    status     why
  =============================  =========  ==================================================
  nothing                        claim      first request with this key: go ahead
  same digest, finished          replay     the first result (success or failure) is returned again
  same digest, in flight         409        a concurrent duplicate must not run the executor twice
  same digest, outcome unknown   replay     a crash left the effect unknown; never retried blindly
  different argument digest      422        a reused key with different arguments is a client bug
  =============================  =========  ==================================================

What is not enforced: a client that sends one call twice under two keys (a library that makes a
new key per retry) gets two writes; that is what distinct keys mean. A task can block its own
later call by reusing its key (422) but never another task's. Records do not expire: a key stays
bound to its first call for the life of the database.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "RESERVED_KEY_PREFIXES",
    "ClaimPlan",
    "IdempotencyRecord",
    "ReservedPrefix",
    "assign_key",
    "client_key_problem",
        "is_valid_key",
    "plan_claim",
    "record_key",
    "should_look_up_v1_record",
    "split_record_key",
]

_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
# Separates the task from the key in a record key; the key alphabet above has no "/".
RECORD_KEY_SEPARATOR = "/"
# 128 random bits: a broker-assigned key is never guessed and never repeats (RFC 4086 section 6.3:
# secrets draws from the OS CSPRNG).
_ASSIGNED_KEY_BYTES = 16

State = Literal["in_flight", "done", "unknown"]


@dataclass(frozen=True)
class ReservedPrefix:
    """A key form only the broker makes; a client key starting with it (any case) is refused."""

    prefix: str
    why: str


RESERVED_KEY_PREFIXES: tuple[ReservedPrefix, ...] = (
    ReservedPrefix(
        "s:",
        "the broker assigns s: keys to calls sent without a key; a client that could send one could "
        "claim such a call's stored answer instead of making its own write",
    ),
    ReservedPrefix(
        "d:",
        "v1 brokers derived d: keys from the action and arguments; a client sending one would make "
        "its call look derived in the ledger, and those records must never be reached again",
    ),
)


@dataclass(frozen=True)
class IdempotencyRecord:
    """What the broker stored under (principal, record key)."""

    principal: str
    key: str  # the record key: "<task>/<key>" (bare key: written by a v1 broker)
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


def client_key_problem(key: object) -> str | None:
    """Why a key sent by a client is refused, or None when it is acceptable (pure).

    Returns:
        A reason naming the accepted form, for a 400 reply; None for a valid client key.
    """
    if not isinstance(key, str) or not is_valid_key(key):
        return "idempotency_key must be 1-128 of [A-Za-z0-9_.:-]"
    for row in RESERVED_KEY_PREFIXES:
        if key.lower().startswith(row.prefix):
            return f"idempotency_key may not start with {row.prefix!r}: {row.why}"
    return None


def assign_key(random_bytes: bytes | None = None) -> str:
    """A broker-assigned key for a call sent without one: ``s:`` + 32 hex digits, never reused.

    Args:
        random_bytes: 16 bytes to use instead of the CSPRNG (for tests only).
    """
    raw = secrets.token_bytes(_ASSIGNED_KEY_BYTES) if random_bytes is None else random_bytes
    return RESERVED_KEY_PREFIXES[0].prefix + raw.hex()


def record_key(task: str, key: str) -> str:
    """The key a record is stored under: ``<task>/<key>``, so keys of different tasks never meet."""
    return f"{task}{RECORD_KEY_SEPARATOR}{key}"


def split_record_key(stored: str) -> tuple[str | None, str]:
    """(task, key) of a record key; task None for a bare key written by a v1 broker."""
    task, separator, key = stored.rpartition(RECORD_KEY_SEPARATOR)
    return (task, key) if separator else (None, stored)


def should_look_up_v1_record(key: str) -> bool:
    """True when a v1 broker may have stored a record under this bare client key (see the module docstring)."""
    return not any(key.lower().startswith(row.prefix) for row in RESERVED_KEY_PREFIXES)


def plan_claim(stored: IdempotencyRecord | None, *, action: str, argument_digest: str) -> ClaimPlan:
    """Decide what a request does with its key, given what is stored (pure)."""
    if stored is None:
        return ClaimPlan("claim", 0, "first use of this key")
    shown = split_record_key(stored.key)[1]
    if stored.action != action or stored.argument_digest != argument_digest:
        return ClaimPlan(
            "mismatch",
            422,
            f"idempotency key {shown!r} was first used for {stored.action} with {stored.argument_digest}; "
            "use a new key for different arguments",
            stored,
        )
    if stored.state == "in_flight":
        return ClaimPlan("conflict", 409, f"a request with key {shown!r} is in flight; retry later", stored)
    return ClaimPlan("replay", stored.status_code, "replaying the stored result of the first request", stored)
