"""verify_ledger: tampering, external anchors, expected heads, and every row of ANCHOR_RULES."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contain.broker.ledger import Checkpoint, load_public_key, read_checkpoints
from contain.broker.verification import (
    ANCHOR_RULES,
    AnchorFacts,
    ExpectedHead,
    LedgerVerdict,
    parse_expected_head,
    verify_ledger,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ledger"
PUB = load_public_key(FIXTURES / "checkpoint.pub")
ATTACKER_PUB = load_public_key(FIXTURES / "attacker.pub")


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line]


def _points(name: str) -> list[Checkpoint]:
    return read_checkpoints(FIXTURES / name)


def _judge(entries: str = "clean.jsonl", checkpoints: str | None = "checkpoints.jsonl", *, public_key: Any = PUB,
           bound: int = 4, anchors: list[Checkpoint] | None = None,
           expected: list[ExpectedHead] | None = None) -> LedgerVerdict:
    return verify_ledger(
        _rows(entries),
        checkpoints=_points(checkpoints) if checkpoints else [],
        checkpoint_file=checkpoints,
        checkpoint_file_exists=checkpoints is not None,
        public_key=public_key,
        max_unanchored_entries=bound,
        anchors=anchors or [],
        expected_heads=expected or [],
    )


def test_clean_ledger_with_key_and_checkpoints_is_verified_and_vouched_to_its_head() -> None:
    verdict = _judge()
    assert (verdict.state, verdict.head_seq, verdict.vouched_seq, verdict.unanchored) == ("verified", 12, 12, ())
    assert verdict.public_key_fingerprint is not None and verdict.public_key_fingerprint.startswith("sha256:")


def test_truncated_chain_with_the_checkpoint_file_deleted_is_unanchored_not_verified() -> None:
    verdict = _judge("truncated_tail.jsonl", checkpoints=None)
    assert verdict.state == "unanchored"
    assert {u.rule_id for u in verdict.unanchored} == {"no-checkpoint-file", "tail-beyond-bound"}


def test_key_removed_and_checkpoints_re_signed_is_unanchored_not_verified() -> None:
    verdict = _judge("rewritten_chain.jsonl", "resigned_checkpoints.jsonl", public_key=None)
    assert verdict.state == "unanchored" and verdict.vouched_seq == 0
    assert {u.rule_id for u in verdict.unanchored} == {"no-public-key", "tail-beyond-bound"}


def test_key_replaced_and_checkpoints_re_signed_is_caught_only_by_an_external_anchor() -> None:
    resigned = _judge("rewritten_chain.jsonl", "resigned_checkpoints.jsonl", public_key=ATTACKER_PUB)
    assert resigned.state == "verified"  # consistent: nothing inside the state directory can tell
    anchored = _judge("rewritten_chain.jsonl", "resigned_checkpoints.jsonl", public_key=ATTACKER_PUB,
                      anchors=_points("checkpoints.jsonl"))
    assert anchored.state == "tampered"
    assert {p.what for p in anchored.problems} == {
        "external anchor signature is invalid (anchor file edited, or the checkpoint key was replaced since)"
    }
    pinned = _judge("rewritten_chain.jsonl", "resigned_checkpoints.jsonl", public_key=PUB)  # the key kept elsewhere
    assert pinned.state == "tampered"


def test_dropped_newest_checkpoint_and_truncation_pass_alone_and_fail_against_anchors_or_expected_head() -> None:
    alone = _judge("truncated_to_checkpoint.jsonl", "checkpoints_newest_dropped.jsonl")
    assert alone.state == "verified"  # what an attacker with the state directory can hide without anchors
    anchored = _judge("truncated_to_checkpoint.jsonl", "checkpoints_newest_dropped.jsonl",
                      anchors=_points("checkpoints.jsonl"))
    assert [(p.seq, p.what) for p in anchored.problems] == [
        (12, "a signed external anchor names this seq but the ledger ends at 8 (truncated)")
    ]
    head = _rows("clean.jsonl")[-1]
    expected = _judge("truncated_to_checkpoint.jsonl", "checkpoints_newest_dropped.jsonl",
                      expected=[ExpectedHead(12, head["hash"])])
    assert [(p.seq, p.what) for p in expected.problems] == [
        (12, "the expected head names this seq but the ledger ends at 8 (truncated)")
    ]


def test_an_expected_head_the_chain_was_rewritten_under_is_a_problem_and_a_matching_one_vouches() -> None:
    clean_head = _rows("clean.jsonl")[3]
    rewritten = _judge("rewritten_chain.jsonl", checkpoints=None, expected=[ExpectedHead(4, clean_head["hash"])])
    assert [(p.seq, "rewritten" in p.what) for p in rewritten.problems] == [(4, True)]
    head = _rows("clean.jsonl")[-1]
    vouched = _judge(checkpoints="checkpoints_newest_dropped.jsonl", bound=0,
                     expected=[ExpectedHead(12, head["hash"])])
    assert (vouched.state, vouched.vouched_seq) == ("verified", 12)


def test_a_tail_within_the_bound_is_verified_and_one_entry_more_is_unanchored() -> None:
    assert _judge(checkpoints="checkpoints_newest_dropped.jsonl", bound=4).state == "verified"
    beyond = _judge(checkpoints="checkpoints_newest_dropped.jsonl", bound=3)
    assert [u.rule_id for u in beyond.unanchored] == ["tail-beyond-bound"]
    assert "4 entries after seq 8" in beyond.unanchored[0].what


def test_an_empty_ledger_without_checkpoints_verifies_which_is_why_anchors_matter() -> None:
    empty = verify_ledger([], checkpoints=[], checkpoint_file=None, checkpoint_file_exists=False, public_key=None,
                          max_unanchored_entries=0)
    assert empty.state == "verified"
    wiped = verify_ledger([], checkpoints=[], checkpoint_file=None, checkpoint_file_exists=False, public_key=PUB,
                          max_unanchored_entries=0, anchors=_points("checkpoints.jsonl"))
    assert wiped.state == "tampered"


FACTS = AnchorFacts(entry_count=12, head_seq=12, has_public_key=True, checkpoint_file="cps",
                    checkpoint_file_exists=True, checkpoint_count=3, vouched_seq=12, max_unanchored_entries=4)
# one case per rule: the facts that make exactly that rule apply
TRIGGERS = {
    "no-public-key": {"has_public_key": False},
    "no-checkpoint-file": {"checkpoint_file_exists": False, "checkpoint_count": 0, "checkpoint_file": None},
    "no-checkpoints": {"checkpoint_count": 0},
    "tail-beyond-bound": {"vouched_seq": 7},
}


def test_every_anchor_rule_has_a_case_and_a_reason() -> None:
    assert [r.rule_id for r in ANCHOR_RULES] == list(TRIGGERS)
    assert all(r.why for r in ANCHOR_RULES)


@pytest.mark.parametrize("rule", ANCHOR_RULES, ids=lambda r: r.rule_id)
def test_each_anchor_rule_applies_to_its_case_alone(rule: Any) -> None:
    from dataclasses import replace

    assert not any(r.applies(FACTS) for r in ANCHOR_RULES)
    facts = replace(FACTS, **TRIGGERS[rule.rule_id])
    assert [r.rule_id for r in ANCHOR_RULES if r.applies(facts)] == [rule.rule_id]
    assert rule.says(facts)


@pytest.mark.parametrize("text", ["12", "x:" + "a" * 64, "0:" + "a" * 64, "3:" + "a" * 63, "3:" + "g" * 64])
def test_expected_head_must_be_seq_colon_hash(text: str) -> None:
    with pytest.raises(ValueError, match="SEQ:HASH"):
        parse_expected_head(text)


def test_expected_head_parses_what_verify_prints() -> None:
    assert parse_expected_head(" 12:" + "AB" * 32) == ExpectedHead(12, "ab" * 32)


def test_verdict_json_is_exact_and_complete() -> None:
    data = _judge("truncated_tail.jsonl", checkpoints=None).to_dict()
    assert data["state"] == "unanchored" and data["head"]["seq"] == 10 and data["entries"] == 10
    assert [u["rule_id"] for u in data["unanchored"]] == ["no-checkpoint-file", "tail-beyond-bound"]
