"""The hash chain, checkpoints and the verifier against every named tampering fixture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contain.broker.ledger import (
    GENESIS_HASH,
    LEDGER_DOMAIN,
    Checkpointer,
    entry_hash,
    load_checkpoint_key,
    load_public_key,
    plan_entry,
    read_checkpoints,
    verify_entries,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ledger"

# fixture -> (seq, words that must appear in the problem at that seq)
EXPECTED = {
    "edited_detail.jsonl": (5, "content does not match its hash (edited)"),
    "rehashed_entry.jsonl": (8, "prev_hash does not match the hash of seq 7"),
    "deleted_middle.jsonl": (6, "seq 6 missing (deleted)"),
    "inserted_entry.jsonl": (3, "appears twice (inserted entry)"),
    "reordered_pair.jsonl": (10, "appears before seq 9 (reordered)"),
    "truncated_tail.jsonl": (12, "ledger ends at 10 (truncated)"),
    "truncated_to_checkpoint.jsonl": (12, "ledger ends at 8 (truncated)"),
    "rewritten_chain.jsonl": (4, "hash differs from the signed checkpoint"),
}


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line]


def _verify(name: str, checkpoints: str = "checkpoints.jsonl") -> list:
    return verify_entries(_rows(name), read_checkpoints(FIXTURES / checkpoints), load_public_key(FIXTURES / "checkpoint.pub"))


def test_clean_fixture_verifies_with_signed_checkpoints() -> None:
    assert _verify("clean.jsonl") == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_tampering_fixture_is_caught_and_located(name: str) -> None:
    seq, words = EXPECTED[name]
    problems = _verify(name)
    assert problems, f"{name} verified but is tampered"
    assert any(p.seq == seq and words in p.what for p in problems), [str(p) for p in problems]


def test_every_tampering_fixture_on_disk_has_an_expectation() -> None:
    checkpoint_files = {"checkpoints.jsonl", "forged_checkpoints.jsonl", "checkpoints_newest_dropped.jsonl",
                        "resigned_checkpoints.jsonl"}
    on_disk = {p.name for p in FIXTURES.glob("*.jsonl")} - {"clean.jsonl"} - checkpoint_files
    assert on_disk == set(EXPECTED)


def test_rewritten_chain_verifies_without_checkpoints_which_is_why_they_exist() -> None:
    assert verify_entries(_rows("rewritten_chain.jsonl")) == []


def test_forged_checkpoint_line_is_reported_by_seq() -> None:
    problems = _verify("clean.jsonl", "forged_checkpoints.jsonl")
    assert [(p.seq, "signature is invalid" in p.what) for p in problems] == [(8, True)]


def test_plan_entry_links_to_head_and_hash_is_domain_separated() -> None:
    first = plan_entry((0, GENESIS_HASH), kind="request", task="t", principal="p", action="a",
                       idempotency_key="k", argument_digest="d", detail={"x": 1}, now=5.0)
    second = plan_entry((first.seq, first.hash), kind="intent", task="t", principal="p", action="a",
                        idempotency_key="k", argument_digest="d", detail={}, now=6.0)
    assert (first.seq, first.prev_hash, second.seq, second.prev_hash) == (1, GENESIS_HASH, 2, first.hash)
    assert first.hash == entry_hash(first.to_dict())
    import hashlib

    from contain.gate.digests import canonical_json

    body = {k: v for k, v in first.to_dict().items() if k != "hash"}
    assert first.hash == hashlib.sha256(LEDGER_DOMAIN + canonical_json(body)).hexdigest()
    assert first.hash != hashlib.sha256(canonical_json(body)).hexdigest()


def test_plan_entry_refuses_unknown_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        plan_entry((0, GENESIS_HASH), kind="rumour", task="t", principal="p", action="a",
                   idempotency_key="k", argument_digest="d", detail={})


def test_checkpoint_key_is_created_private_and_refused_when_readable(tmp_path: Path) -> None:
    key_path = tmp_path / "cp.key"
    key = load_checkpoint_key(key_path)
    assert key_path.stat().st_mode & 0o777 == 0o600
    point = Checkpointer(key, tmp_path / "cps").append((3, "ab" * 32), now=1.0)
    pub = load_public_key(str(key_path) + ".pub")
    problems = verify_entries([], [point], pub)
    assert [p.seq for p in problems] == [3]  # checkpoint beyond an empty ledger: truncated
    key_path.chmod(0o644)
    with pytest.raises(PermissionError):
        load_checkpoint_key(key_path)


def test_checkpoint_from_another_key_is_refused(tmp_path: Path) -> None:
    mine = load_checkpoint_key(tmp_path / "a.key")
    other = load_checkpoint_key(tmp_path / "b.key")
    rows = _rows("clean.jsonl")
    point = Checkpointer(other, tmp_path / "cps").append((12, rows[-1]["hash"]))
    problems = verify_entries(rows, [point], load_public_key(str(tmp_path / "a.key") + ".pub"))
    assert mine is not None and [p.what for p in problems] == ["checkpoint signature is invalid (checkpoint file forged or edited)"]


def test_malformed_checkpoint_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "cps"
    bad.write_text('{"seq": 1}\n')
    with pytest.raises(ValueError, match=r"cps:1"):
        read_checkpoints(bad)


def test_entries_verify_after_a_json_round_trip_of_awkward_values() -> None:
    detail = {"integral": 2.0, "float": 0.1, "big": 2**63, "text": "é\u2028\x00", "nested": [{"b": None, "a": True}]}
    entry = plan_entry((0, GENESIS_HASH), kind="outcome", task="t", principal="p", action="a",
                       idempotency_key="k", argument_digest="d", detail=detail, now=1_800_000_000.0)
    stored = json.loads(json.dumps(entry.to_dict()))
    assert verify_entries([stored]) == []


def test_plan_entry_refuses_values_that_are_not_json() -> None:
    with pytest.raises(ValueError):
        plan_entry((0, GENESIS_HASH), kind="request", task="t", principal="p", action="a",
                   idempotency_key="k", argument_digest="d", detail={"t": (1, 2)})


def _random_value(rng: Any, depth: int = 0) -> Any:
    texts = ["a", "é", '"', "\\", "\n", "\u2028", "😀", "\x00", ',"principal":', "}", " "]
    choice = rng.randint(0, 7 if depth < 3 else 5)
    if choice == 0:
        return rng.choice([None, True, False])
    if choice == 1:
        return rng.randint(-10**20, 10**20)
    if choice == 2:
        return rng.random() * 10 ** rng.randint(-5, 20)
    if choice == 3:
        return float(rng.randint(0, 9))  # integral floats encode as integers
    if choice in (4, 5):
        return "".join(rng.choice(texts) for _ in range(rng.randint(0, 6)))
    if choice == 6:
        return [_random_value(rng, depth + 1) for _ in range(3)]
    return {"".join(rng.choice(texts) for _ in range(3)): _random_value(rng, depth + 1) for _ in range(3)}


def test_chained_entries_hash_exactly_the_canonical_json_of_their_fields() -> None:
    """The prepared pieces (drafts, chain) must produce the very bytes canonical_json would."""
    import hashlib
    import json
    import random

    from contain.broker.ledger import LEDGER_DOMAIN
    from contain.gate.digests import canonical_json

    rng = random.Random(6)
    head = (0, GENESIS_HASH)
    for _ in range(3000):
        text = lambda: "".join(rng.choice(["a", "é", '"', "\\", "😀", ",", ":"]) for _ in range(rng.randint(0, 5)))  # noqa: E731
        detail = {text(): _random_value(rng) for _ in range(rng.randint(0, 4))}
        now = rng.choice([1_800_000_000.123456, 1.0e9, 1_700_000_000, rng.random() * 1e10])
        entry = plan_entry(head, kind=rng.choice(["request", "intent", "outcome"]), task=text(), principal=text(),
                           action=text(), idempotency_key=text(), argument_digest=text(), detail=detail, now=now)
        fields = entry.to_dict()
        fields.pop("hash")
        assert entry.hash == hashlib.sha256(LEDGER_DOMAIN + canonical_json(fields)).hexdigest() == entry_hash(entry)
        assert entry.detail_json is not None and canonical_json(json.loads(entry.detail_json)) == entry.detail_json.encode()
        head = (entry.seq, entry.hash) if rng.random() < 0.9 else (rng.randint(0, 10**12), text())


def test_draft_refuses_text_fields_that_are_not_str_and_lone_surrogates() -> None:
    with pytest.raises(ValueError):
        plan_entry((0, GENESIS_HASH), kind="request", task="t", principal="\ud800", action="a",
                   idempotency_key="k", argument_digest="d", detail={})
    with pytest.raises(ValueError):
        plan_entry((0, GENESIS_HASH), kind="request", task="t", principal="p", action="a",
                   idempotency_key="k", argument_digest="d", detail={}, now=float("nan"))
