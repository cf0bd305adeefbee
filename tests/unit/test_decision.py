"""The one decision value: verdict, rule id, reason, shared by the gate, the broker and egress."""

from __future__ import annotations

import itertools

import pytest

import contain.broker
import contain.gate
from contain.boundary import ToolVerdict
from contain.decision import Decision
from contain.egress.policy import EgressDecision, deny


def test_the_gate_and_the_broker_hand_out_the_same_decision_class() -> None:
    assert contain.gate.Decision is contain.broker.Decision is Decision
    assert issubclass(EgressDecision, Decision)


@pytest.mark.parametrize("verdict", list(ToolVerdict))
def test_a_verdict_spelt_as_text_becomes_the_enum_member(verdict: ToolVerdict) -> None:
    decision = Decision(str(verdict), "r", "why")  # type: ignore[arg-type]
    assert decision.verdict is verdict
    assert decision.is_allowed is (verdict is ToolVerdict.ALLOW)


@pytest.mark.parametrize("spelling", ["alow", "ALLOW", "", "permit", None, True])
def test_an_unknown_verdict_is_refused_when_the_decision_is_built(spelling: object) -> None:
    with pytest.raises(ValueError):
        Decision(spelling, "r", "why")  # type: ignore[arg-type]


def test_the_constructors_name_their_verdict() -> None:
    assert Decision.allow("r") == Decision(ToolVerdict.ALLOW, "r", "allowed")
    assert Decision.review("r", "x") == Decision(ToolVerdict.REVIEW, "r", "x")
    assert Decision.deny("r", "x") == Decision(ToolVerdict.DENY, "r", "x")


def test_stricter_orders_deny_over_review_over_allow_and_ties_keep_the_first() -> None:
    order = [Decision.allow("a"), Decision.review("r", "x"), Decision.deny("d", "x")]
    for (i, first), (j, second) in itertools.product(enumerate(order), repeat=2):
        assert first.stricter(second) is (second if j > i else first)
    tie = Decision.deny("other", "y")
    assert order[2].stricter(tie) is order[2]


def test_an_egress_decision_is_a_decision_with_its_destination() -> None:
    refusal = deny("egress.not_allowed", "no", host="evil.test", port=443)
    assert (refusal.verdict, refusal.is_allowed, refusal.host, refusal.port, refusal.addresses) == (
        ToolVerdict.DENY,
        False,
        "evil.test",
        443,
        (),
    )
