"""One decision value for every layer that decides: a verdict, the rule that decided, and why.

``Decision(verdict, rule_id, reason)`` is what the gate returns for a tool call
(``gate.Gate.evaluate``), what a broker action's ``authorize`` and ``validate`` return and what
the broker records, and the base of the egress proxy's ``egress.policy.EgressDecision``, which
adds what only a connection has: the host and port it names and the checked addresses to dial.
The verdict is ``boundary.ToolVerdict`` (``allow``, ``review``, ``deny``), the same words the
manifest's ``tools:`` rules and broker.yaml use; egress never answers ``review``.

What is enforced here: a verdict that is not one of the three (for example a plain string typed
by an action author, ``"alow"``) raises ``ValueError`` when the decision is built, so no layer
ever compares against a spelling it does not know; the spellings ``"allow"``, ``"review"`` and
``"deny"`` become the enum members. ``is_allowed`` is true only for ``allow``.

What is not a ``Decision`` (their meaning differs, so they keep their own types):
``broker.peers.PeerDecision`` (whether a connection's uid may talk to the broker at all, and the
peer name it is recorded under), ``broker.verification.LedgerVerdict`` (whether a ledger file
verifies), ``probe.case.Verdict`` (how an escape-battery case came out) and the verdicts of
``inventory`` and the container image plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from contain.boundary.kinds import ToolVerdict

__all__ = ["Decision"]

_STRICTNESS = {ToolVerdict.ALLOW: 0, ToolVerdict.REVIEW: 1, ToolVerdict.DENY: 2}


@dataclass(frozen=True)
class Decision:
    """A verdict, the id of the rule that made it, and a sentence for whoever has to act on it.

    Raises:
        ValueError: ``verdict`` is not allow, review or deny.
    """

    verdict: ToolVerdict
    rule_id: str
    reason: str

    def __post_init__(self) -> None:
        if type(self.verdict) is not ToolVerdict:
            object.__setattr__(self, "verdict", ToolVerdict(self.verdict))

    @property
    def is_allowed(self) -> bool:
        """True only for ``allow``."""
        return self.verdict is ToolVerdict.ALLOW

    @staticmethod
    def allow(rule_id: str, reason: str = "allowed") -> Decision:
        return Decision(ToolVerdict.ALLOW, rule_id, reason)

    @staticmethod
    def deny(rule_id: str, reason: str) -> Decision:
        return Decision(ToolVerdict.DENY, rule_id, reason)

    @staticmethod
    def review(rule_id: str, reason: str) -> Decision:
        return Decision(ToolVerdict.REVIEW, rule_id, reason)

    def stricter(self, other: Decision) -> Decision:
        """The stricter of two decisions (deny > review > allow); ties keep ``self``."""
        return other if _STRICTNESS[other.verdict] > _STRICTNESS[self.verdict] else self
