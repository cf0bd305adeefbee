"""The broker's ledger: an append-only hash chain with signed checkpoints, and its verifier.

What is enforced:
  * every entry's ``hash`` is SHA-256 over ``LEDGER_DOMAIN`` + the canonical JSON of all its other
    fields, and names the previous entry's hash in ``prev_hash``: an edited field, a deleted,
    inserted or reordered entry breaks the chain at a place ``verify_entries`` names (seq + what);
  * an attacker who can write the database can recompute the whole chain, so the head (seq + hash)
    is signed with Ed25519 from time to time (``Checkpointer``) into a file *outside* the database;
    a rewritten chain no longer matches a checkpoint, a truncated tail falls short of the latest one;
  * ``plan_entry(head, ...)`` is pure: given the head, chaining is a function (STYLE.md section 1);
  * ``Checkpointer`` can also hand every checkpoint line to a ``CheckpointAnchor`` (``anchors``:
    a file or a command outside the broker's state directory), which an attacker who can write the
    state directory cannot reach.

What is not: a checkpoint only protects entries up to its seq, and the checkpoint file, the key
and the database usually share one state directory. Whoever can write that directory can delete
the newest checkpoint lines and truncate the chain back to the newest one left, or replace the
key and re-sign a rewritten chain: ``verify_entries`` cannot see either.
``verification.verify_ledger`` reports the ledger "unanchored" when the key or the checkpoints
are missing or the unsigned tail is longer than the broker leaves it, and only external anchors
(``--anchors``, ``--expect-head``) detect a consistent rewrite. The checkpoint file is appended
without fsync: a SIGKILL keeps it (the page cache survives), a power loss may drop the newest
lines, which only weakens protection of the newest entries.

Why one file past 600 lines: the chain's writer, its checkpoints and the walk that verifies
them are one mechanism (the same hash rule, written and checked side by side); the verdict over a
walk (verified, tampered, unanchored) is ``verification.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from contain.gate.digests import canonical_json

_encode_text = json.encoder.encode_basestring  # json.dumps(ensure_ascii=False) for one str

__all__ = [
    "CHECKPOINT_DOMAIN",
    "CHECKPOINT_SOURCE",
    "GENESIS_HASH",
    "LEDGER_DOMAIN",
    "ChainWalk",
    "Checkpoint",
    "CheckpointAnchor",
    "Checkpointer",
    "EntryDraft",
    "EntryKind",
    "EntrySubject",
    "LedgerEntry",
    "LedgerProblem",
    "PointSource",
    "chain",
    "check_points",
    "draft_entry",
    "entry_hash",
    "entry_subject",
    "key_fingerprint",
    "load_checkpoint_key",
    "load_public_key",
    "plan_entry",
    "read_checkpoints",
    "verify_entries",
    "walk_chain",
]

# Domain separation: a ledger hash can never be confused with a grant MAC, a token MAC or an
# argument digest over the same bytes (the same reason sigstore prefixes Merkle leaves with 0x00,
# RFC 6962 section 2.1). Versioned so a future format change cannot collide with this one.
LEDGER_DOMAIN = b"contain-ledger-v1\x00"
CHECKPOINT_DOMAIN = b"contain-ledger-checkpoint-v1\x00"
# prev_hash of seq 1: 64 zeros, a value no SHA-256 output is expected to take.
GENESIS_HASH = "0" * 64

EntryKind = Literal["request", "decision", "denial", "intent", "outcome", "reconcile"]
ENTRY_KINDS: tuple[str, ...] = ("request", "decision", "denial", "intent", "outcome", "reconcile")


@dataclass(frozen=True)
class LedgerEntry:
    """One ledger line. ``hash`` covers every other field (see ``entry_hash``)."""

    seq: int
    prev_hash: str
    time: float
    kind: str
    task: str
    principal: str
    action: str
    idempotency_key: str
    argument_digest: str
    detail: Mapping[str, Any]
    hash: str
    # canonical JSON of ``detail`` when this process made the entry (what the store writes);
    # not part of the entry's content.
    detail_json: str | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: its deepcopy of ``detail`` dominated the broker's CPU profile.
        return {
            "seq": self.seq,
            "prev_hash": self.prev_hash,
            "time": self.time,
            "kind": self.kind,
            "task": self.task,
            "principal": self.principal,
            "action": self.action,
            "idempotency_key": self.idempotency_key,
            "argument_digest": self.argument_digest,
            "detail": dict(self.detail),
            "hash": self.hash,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerEntry:
        """Build an entry from a dict (an export line or a database row); KeyError when a field is missing."""
        return cls(
            seq=int(data["seq"]),
            prev_hash=str(data["prev_hash"]),
            time=float(data["time"]),
            kind=str(data["kind"]),
            task=str(data["task"]),
            principal=str(data["principal"]),
            action=str(data["action"]),
            idempotency_key=str(data["idempotency_key"]),
            argument_digest=str(data["argument_digest"]),
            detail=dict(data["detail"]),
            hash=str(data["hash"]),
        )


def _hashed_fields(entry: LedgerEntry | Mapping[str, Any]) -> dict[str, Any]:
    data = entry.to_dict() if isinstance(entry, LedgerEntry) else dict(entry)
    data.pop("hash", None)
    return data


def entry_hash(entry: LedgerEntry | Mapping[str, Any]) -> str:
    """Return the hex SHA-256 of ``LEDGER_DOMAIN`` + canonical JSON of the entry without ``hash``."""
    return hashlib.sha256(LEDGER_DOMAIN + canonical_json(_hashed_fields(entry))).hexdigest()


def _text(value: object) -> bytes:
    """Canonical JSON of a string, as ``canonical_json`` writes it (exact ``str``; UTF-8)."""
    if type(value) is not str:
        raise ValueError(f"a {type(value).__name__} is not a JSON string")
    try:
        return _encode_text(value).encode()
    except UnicodeEncodeError as exc:
        raise ValueError("text contains a lone surrogate, which is not valid UTF-8") from exc


def _stamp(value: float) -> bytes:
    """Canonical JSON of the entry time: integral floats as integers, others by shortest repr."""
    if type(value) is int:
        return str(value).encode()
    if type(value) is not float:
        raise ValueError(f"a {type(value).__name__} is not a JSON number")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{value!r} is not a JSON number; NaN and Infinity are refused")
    return (str(int(value)) if value.is_integer() else float.__repr__(value)).encode()


@dataclass(frozen=True)
class EntrySubject:
    """The fields every ledger entry about one request shares, with their canonical encodings.

    Entries are encoded in pieces around ``seq``, ``prev_hash`` and ``time`` (keys sorted: action,
    argument_digest, detail, idempotency_key, kind, *prev_hash*, principal, *seq*, task, *time*),
    so that the four entries of a write encode these fields once and chaining an entry
    (``chain``) is a concatenation and one SHA-256.
    """

    task: str
    principal: str
    action: str
    idempotency_key: str
    argument_digest: str
    before_detail: bytes = field(repr=False)  # '{"action":...,"argument_digest":...,"detail":'
    before_kind: bytes = field(repr=False)  # ',"idempotency_key":...,"kind":'
    before_seq: bytes = field(repr=False)  # ',"principal":...,"seq":'
    before_time: bytes = field(repr=False)  # ',"task":...,"time":'


def entry_subject(
    *, task: str, principal: str, action: str, idempotency_key: str, argument_digest: str
) -> EntrySubject:
    """Encode the shared fields (pure).

    Raises:
        ValueError: a field that is not text.
    """
    return EntrySubject(
        task=task,
        principal=principal,
        action=action,
        idempotency_key=idempotency_key,
        argument_digest=argument_digest,
        before_detail=b'{"action":' + _text(action) + b',"argument_digest":' + _text(argument_digest) + b',"detail":',
        before_kind=b',"idempotency_key":' + _text(idempotency_key) + b',"kind":',
        before_seq=b',"principal":' + _text(principal) + b',"seq":',
        before_time=b',"task":' + _text(task) + b',"time":',
    )


@dataclass(frozen=True)
class EntryDraft:
    """A ledger entry before it is chained: every field but ``seq``, ``prev_hash`` and ``time``.

    Its encoding up to ``prev_hash`` is prepared; the bytes ``chain`` hashes are exactly
    ``canonical_json`` of the finished entry without its hash (the tests compare the two), so
    ``entry_hash`` and every verifier see the same hash. Drafting can happen on any thread; only
    chaining needs the head, which only the committing transaction holds.
    """

    subject: EntrySubject
    kind: str
    detail: dict[str, Any]
    detail_json: str  # canonical JSON of ``detail``, also what the store keeps
    before_prev: bytes = field(repr=False)  # '{"action":...,"kind":...,"prev_hash":'


_KIND_TEXT = {kind: _text(kind) + b',"prev_hash":' for kind in ENTRY_KINDS}


def draft_entry(subject: EntrySubject, kind: str, detail: Mapping[str, Any]) -> EntryDraft:
    """Prepare an entry of ``kind`` about ``subject`` for chaining (pure).

    Raises:
        ValueError: unknown kind, or a detail that is not JSON.
    """
    if kind not in _KIND_TEXT:
        raise ValueError(f"ledger entry kind {kind!r} is not one of {', '.join(ENTRY_KINDS)}")
    details = dict(detail)
    encoded = canonical_json(details)  # validates the detail: JSON values only
    return EntryDraft(
        subject=subject,
        kind=kind,
        detail=details,
        detail_json=encoded.decode(),
        before_prev=b"".join((subject.before_detail, encoded, subject.before_kind, _KIND_TEXT[kind])),
    )


def chain(draft: EntryDraft, head: tuple[int, str], *, now: float | None = None) -> LedgerEntry:
    """Return ``draft`` as the entry that follows ``head`` = (seq, hash); pure apart from the default clock."""
    seq, prev = head
    stamp = round(time.time() if now is None else now, 6)
    subject = draft.subject
    hashed = b"".join(
        (
            LEDGER_DOMAIN,
            draft.before_prev,
            _text(prev),
            subject.before_seq,
            str(seq + 1).encode(),
            subject.before_time,
            _stamp(stamp),
            b"}",
        )
    )
    return LedgerEntry(
        seq=seq + 1,
        prev_hash=prev,
        time=stamp,
        kind=draft.kind,
        task=subject.task,
        principal=subject.principal,
        action=subject.action,
        idempotency_key=subject.idempotency_key,
        argument_digest=subject.argument_digest,
        detail=draft.detail,
        hash=hashlib.sha256(hashed).hexdigest(),
        detail_json=draft.detail_json,
    )


def plan_entry(
    head: tuple[int, str],
    *,
    kind: str,
    task: str,
    principal: str,
    action: str,
    idempotency_key: str,
    argument_digest: str,
    detail: Mapping[str, Any],
    now: float | None = None,
) -> LedgerEntry:
    """Return the entry that follows ``head`` = (seq, hash); pure apart from the default clock.

    Raises:
        ValueError: unknown kind, or a detail that is not JSON.
    """
    subject = entry_subject(
        task=task, principal=principal, action=action, idempotency_key=idempotency_key, argument_digest=argument_digest
    )
    draft = draft_entry(subject, kind, detail)
    return chain(draft, head, now=now)


# -- checkpoints ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A signed statement "the ledger's entry ``seq`` has hash ``hash``"."""

    seq: int
    hash: str
    time: float
    signature: str  # base64 Ed25519 signature over CHECKPOINT_DOMAIN + canonical {seq, hash, time}

    def message(self) -> bytes:
        return CHECKPOINT_DOMAIN + canonical_json({"seq": self.seq, "hash": self.hash, "time": self.time})


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def load_checkpoint_key(path: str | os.PathLike[str], *, create: bool = True) -> Ed25519PrivateKey:
    """Load the Ed25519 checkpoint key (raw 32 bytes), creating it (mode 0600) and ``<path>.pub``.

    Args:
        create: make a new key when the file is missing; False raises instead (a verifier or
            ``contain ledger anchor`` must never sign with a key it just invented).

    Raises:
        FileNotFoundError: the key is missing and ``create`` is False.
        PermissionError: the key file is readable by group or others.
        ValueError: the file is not a 32-byte key.
    """
    key_path = Path(path)
    if not key_path.exists() and not create:
        raise FileNotFoundError(f"checkpoint key {key_path} does not exist")
    if not key_path.exists():
        key = Ed25519PrivateKey.generate()
        raw = key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        _write_private(key_path, raw)
        pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        key_path.with_name(key_path.name + ".pub").write_bytes(base64.b64encode(pub) + b"\n")
        return key
    if key_path.stat().st_mode & 0o077:
        raise PermissionError(f"checkpoint key {key_path} is readable by group or others; chmod 600 it")
    raw = key_path.read_bytes()
    if len(raw) != 32:
        raise ValueError(f"checkpoint key {key_path} is {len(raw)} bytes, expected 32")
    return Ed25519PrivateKey.from_private_bytes(raw)


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """Load a public key written by ``load_checkpoint_key`` (base64 of 32 raw bytes)."""
    raw = base64.b64decode(Path(path).read_bytes().strip(), validate=True)
    return Ed25519PublicKey.from_public_bytes(raw)


