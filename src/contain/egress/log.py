"""Egress records: one ``EgressEvent`` per attempt, kept until the runtime drains them.

Recorded: every connection attempt through the proxy (CONNECT and plain HTTP, allowed, refused or
malformed), every connection to a placeholder address, and every DNS query the stub refuses
(NXDOMAIN for an unlisted name). Allowed DNS answers are not events: the connection that follows
is. Bytes each way are filled in when a tunnel closes.

Bounded by bytes, because the sandbox writes what goes in (hostnames, request targets, reasons
that quote them): a workload must not be able to grow the host process. Three bounds, each a
named constant below with its reason:

- each text field of an event is clipped to ``MAX_FIELD_CHARS`` (the clip says how much was cut);
- the events kept between two drains cost at most ``MAX_LOG_BYTES`` (``event_cost``) and number at
  most ``max_events``;
- past either bound, an event is not kept but COUNTED: ``DroppedEvents`` holds how many, their
  cost, and how many of them were refusals per rule id. Drops keep the earliest events (what the
  run did first) and never lose the fact that later ones happened: the runtime turns the count
  into ``RunResult.egress_dropped`` and, when refusals were among them, into a violation.

Not done here: deciding anything.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contain.egress.policy import EgressDecision

__all__ = [
    "MAX_EVENTS",
    "MAX_FIELD_CHARS",
    "MAX_LOG_BYTES",
    "DroppedEvents",
    "EgressEvent",
    "EventBatch",
    "EventLog",
    "clip_text",
    "event_cost",
]

# A DNS name is at most 253 characters (RFC 1035 2.3.4); reasons quote one name and a port plus a
# sentence. 512 keeps every legitimate field whole and cuts a 16 KB "hostname" to a readable head.
MAX_FIELD_CHARS = 512
# Retained events between two drains (one run). An event kept costs ~1 KiB of Python objects on
# top of its text (the frozen dataclass, its to_dict() for the RunResult, the violation); 8 MiB
# keeps thousands of attempts, far more than a legitimate run makes, and caps the host's share
# of a flood at a few times this figure.
MAX_LOG_BYTES = 8 * 1024**2
MAX_EVENTS = 10_000
EVENT_OVERHEAD_BYTES = 1024  # see MAX_LOG_BYTES: objects per kept event besides its text
MAX_DROPPED_RULES = 32  # distinct rule ids counted one by one; more share "other" (rule ids are policy rows)
_TEXT_FIELDS = ("host", "address", "reason", "rule_id", "via", "verdict")


@dataclass(frozen=True)
class EgressEvent:
    """One egress attempt as recorded on the host side.

    ``verdict`` is ``"allow"`` or ``"deny"``; ``via`` is ``"connect"``, ``"http"``,
    ``"transparent"`` or ``"dns"``; ``address`` is the address dialled (``None`` if none was).
    """

    time: float
    host: str
    port: int
    address: str | None
    verdict: str
    reason: str
    rule_id: str | None
    via: str
    bytes_up: int
    bytes_down: int

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready mapping (for ``RunResult`` and ``contain run --json``)."""
        return asdict(self)

    def violation_message(self) -> str | None:
        """For a refusal, a sentence an agent can act on; ``None`` for an allowed attempt."""
        if self.verdict != "deny":
            return None
        return self.reason


def decision_event(
    decision: EgressDecision,
    via: str,
    *,
    time: float,
    address: str | None = None,
    up: int = 0,
    down: int = 0,
    reason: str | None = None,
) -> EgressEvent:
    """The record of one attempt, from the decision that judged it (proxy and capture alike)."""
    return EgressEvent(
        time=time,
        host=decision.host,
        port=decision.port,
        address=address,
        verdict="allow" if decision.is_allowed else "deny",
        reason=reason or decision.reason,
        rule_id=decision.rule_id,
        via=via,
        bytes_up=up,
        bytes_down=down,
    )


def clip_text(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """``text`` cut to ``limit`` characters plus a marker saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more chars]"


def event_cost(event: EgressEvent) -> int:
    """Bytes an event is charged against ``MAX_LOG_BYTES``: its text plus the fixed overhead."""
    text = sum(len(getattr(event, name) or "") for name in _TEXT_FIELDS)
    return EVENT_OVERHEAD_BYTES + text


@dataclass
class DroppedEvents:
    """Events that happened but were not kept: how many, their cost, the refusals per rule."""

    events: int = 0
    bytes: int = 0
    denied_by_rule: dict[str, int] = field(default_factory=dict)

    @property
    def denied(self) -> int:
        return sum(self.denied_by_rule.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "bytes": self.bytes,
            "denied": self.denied,
            "denied_by_rule": dict(self.denied_by_rule),
        }

    def violation_message(self) -> str | None:
        """For dropped refusals, a sentence saying they happened; ``None`` when there were none."""
        if not self.denied:
            return None
        rules = ", ".join(f"{rule} x{count}" for rule, count in sorted(self.denied_by_rule.items()))
        return (
            f"{self.denied} further refused egress attempt(s) were not recorded individually "
            f"(the event log is bounded; {self.events} event(s), {self.bytes} bytes dropped): {rules}"
        )


@dataclass(frozen=True)
class EventBatch:
    """What one drain returns: the kept events, oldest first, and what was dropped."""

    events: list[EgressEvent]
    dropped: DroppedEvents

    @property
    def truncated(self) -> bool:
        return self.dropped.events > 0


class EventLog:
    """Thread-safe, byte-bounded list of events: the loop thread appends, the runtime drains."""

    def __init__(self, *, max_events: int = MAX_EVENTS, max_bytes: int = MAX_LOG_BYTES) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._events: list[EgressEvent] = []
        self._bytes = 0
        self._dropped = DroppedEvents()
        self._lock = threading.Lock()

    def record(self, event: EgressEvent) -> None:
        """Keep ``event`` (its text clipped) if both bounds allow, else count it as dropped."""
        offered = event_cost(event)
        clipped = _clip_event(event)
        cost = event_cost(clipped)
        with self._lock:
            if len(self._events) < self.max_events and self._bytes + cost <= self.max_bytes:
                self._events.append(clipped)
                self._bytes += cost
                return
            self._dropped.events += 1
            self._dropped.bytes += offered
            if event.verdict != "allow":  # a refusal is never lost: counted per rule
                counts = self._dropped.denied_by_rule
                rule = clip_text(event.rule_id or "egress.unknown", 64)
                if rule not in counts and len(counts) >= MAX_DROPPED_RULES:
                    rule = "other"
                counts[rule] = counts.get(rule, 0) + 1

    def drain(self) -> EventBatch:
        """The events and drop counts since the last drain; the log starts empty again."""
        with self._lock:
            batch = EventBatch(self._events, self._dropped)
            self._events, self._bytes, self._dropped = [], 0, DroppedEvents()
            return batch


def _clip_event(event: EgressEvent) -> EgressEvent:
    def clip(value: str | None) -> str | None:
        return None if value is None else clip_text(value)

    if all(len(getattr(event, name) or "") <= MAX_FIELD_CHARS for name in _TEXT_FIELDS):
        return event
    return replace(
        event,
        host=clip_text(event.host),
        address=clip(event.address),
        reason=clip_text(event.reason),
        rule_id=clip(event.rule_id),
        via=clip_text(event.via),
        verdict=clip_text(event.verdict),
    )
