"""Answers "which writes succeeded?" from ledger entries (pure; ``contain ledger show`` prints it).

A write is an ``intent`` entry; its status is settled by the ``outcome`` or ``reconcile`` entry
that names its ``intent_seq``: succeeded, failed, not_applied (a crash before the executor ran;
the key was released), unknown (a crash the check hook could not settle), or in_flight (no
outcome yet: the broker is running it now or has not restarted since it stopped). Refusals
(``denial`` entries) and pending reviews are counted separately.

What is not: this trusts the entries it is given; judge them with ``verification.verify_ledger``
first (the CLI does, and prints its warning above and below the listing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from contain.broker.ledger import LedgerEntry

__all__ = ["LedgerSummary", "WriteRecord", "summarize"]


@dataclass
class WriteRecord:
    """One write the broker decided to perform, and what became of it."""

    intent_seq: int
    time: float
    task: str
    principal: str
    action: str
    idempotency_key: str
    argument_digest: str
    arguments: dict[str, Any]
    status: str = "in_flight"
    result: Any = None
    settled_seq: int | None = None
    reconciled: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class LedgerSummary:
    writes: list[WriteRecord]
    refusals: list[LedgerEntry]
    pending_reviews: list[LedgerEntry]


def summarize(
    entries: Iterable[LedgerEntry], *, task: str | None = None, principal: str | None = None
) -> LedgerSummary:
    """Fold entries into writes with their final status, filtered by task and principal."""
    writes: dict[int, WriteRecord] = {}
    refusals: list[LedgerEntry] = []
    pending: list[LedgerEntry] = []
    for entry in entries:
        if (task is not None and entry.task != task) or (principal is not None and entry.principal != principal):
            continue
        detail = dict(entry.detail)
        if entry.kind == "intent":
            writes[entry.seq] = WriteRecord(
                entry.seq,
                entry.time,
                entry.task,
                entry.principal,
                entry.action,
                entry.idempotency_key,
                entry.argument_digest,
                dict(detail.get("arguments", {})),
            )
        elif entry.kind in ("outcome", "reconcile"):
            record = writes.get(int(detail.get("intent_seq", -1)))
            if record is None:
                continue
            record.status = str(detail.get("status", "unknown"))
            record.result = detail.get("result") if entry.kind == "outcome" else detail.get("result_value")
            if entry.kind == "outcome" and record.status == "failed":
                record.result = detail.get("error")
            record.settled_seq = entry.seq
            record.reconciled = entry.kind == "reconcile"
        elif entry.kind == "denial":
            refusals.append(entry)
        elif entry.kind == "decision" and detail.get("pending"):
            pending.append(entry)
    return LedgerSummary(sorted(writes.values(), key=lambda w: w.intent_seq), refusals, pending)
