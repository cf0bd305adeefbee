"""Is this ledger intact *and anchored*? The verdict ``contain ledger verify|show|anchor`` acts on.

``ledger.verify_entries`` finds tampering that leaves a trace: an edited, deleted, inserted or
reordered entry, a checkpoint the chain no longer matches, a forged checkpoint signature. It cannot
see what an attacker who can write the broker's state directory (database, checkpoint file,
checkpoint key and its ``.pub``) removes *together*: truncate the chain and delete the checkpoint
file, or drop the newest checkpoint lines and truncate back to the newest one left, or replace the
key and re-sign a rewritten chain. Each of those leaves a ledger with nothing wrong in it.

So a verdict has three states (``verify_ledger``, pure):

  * ``tampered``: a problem was found (exit 1 in the CLI);
  * ``unanchored``: nothing wrong was found, but the ledger cannot be shown complete: a row of
    ``ANCHOR_RULES`` applies (no public key, no checkpoint file, no checkpoint in it, or more
    entries after the newest vouched-for head than the broker ever leaves) (exit 3);
  * ``verified``: neither (exit 0).

A head is *vouched for* by a checkpoint whose signature checks with the public key and whose hash
matches the chain, by an external anchor (a checkpoint line kept outside the state directory;
``--anchors``), or by an expected head the operator wrote down (``--expect-head SEQ:HASH``). An
external anchor or expected head that the ledger no longer contains is a problem (truncation or
rewrite); an anchor whose signature fails shows a replaced key.

What is not detected, even with anchors: entries appended after the newest anchor and then
truncated (within the bound, or when the anchor lags); a state directory wiped completely with
no anchor given (an empty ledger with no checkpoints verifies: it looks like a new broker). The
anchors file's own integrity is the operator's: it must live where the broker's state cannot
reach (another host, append-only storage).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from contain.broker.ledger import (
    Checkpoint,
    LedgerProblem,
    PointSource,
    check_points,
    key_fingerprint,
    walk_chain,
)

__all__ = [
    "ANCHOR_RULES",
    "ANCHOR_SOURCE",
    "AnchorFacts",
    "AnchorRule",
    "ExpectedHead",
    "LedgerVerdict",
    "UnanchoredFinding",
    "VerdictState",
    "parse_expected_head",
    "verify_ledger",
]

VerdictState = Literal["verified", "unanchored", "tampered"]
ANCHOR_SOURCE = PointSource("external anchor", "anchor file edited, or the checkpoint key was replaced since")
_HEAD = re.compile(r"([0-9]{1,18}):([0-9a-f]{64})")


@dataclass(frozen=True)
class ExpectedHead:
    """A head the operator recorded outside the broker (``contain ledger verify`` prints it as SEQ:HASH)."""

    seq: int
    hash: str


def parse_expected_head(text: str) -> ExpectedHead:
    """Parse ``SEQ:HASH`` (the form verify prints).

    Raises:
        ValueError: any other form, naming the accepted one.
    """
    found = _HEAD.fullmatch(text.strip().lower())
    if found is None or int(found.group(1)) < 1:
        raise ValueError(f"expected head {text!r} is not SEQ:HASH (a seq >= 1, a colon, 64 hex digits)")
    return ExpectedHead(int(found.group(1)), found.group(2))


@dataclass(frozen=True)
class AnchorFacts:
    """What the verifier knows about the anchoring of one ledger (gathered first, then judged)."""

    entry_count: int
    head_seq: int
    has_public_key: bool
    checkpoint_file: str | None  # the path that was read, None when none was named
    checkpoint_file_exists: bool
    checkpoint_count: int
    vouched_seq: int  # newest seq a checkpoint, an external anchor or an expected head vouches for
    max_unanchored_entries: int


@dataclass(frozen=True)
class AnchorRule:
    """One reason a ledger with nothing wrong in it still cannot be shown complete."""

    rule_id: str
    applies: Callable[[AnchorFacts], bool]
    says: Callable[[AnchorFacts], str]
    why: str


def _tail(facts: AnchorFacts) -> int:
    return facts.head_seq - facts.vouched_seq


ANCHOR_RULES: tuple[AnchorRule, ...] = (
    AnchorRule(
        "no-public-key",
        lambda f: f.entry_count > 0 and not f.has_public_key,
        lambda f: "no checkpoint public key: no checkpoint signature can be checked, so none vouches for anything",
        "whoever can write the checkpoint file can also sign lines for it when nobody checks the signature",
    ),
    AnchorRule(
        "no-checkpoint-file",
        lambda f: f.entry_count > 0 and not f.checkpoint_file_exists,
        lambda f: f"the checkpoint file {f.checkpoint_file} does not exist"
        if f.checkpoint_file
        else "no checkpoint file was named (--checkpoints or --config)",
        "deleting the checkpoint file is how a truncated or rewritten chain would be hidden",
    ),
    AnchorRule(
        "no-checkpoints",
        lambda f: f.entry_count > 0 and f.checkpoint_file_exists and f.checkpoint_count == 0,
        lambda f: f"the checkpoint file {f.checkpoint_file} holds no checkpoint",
        "an emptied checkpoint file hides a truncation as well as a deleted one",
    ),
    AnchorRule(
        "tail-beyond-bound",
        lambda f: _tail(f) > f.max_unanchored_entries,
        lambda f: f"{_tail(f)} entries after seq {f.vouched_seq} are vouched for by no checkpoint or anchor "
        f"(bound {f.max_unanchored_entries})",
        "the broker signs its head whenever checkpoint_every_entries entries are unsigned and at start and stop; "
        "a longer unsigned tail means checkpoint lines were removed, and that tail could be cut without a trace",
    ),
)


@dataclass(frozen=True)
class UnanchoredFinding:
    """A rule of ``ANCHOR_RULES`` that applies, with what it found."""

    rule_id: str
    what: str

    def __str__(self) -> str:
        return f"{self.what} [{self.rule_id}]"


@dataclass(frozen=True)
class LedgerVerdict:
    """The result of ``verify_ledger``: a state, what was wrong, and what could not be shown."""

    problems: tuple[LedgerProblem, ...]
    unanchored: tuple[UnanchoredFinding, ...]
    entry_count: int
    head_seq: int
    head_hash: str
    vouched_seq: int
    checkpoint_count: int
    anchor_count: int
    public_key_fingerprint: str | None

    @property
    def state(self) -> VerdictState:
        if self.problems:
            return "tampered"
        return "unanchored" if self.unanchored else "verified"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "problems": [{"seq": p.seq, "what": p.what} for p in self.problems],
            "unanchored": [{"rule_id": u.rule_id, "what": u.what} for u in self.unanchored],
            "entries": self.entry_count,
            "head": {"seq": self.head_seq, "hash": self.head_hash},
            "vouched_seq": self.vouched_seq,
            "checkpoints": self.checkpoint_count,
            "anchors": self.anchor_count,
            "public_key_fingerprint": self.public_key_fingerprint,
        }


def _check_expected(
    hashes: Mapping[int, str], head_seq: int, expected: Sequence[ExpectedHead]
) -> tuple[list[LedgerProblem], int]:
    problems: list[LedgerProblem] = []
    vouched = 0
    for head in expected:
        if head.seq > head_seq:
            what = f"the expected head names this seq but the ledger ends at {head_seq} (truncated)"
            problems.append(LedgerProblem(head.seq, what))
        elif hashes.get(head.seq) != head.hash:
            problems.append(LedgerProblem(head.seq, "hash differs from the expected head (chain rewritten up to here)"))
        else:
            vouched = max(vouched, head.seq)
    return problems, vouched


def verify_ledger(
    entries: Iterable[Mapping[str, Any]],
    *,
    checkpoints: Sequence[Checkpoint],
    checkpoint_file: str | None,
    checkpoint_file_exists: bool,
    public_key: Ed25519PublicKey | None,
    max_unanchored_entries: int,
    anchors: Sequence[Checkpoint] = (),
    expected_heads: Sequence[ExpectedHead] = (),
) -> LedgerVerdict:
    """Judge a ledger: tampering (``verify_entries``' checks, external anchors, expected heads), then
    anchoring (every row of ``ANCHOR_RULES``). Pure: the caller reads the files.

    Args:
        checkpoints: the broker's checkpoint file, as read (empty when missing).
        checkpoint_file: its path, for messages (None when none was named).
        checkpoint_file_exists: False when that file is missing (a rule of its own).
        public_key: the checkpoint public key; None when it is missing (a rule of its own).
        max_unanchored_entries: how many entries may follow the newest vouched-for head.
        anchors: checkpoint lines kept outside the state directory.
        expected_heads: heads the operator recorded.

    Returns:
        The verdict; ``state`` is ``tampered``, ``unanchored`` or ``verified``.
    """
    rows = list(entries)
    walk = walk_chain(rows)
    entry_count = len(rows)
    from_checkpoints, by_checkpoint = check_points(walk, checkpoints, public_key)
    from_anchors, by_anchor = check_points(walk, anchors, public_key, source=ANCHOR_SOURCE)
    from_expected, by_expected = _check_expected(walk.hashes, walk.head_seq, expected_heads)
    facts = AnchorFacts(
        entry_count=entry_count,
        head_seq=walk.head_seq,
        has_public_key=public_key is not None,
        checkpoint_file=checkpoint_file,
        checkpoint_file_exists=checkpoint_file_exists,
        checkpoint_count=len(checkpoints),
        vouched_seq=max(by_checkpoint, by_anchor, by_expected),
        max_unanchored_entries=max_unanchored_entries,
    )
    return LedgerVerdict(
        problems=(*walk.problems, *from_checkpoints, *from_anchors, *from_expected),
        unanchored=tuple(UnanchoredFinding(r.rule_id, r.says(facts)) for r in ANCHOR_RULES if r.applies(facts)),
        entry_count=entry_count,
        head_seq=walk.head_seq,
        head_hash=walk.hashes.get(walk.head_seq, ""),
        vouched_seq=facts.vouched_seq,
        checkpoint_count=len(checkpoints),
        anchor_count=len(anchors),
        public_key_fingerprint=key_fingerprint(public_key) if public_key is not None else None,
    )
