"""A job's identity, and the broker idempotency keys derived from it (pure).

Why. A job lost with its node is rerun elsewhere. If its first run already wrote through the
broker, the rerun must not write again. The broker replays a call whose idempotency key it has
seen (``contain.broker.idempotency``), so a rerun that sends the *same keys* as the first run gets
the first run's answers instead of a second write. Random keys (the client's default) would make
every rerun a new write.

The keys. Every run of one job gets the same ``call_key_prefix``: a hash of the batch id, the
job id and the job's content (its argv, inputs, outputs and validated manifest). Inside the
sandbox the broker client numbers the job's calls ``<prefix>-1``, ``<prefix>-2``, ... in the
order it makes them (``contain.broker.sandbox_client``, from ``CALL_KEY_PREFIX_ENV``), so the
n-th call of a rerun replays the n-th call of the first run.

What this guarantees, and what it does not:

- A rerun that makes the same calls in the same order writes nothing twice: each call replays.
- A rerun whose n-th call differs from the first run's (other arguments, other order, e.g.
  because the code is not deterministic) is refused by the broker (422, key reused with other
  arguments): it fails closed, it never writes twice. Its job reports the refusal.
- Two different jobs never share keys: the job id and content are in the hash. Another job of
  the same batch cannot compute your keys: the batch id is not handed to sandboxes (only each
  job's own prefix is). A batch started again with a new batch id is a new set of calls and
  writes again; pass the old batch id (``--batch-id``) to resume it instead.
- Code that passes its own key (``idempotency_key=``) keeps it; the fleet does not rewrite it.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from typing import Any

__all__ = [
    "CALL_KEY_COUNTER_ENV",
    "CALL_KEY_PREFIX_ENV",
    "JOB_ID_ENV",
    "JOB_KEY_DOMAIN",
    "call_key_prefix",
    "is_valid_batch_id",
    "job_content_digest",
    "new_batch_id",
]

# Domain separation, so a job key never equals a hash made for another purpose from the same
# bytes (the same convention as the ledger's and the tokens' prefixes).
JOB_KEY_DOMAIN = b"contain-fleet-job-key-v1\x00"
# What the node sets in the sandbox's environment for the broker client (sandbox_client.py reads
# the first two; the job id is for the job's own logs).
CALL_KEY_PREFIX_ENV = "CONTAIN_CALL_KEY_PREFIX"
CALL_KEY_COUNTER_ENV = "CONTAIN_CALL_KEY_COUNTER"
JOB_ID_ENV = "CONTAIN_FLEET_JOB_ID"
_BATCH_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{7,63}")
# 128 bits of the hash: collisions between jobs are out of reach; the key stays short for logs.
_PREFIX_HEX = 32


def new_batch_id() -> str:
    """A fresh batch id: 128 random bits (RFC 4086 section 6.3; ``secrets`` uses the OS CSPRNG)."""
    return "b-" + secrets.token_hex(16)


def is_valid_batch_id(value: str) -> bool:
    """8-64 letters, digits, ``_ . -``, starting with a letter or digit."""
    return bool(_BATCH_ID.fullmatch(value))


def job_content_digest(*, argv: tuple[str, ...], inputs: list[dict[str, Any]], outputs: tuple[str, ...],
                       boundary_dump: dict[str, Any]) -> str:
    """SHA-256 of what the job runs, as canonical JSON (sorted keys, no spaces)."""
    body = {"argv": list(argv), "inputs": inputs, "outputs": list(outputs), "boundary": boundary_dump}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def call_key_prefix(*, batch_id: str, job_id: str, content_digest: str) -> str:
    """``fj-`` + 32 hex digits: the same for every run of this job in this batch, and only for it.

    The result is a valid broker key (``[A-Za-z0-9_.:-]``) and leaves room for ``-<n>`` under
    the broker's 128-character limit.
    """
    material = JOB_KEY_DOMAIN + b"\x00".join(part.encode() for part in (batch_id, job_id, content_digest))
    return "fj-" + hashlib.sha256(material).hexdigest()[:_PREFIX_HEX]