def key_fingerprint(public_key: Ed25519PublicKey) -> str:
    """``sha256:`` + the first 32 hex digits of SHA-256 over the raw public key, for an operator to
    compare with a value recorded outside the state directory."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()[:32]


def read_checkpoints(path: str | os.PathLike[str]) -> list[Checkpoint]:
    """Read the checkpoint file (JSON lines); a missing file means no checkpoints.

    Raises:
        ValueError: a line is not a checkpoint, naming the line.
    """
    file = Path(path)
    if not file.exists():
        return []
    out: list[Checkpoint] = []
    for number, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            out.append(Checkpoint(int(data["seq"]), str(data["hash"]), float(data["time"]), str(data["signature"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{file}:{number}: not a checkpoint line ({exc})") from exc
    return out


class CheckpointAnchor(Protocol):
    """Where checkpoint lines also go, outside the state directory (``anchors.AnchorPublisher``)."""

    def publish(self, line: bytes) -> None:
        """Take one checkpoint line (JSON + newline); may raise ``LedgerAnchorError``."""

    def close(self) -> None:
        """Deliver what is still pending, then stop."""


class Checkpointer:
    """Signs the ledger head and appends it to the checkpoint file (one ``write`` per line), then
    hands the same line to ``anchor`` when one is configured."""

    def __init__(
        self, key: Ed25519PrivateKey, path: str | os.PathLike[str], *, anchor: CheckpointAnchor | None = None
    ) -> None:
        self._key = key
        self._path = Path(path)
        self._anchor = anchor

    def sign(self, head: tuple[int, str], *, now: float | None = None) -> Checkpoint:
        seq, digest = head
        stamp = round(time.time() if now is None else now, 6)
        unsigned = Checkpoint(seq, digest, stamp, "")
        signature = base64.b64encode(self._key.sign(unsigned.message())).decode()
        return Checkpoint(seq, digest, stamp, signature)

    def append(self, head: tuple[int, str], *, now: float | None = None) -> Checkpoint:
        """Sign ``head``, append it as one line, and publish it to the anchor; returns the checkpoint.

        Raises:
            LedgerAnchorError: the anchor refused the line (only where ``AnchorPublisher`` raises:
                its first line, when the anchor is required); the checkpoint file has it already.
        """
        point = self.sign(head, now=now)
        line = (json.dumps(asdict(point), sort_keys=True) + "\n").encode()
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        if self._anchor is not None:
            self._anchor.publish(line)
        return point

    def close(self) -> None:
        """Let the anchor deliver the newest checkpoint (the broker calls this after its last one)."""
        if self._anchor is not None:
            self._anchor.close()


# -- verification --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerProblem:
    """One thing ``verify_entries`` found wrong, and where."""

    seq: int
    what: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.what}"


@dataclass(frozen=True)
class ChainWalk:
    """What walking the chain found: its problems, and each seq's hash as stored (first occurrence)."""

    problems: tuple[LedgerProblem, ...]
    hashes: Mapping[int, str]

    @property
    def head_seq(self) -> int:
        return max(self.hashes, default=0)


