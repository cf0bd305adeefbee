"""Grants: a reviewer's approval as a signed object bound to exactly what was approved.

A grant names a principal, a tool, the tool-definition digest and the argument digest, a scope
(once, N uses, or until a time; every grant expires), the reviewer and the reason. It is carried as
a token::

    cg1.<base64url(canonical_json(fields))>.<base64url(HMAC-SHA256(key, DOMAIN + payload))>

where ``payload`` is the ASCII text of the middle segment and ``DOMAIN`` is
``b"contain-grant-v1\\x00"`` (domain separation: a MAC made for another contain object can never
verify as a grant). base64url is unpadded (RFC 4648 §5, as JWS does). The MAC is checked with
``hmac.compare_digest`` over the exact bytes received, before anything inside is trusted.

``verify_grant`` checks, in order: format, signature, principal, tool, tool digest, argument digest,
expiry, and only then consumes a use from a ``UseCounter`` (an atomic check-and-increment), so a
refused attempt never spends a use and a single-use grant works once even under concurrent attempts.

What is not enforced here: who may mint (whoever holds the key; keep it in a 0600 file owned by the
service), revocation before expiry (deny the request in the store and drop the key to revoke all),
and clock skew between machines (expiry uses the verifier's clock).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import sqlite3
import stat
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from contain._log import LazyLogger
from contain.boundary.documents import UnreadableDocument, decode_base64url, parse_json_document
from contain.errors import GateError
from contain.gate.digests import canonical_json
from contain.sqlite_txn import immediate_transaction

__all__ = [
    "DEFAULT_GRANT_TTL_S",
    "Grant",
    "GrantCheck",
    "GrantKey",
    "GrantScope",
    "MemoryUseCounter",
    "SqliteUseCounter",
    "UseCounter",
    "decode_grant",
    "describe_scope",
    "mint_grant",
    "parse_duration",
    "verify_grant",
]

TOKEN_PREFIX = "cg1"
# Domain-separation prefix for the grant MAC; the version is bumped with any format change.
MAC_DOMAIN = b"contain-grant-v1\x00"
KEY_BYTES = 32  # HMAC-SHA256 key as long as the hash output (RFC 2104 §3)
DEFAULT_GRANT_TTL_S = 3600.0  # once / N-use grants that name no expiry lapse after an hour
_SCOPE_KINDS = ("once", "uses", "until")
MAX_GRANT_BYTES = 16384  # a grant carries a reason of a few lines; 16 KiB is generous
MAX_GRANT_DEPTH = 4  # fields -> scope: anything deeper is not a grant
MAX_TIMESTAMP = 253402300799  # 9999-12-31T23:59:59Z, the last second time.gmtime renders everywhere
_GRANT_FIELDS = frozenset(
    {"grant_id", "principal", "tool", "tool_digest", "argument_digest", "scope", "reviewer", "reason", "issued_at"}
)
_SCOPE_FIELDS = frozenset({"kind", "uses", "expires_at"})
log = LazyLogger(__name__)


@dataclass(frozen=True)
class GrantScope:
    """How much a grant allows: once, up to ``uses`` times, or any number of times until expiry."""

    kind: str
    uses: int | None
    expires_at: float

    def __post_init__(self) -> None:
        if self.kind not in _SCOPE_KINDS:
            raise ValueError(f"scope kind {self.kind!r} is not one of {', '.join(_SCOPE_KINDS)}")
        if self.kind == "once" and self.uses != 1:
            raise ValueError("a once scope has exactly 1 use")
        if self.kind == "uses" and (type(self.uses) is not int or self.uses < 1):
            raise ValueError("a uses scope needs a positive whole number of uses")
        if self.kind == "until" and self.uses is not None:
            raise ValueError("an until scope counts no uses; give uses=None")

    @classmethod
    def once(cls, *, now: float, ttl_s: float = DEFAULT_GRANT_TTL_S) -> GrantScope:
        """One use, expiring ``ttl_s`` after ``now``."""
        return cls("once", 1, now + ttl_s)

    @classmethod
    def n_uses(cls, uses: int, *, now: float, ttl_s: float = DEFAULT_GRANT_TTL_S) -> GrantScope:
        """Up to ``uses`` uses, expiring ``ttl_s`` after ``now``."""
        return cls("uses", uses, now + ttl_s)

    @classmethod
    def until(cls, expires_at: float) -> GrantScope:
        """Any number of uses until ``expires_at`` (unix time)."""
        return cls("until", None, expires_at)


@dataclass(frozen=True)
class Grant:
    """The signed content of a grant token."""

    grant_id: str
    principal: str
    tool: str
    tool_digest: str
    argument_digest: str
    scope: GrantScope
    reviewer: str
    reason: str
    issued_at: float


@dataclass(frozen=True)
class GrantCheck:
    """The verdict on a presented grant: ok, or refused with the reason."""

    ok: bool
    reason: str
    grant: Grant | None


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def describe_scope(scope: GrantScope) -> str:
    """Plain words for a scope, e.g. "once, until 2026-01-01 10:00:00 UTC"."""
    if scope.kind == "once":
        return f"once, until {_utc(scope.expires_at)} at the latest"
    if scope.kind == "uses":
        return f"up to {scope.uses} times, until {_utc(scope.expires_at)} at the latest"
    return f"any number of times until {_utc(scope.expires_at)}"


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_GRANT_DURATION_S = 30 * 86400.0  # a grant is a standing permission; a month is the longest we mint


def parse_duration(text: str) -> float:
    """Parse ``90s``, ``10m``, ``2h`` or ``1d`` (a bare number is seconds) into seconds.

    Raises:
        ValueError: for anything else, zero, or more than 30 days.
    """
    raw = text.strip().lower()
    unit = _DURATION_UNITS.get(raw[-1:]) if raw else None
    number = raw[:-1] if unit is not None else raw
    if not number.isdigit():
        raise ValueError(f"duration {text!r} is not like 90s, 10m, 2h or 1d")
    seconds = int(number) * (unit or 1.0)
    if not 0 < seconds <= MAX_GRANT_DURATION_S:
        raise ValueError(f"duration {text!r} must be more than 0 and at most 30d")
    return seconds


class GrantKey:
    """The HMAC key that signs and verifies grants. Never logged, never part of a repr."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < KEY_BYTES:
            raise GateError(
                f"a grant key must be at least {KEY_BYTES} bytes, got {len(secret)}",
                "generate one with contain review (it creates a random key file) or os.urandom(32)",
            )
        self._secret = bytes(secret)

    def __repr__(self) -> str:
        return "GrantKey(<secret>)"

    @classmethod
    def from_bytes(cls, secret: bytes) -> GrantKey:
        """Use ``secret`` (at least 32 bytes) as the key."""
        return cls(secret)

    @classmethod
    def load_or_create(cls, path: str | os.PathLike[str]) -> GrantKey:
        """Load the key file at ``path``, creating it (32 random bytes, mode 0600) when absent.

        Raises:
            GateError: when the file is group/world accessible, not a regular file, or too short.
        """
        key_path = Path(path)
        key_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            return cls._load(key_path)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        return cls._load(key_path)

    @classmethod
    def _load(cls, key_path: Path) -> GrantKey:
        try:
            fd = os.open(key_path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise GateError(
                f"cannot open grant key {key_path}: {exc.strerror}",
                "check the path, or remove a symlink there; contain creates the key when absent",
            ) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise GateError(f"grant key {key_path} is not a regular file", "point --key at a file")
            if info.st_mode & 0o077:
                raise GateError(
                    f"grant key {key_path} has mode {stat.S_IMODE(info.st_mode):04o}; "
                    "anyone who can read it can mint grants",
                    f"chmod 600 {key_path}",
                )
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        return cls(data)

    def sign(self, payload: bytes) -> bytes:
        """HMAC-SHA256 over the domain prefix and ``payload``."""
        return hmac.new(self._secret, MAC_DOMAIN + payload, hashlib.sha256).digest()


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return decode_base64url(text)  # canonical spelling only; UnreadableDocument is a ValueError


def _grant_fields(grant: Grant) -> dict[str, Any]:
    return {
        "grant_id": grant.grant_id,
        "principal": grant.principal,
        "tool": grant.tool,
        "tool_digest": grant.tool_digest,
        "argument_digest": grant.argument_digest,
        "scope": {"kind": grant.scope.kind, "uses": grant.scope.uses, "expires_at": grant.scope.expires_at},
        "reviewer": grant.reviewer,
        "reason": grant.reason,
        "issued_at": grant.issued_at,
    }


def mint_grant(
    key: GrantKey,
    *,
    principal: str,
    tool: str,
    tool_digest: str,
    argument_digest: str,
    scope: GrantScope,
    reviewer: str,
    reason: str,
    now: float | None = None,
) -> str:
    """Sign a new grant and return its token.

    Args:
        key: the signing key.
        principal, tool, tool_digest, argument_digest: what the grant is bound to.
        scope: once / uses / until, with its expiry.
        reviewer, reason: who approved and why (carried, signed, for the record).
        now: issue time (unix); defaults to ``time.time()``.

    Returns:
        The token ``cg1.<payload>.<mac>``.
    """
    grant = Grant(
        grant_id="g-" + secrets.token_hex(16),
        principal=principal,
        tool=tool,
        tool_digest=tool_digest,
        argument_digest=argument_digest,
        scope=scope,
        reviewer=reviewer,
        reason=reason,
        issued_at=time.time() if now is None else now,
    )
    payload = _b64encode(canonical_json(_grant_fields(grant)))
    mac = _b64encode(key.sign(payload.encode("ascii")))
    return f"{TOKEN_PREFIX}.{payload}.{mac}"


def _split(token: str) -> tuple[str, bytes]:
    if not isinstance(token, str):
        raise ValueError("a grant token is a string")
    if len(token) > MAX_GRANT_BYTES:
        raise ValueError(f"a grant token is at most {MAX_GRANT_BYTES} characters")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise ValueError(f"a grant token has the form {TOKEN_PREFIX}.<payload>.<mac>")
    _b64decode(parts[1])  # format before signature: the payload must at least be base64url
    mac = _b64decode(parts[2])
    if len(mac) != hashlib.sha256().digest_size:
        raise ValueError("a grant MAC is 32 bytes")
    return parts[1], mac


def _str_field(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if type(value) is not str:
        raise ValueError(f"grant field {name} is missing or not a string")
    return value


def _time_field(fields: dict[str, Any], name: str) -> float:
    value: Any = fields.get(name)
    if type(value) not in (int, float) or not 0 <= value <= MAX_TIMESTAMP:
        raise ValueError(f"grant field {name} is missing or not a unix time up to the year 9999")
    return float(value)


def decode_grant(token: str) -> Grant:
    """Parse a token WITHOUT verifying its signature (for display only).

    Only the canonical encoding is read: canonical unpadded base64url segments, a 32-byte MAC, and
    a payload that is exactly ``canonical_json`` of its fields (no other key order, whitespace,
    duplicate key or number spelling), nesting and numbers bounded before anything recurses.

    Raises:
        ValueError: when the token is malformed or not canonical (never RecursionError or
            OverflowError).
    """
    payload, _mac = _split(token)
    raw = _b64decode(payload)
    try:
        fields = parse_json_document(raw, max_bytes=MAX_GRANT_BYTES, max_depth=MAX_GRANT_DEPTH)
    except UnreadableDocument as exc:
        raise ValueError(f"grant payload is not base64url JSON: {exc}") from exc
    if not isinstance(fields, dict) or not isinstance(fields.get("scope"), dict):
        raise ValueError("grant payload is not an object with a scope")
    if set(fields) != _GRANT_FIELDS or set(fields["scope"]) != _SCOPE_FIELDS:
        raise ValueError("grant payload has missing or unknown fields")
    if canonical_json(fields) != raw:
        raise ValueError("grant payload is not canonical JSON (sorted keys, no whitespace, one spelling per number)")
    scope_fields = fields["scope"]
    uses = scope_fields.get("uses")
    if uses is not None and type(uses) is not int:
        raise ValueError("grant scope uses is not a whole number")
    scope = GrantScope(
        kind=_str_field(scope_fields, "kind"), uses=uses, expires_at=_time_field(scope_fields, "expires_at")
    )
    return Grant(
        grant_id=_str_field(fields, "grant_id"),
        principal=_str_field(fields, "principal"),
        tool=_str_field(fields, "tool"),
        tool_digest=_str_field(fields, "tool_digest"),
        argument_digest=_str_field(fields, "argument_digest"),
        scope=scope,
        reviewer=_str_field(fields, "reviewer"),
        reason=_str_field(fields, "reason"),
        issued_at=_time_field(fields, "issued_at"),
    )


class UseCounter(Protocol):
    """Counts grant uses. ``consume`` is an atomic check-and-increment."""

    def consume(self, grant_id: str, max_uses: int | None) -> bool:
        """Record one use; False (and nothing recorded) when ``max_uses`` are already used."""
        ...


class MemoryUseCounter:
    """A UseCounter in memory, for tests and single-process tools. Thread-safe."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}
        self._lock = threading.Lock()

    def consume(self, grant_id: str, max_uses: int | None) -> bool:
        """See ``UseCounter.consume``."""
        with self._lock:
            used = self._used.get(grant_id, 0)
            if max_uses is not None and used >= max_uses:
                return False
            self._used[grant_id] = used + 1
            return True

    def used(self, grant_id: str) -> int:
        """How many uses were recorded for ``grant_id``."""
        with self._lock:
            return self._used.get(grant_id, 0)


_USES_SCHEMA = "CREATE TABLE IF NOT EXISTS grant_uses (grant_id TEXT PRIMARY KEY, used INTEGER NOT NULL)"


class SqliteUseCounter:
    """A UseCounter on a SQLite file (WAL; ``BEGIN IMMEDIATE`` serialises check-and-increment).

    Safe across threads and processes: each ``consume`` opens its own connection and takes the
    database's write lock before reading the count, so two racers cannot both see "unused".
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = str(path)
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_USES_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def consume(self, grant_id: str, max_uses: int | None) -> bool:
        """See ``UseCounter.consume``."""
        with closing(self._connect()) as conn, immediate_transaction(conn):
            row = conn.execute("SELECT used FROM grant_uses WHERE grant_id = ?", (grant_id,)).fetchone()
            used = int(row[0]) if row else 0
            if max_uses is not None and used >= max_uses:
                return False  # nothing written: the commit only releases the lock
            conn.execute(
                "INSERT INTO grant_uses (grant_id, used) VALUES (?, 1) "
                "ON CONFLICT(grant_id) DO UPDATE SET used = used + 1",
                (grant_id,),
            )
            return True

    def used(self, grant_id: str) -> int:
        """How many uses were recorded for ``grant_id``."""
        conn = self._connect()
        try:
            row = conn.execute("SELECT used FROM grant_uses WHERE grant_id = ?", (grant_id,)).fetchone()
            return int(row[0]) if row else 0
        finally:
            conn.close()


def _refuse(reason: str, grant: Grant | None = None) -> GrantCheck:
    return GrantCheck(False, reason, grant)


def verify_grant(
    key: GrantKey,
    token: str,
    *,
    principal: str,
    tool: str,
    tool_digest: str,
    argument_digest: str,
    uses: UseCounter,
    now: float | None = None,
) -> GrantCheck:
    """Check a grant token against the call about to happen, and consume one use when it fits.

    Args:
        key: the verifying key (the one that minted).
        token: the presented token.
        principal, tool, tool_digest, argument_digest: the call about to happen.
        uses: where uses are counted (shared by every verifier of the same grants).
        now: the current unix time; defaults to ``time.time()``.

    Returns:
        GrantCheck(ok=True, ...) after consuming a use, else ok=False with the reason. Never raises
        for a bad token: an unexpected error while checking one refuses it (fail closed).
    """
    try:
        checked = _authentic_grant(key, token)
    except Exception:  # a bug in reading a token must deny, never escape into a decision path
        log.exception("grant verification failed unexpectedly; refusing the grant")
        return _refuse("grant could not be checked; refused")
    if isinstance(checked, GrantCheck):
        return checked
    grant = checked
    checks = (
        ("principal", grant.principal, principal),
        ("tool", grant.tool, tool),
        ("tool digest", grant.tool_digest, tool_digest),
        ("argument digest", grant.argument_digest, argument_digest),
    )
    for what, granted, actual in checks:
        if granted != actual:
            return _refuse(
                f"grant {what} differs: it was approved for {granted!r}, this call has {actual!r}; "
                "ask for a review of this exact call",
                grant,
            )
    current = time.time() if now is None else now
    if current >= grant.scope.expires_at:
        return _refuse(f"grant expired at {_utc(grant.scope.expires_at)}; ask for a new review", grant)
    if not uses.consume(grant.grant_id, grant.scope.uses):
        return _refuse(f"grant already used {grant.scope.uses}/{grant.scope.uses}; ask for a new review", grant)
    return GrantCheck(
        True, f"grant {grant.grant_id} approved by {grant.reviewer}: {describe_scope(grant.scope)}", grant
    )


def _authentic_grant(key: GrantKey, token: str) -> Grant | GrantCheck:
    """Format, then signature, then content: the grant, or the refusal that says why not."""
    try:
        payload, mac = _split(token)
    except ValueError as exc:
        return _refuse(f"grant is malformed: {exc}")
    if not hmac.compare_digest(mac, key.sign(payload.encode("ascii"))):
        return _refuse("grant signature does not match; it was forged, altered or signed with another key")
    try:
        return decode_grant(token)
    except ValueError as exc:
        return _refuse(f"grant is malformed: {exc}")
