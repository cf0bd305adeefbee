"""Egress records: one ``EgressEvent`` per attempt, kept until the runtime drains them.

Recorded: every connection attempt through the proxy (CONNECT and plain HTTP, allowed, refused or
malformed), every connection to a placeholder address, and every DNS query the stub refuses
(NXDOMAIN for an unlisted name). Allowed DNS answers are not events: the connection that follows
is. Bytes each way are filled in when a tunnel closes.

Not done here: deciding anything. The log is bounded (``max_events``); past it, the oldest events
are dropped and ``dropped`` counts them, so a flood of attempts cannot grow host memory.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contain.egress.policy import Decision

__all__ = ["EgressEvent", "EventLog"]


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
    decision: Decision,
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
        verdict="allow" if decision.allowed else "deny",
        reason=reason or decision.reason,
        rule_id=decision.rule_id,
        via=via,
        bytes_up=up,
        bytes_down=down,
    )


class EventLog:
    """Thread-safe, bounded list of events: the loop thread appends, the runtime drains."""

    def __init__(self, *, max_events: int = 100_000) -> None:
        self._events: deque[EgressEvent] = deque(maxlen=max_events)
        self._lock = threading.Lock()
        self.dropped = 0

    def record(self, event: EgressEvent) -> None:
        with self._lock:
            if len(self._events) == self._events.maxlen:
                self.dropped += 1
            self._events.append(event)

    def drain(self) -> list[EgressEvent]:
        with self._lock:
            out = list(self._events)
            self._events.clear()
            return out