@dataclass
class _Walk:
    problems: list[LedgerProblem] = field(default_factory=list)
    hashes: dict[int, str] = field(default_factory=dict)

    def add(self, seq: int, what: str) -> None:
        self.problems.append(LedgerProblem(seq, what))


def _seq_of(raw: Mapping[str, Any]) -> int | None:
    try:
        return int(raw["seq"])
    except (KeyError, TypeError, ValueError):
        return None


def walk_chain(entries: Iterable[Mapping[str, Any]]) -> ChainWalk:
    """Check every entry's hash and link in stored order (pure); see ``verify_entries``."""
    listed = list(entries)
    walk = _Walk()
    present = {s for s in (_seq_of(r) for r in listed) if s is not None}
    expected_seq, prev_hash, prev_seq = 1, GENESIS_HASH, 0
    last_seq = 0
    for position, raw in enumerate(listed, start=1):
        try:
            entry = LedgerEntry.from_dict(raw)
        except (KeyError, TypeError, ValueError) as exc:
            walk.add(last_seq + 1, f"entry #{position} is malformed ({exc}); edited")
            continue
        seq = entry.seq
        if seq in walk.hashes:
            walk.add(seq, "appears twice (inserted entry)")
        elif seq < last_seq:
            walk.add(seq, f"appears after seq {last_seq} (reordered)")
        elif seq > expected_seq:
            missing = [s for s in range(expected_seq, seq) if s not in present]
            if missing:
                span = f"{missing[0]}" if len(missing) == 1 else f"{missing[0]}..{missing[-1]}"
                walk.add(missing[0], f"seq {span} missing (deleted)")
            else:
                walk.add(seq, f"appears before seq {expected_seq} (reordered)")
        if entry.kind not in ENTRY_KINDS:
            walk.add(seq, f"unknown kind {entry.kind!r} (edited)")
        try:
            computed = entry_hash(entry)
        except ValueError as exc:
            walk.add(seq, f"cannot be hashed ({exc}); edited")
            computed = ""
        if computed != entry.hash:
            walk.add(seq, "content does not match its hash (edited)")
        if entry.prev_hash != prev_hash:
            before = f"seq {prev_seq}" if prev_seq else "the genesis value"
            walk.add(
                seq,
                f"prev_hash does not match the hash of {before} before it "
                "(that entry was edited and re-hashed, or entries were inserted, deleted or reordered)",
            )
        walk.hashes.setdefault(seq, entry.hash)
        prev_hash, prev_seq = entry.hash, seq
        last_seq = max(last_seq, seq)
        expected_seq = last_seq + 1
    return ChainWalk(tuple(walk.problems), dict(walk.hashes))


@dataclass(frozen=True)
class PointSource:
    """Words for where signed heads came from, so a problem names the file an operator must look at."""

    name: str  # "checkpoint" (the broker's file) or "external anchor"
    forged: str  # what a bad signature means for this source


CHECKPOINT_SOURCE = PointSource("checkpoint", "checkpoint file forged or edited")


def check_points(
    walk: ChainWalk,
    points: Sequence[Checkpoint],
    public_key: Ed25519PublicKey | None,
    *,
    source: PointSource = CHECKPOINT_SOURCE,
) -> tuple[list[LedgerProblem], int]:
    """Check signed heads against a walked chain (pure).

    Returns:
        The problems, and the newest seq that a point with a valid signature (when ``public_key``
        is given; otherwise none counts) and a matching hash vouches for (0 when none does).
    """
    problems: list[LedgerProblem] = []
    vouched = 0
    last_seq = walk.head_seq
    for point in points:
        if public_key is not None:
            try:
                public_key.verify(base64.b64decode(point.signature), point.message())
            except (InvalidSignature, ValueError):
                problems.append(LedgerProblem(point.seq, f"{source.name} signature is invalid ({source.forged})"))
                continue
        if point.seq > last_seq:
            what = f"a signed {source.name} names this seq but the ledger ends at {last_seq} (truncated)"
            problems.append(LedgerProblem(point.seq, what))
        elif walk.hashes.get(point.seq) not in (None, point.hash):
            problems.append(
                LedgerProblem(point.seq, f"hash differs from the signed {source.name} (chain rewritten up to here)")
            )
        elif public_key is not None and point.seq in walk.hashes:
            vouched = max(vouched, point.seq)
    return problems, vouched


def verify_entries(
    entries: Iterable[Mapping[str, Any]],
    checkpoints: Sequence[Checkpoint] = (),
    public_key: Ed25519PublicKey | None = None,
) -> list[LedgerProblem]:
    """Check a ledger in stored order; an empty list means no tampering was found.

    Detects an edited entry (hash mismatch, or a re-hashed entry whose successor no longer links),
    a deleted entry (seq gap), an inserted one (duplicate seq or broken link), reordered entries
    (seq going backwards), a rewritten chain (checkpoint hash mismatch) and a truncated tail (a
    checkpoint beyond the last entry). Checkpoint signatures are checked when ``public_key`` is given.

    Not detected here: a tail truncated back to (or past) the newest checkpoint left in the file,
    a missing checkpoint file or key. ``contain.broker.verification.verify_ledger`` judges those
    ("unanchored") and checks external anchors; use it to decide whether a ledger can be trusted.
    """
    walk = walk_chain(entries)
    problems, _ = check_points(walk, checkpoints, public_key)
    return [*walk.problems, *problems]
