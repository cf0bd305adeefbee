"""Capability tokens for broker callers: a macaroon-style HMAC chain with caveats.

Format: ``"cbt1." + base64url(canonical JSON {"id": ..., "caveats": [...]}) + "." + base64url(tag)``
where ``tag_0 = HMAC-SHA256(root_key, TOKEN_DOMAIN + id)`` and ``tag_i = HMAC-SHA256(tag_{i-1},
canonical_json(caveat_i))``. This is the macaroon construction (Birgisson et al., NDSS 2014):

  * the holder can **attenuate**: append a caveat and replace the tag by HMAC(tag, caveat) without
    knowing the root key (``attenuate``);
  * nobody without the root key can **remove or change** a caveat: that needs an earlier tag, which
    the token no longer contains; verification rebuilds the whole chain from the root key;
  * every caveat must hold, so adding one only narrows: principals and tasks must all agree,
    allowed actions are the intersection, the expiry is the earliest.

Exactly one spelling of a token verifies: the body must be the canonical JSON of what it decodes
to (so no whitespace, key order, duplicate key or number spelling can vary), both segments
canonical unpadded base64url (no padding, whitespace, ``+``/``/`` or junk), the tag 32 bytes.
Nesting, size and numbers are bounded by ``contain.boundary.documents`` before anything recurses,
so a hostile token is a 401, never a RecursionError or OverflowError.

Caveat kinds (anything else is refused, fail closed): ``{"task": T}``, ``{"principal": P}``,
``{"actions": [...]}``, ``{"expires_at": unix_seconds}``. ``mint_token`` always writes all four,
so a token without a principal, task, action list or expiry cannot verify.

What is not enforced here: replay of a stolen token before it expires (keep TTLs short; tokens
enter a sandbox only as a read-only file), and revocation (rotate the root key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contain._log import LazyLogger
from contain.boundary.documents import decode_base64url, parse_json_document
from contain.gate.digests import canonical_json

__all__ = [
    "TOKEN_DOMAIN",
    "TOKEN_PREFIX",
    "TokenCheck",
    "TokenKey",
    "TokenScope",
    "attenuate",
    "mint_token",
    "verify_token",
]

log = LazyLogger(__name__)

TOKEN_PREFIX = "cbt1"
# Domain separation from grant MACs ("contain-grant-v1\x00") made with a different key anyway.
TOKEN_DOMAIN = b"contain-broker-token-v1\x00"
CAVEAT_KINDS = ("task", "principal", "actions", "expires_at")
MAX_TOKEN_BYTES = 8192
MAX_TOKEN_DEPTH = 4  # body -> caveats -> caveat -> actions list
TAG_BYTES = 32  # HMAC-SHA256 output
MAX_EXPIRES_AT = 253402300799  # 9999-12-31T23:59:59Z: past it a timestamp is an error, not a time


class TokenKey:
    """The broker's root key for capability tokens (32 random bytes)."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 32:
            raise ValueError("a token key needs at least 32 bytes")
        self._secret = bytes(secret)

    def __repr__(self) -> str:
        return "TokenKey(<secret>)"

    @classmethod
    def load_or_create(cls, path: str | os.PathLike[str]) -> TokenKey:
        """Read the key file, creating it (mode 0600) when missing.

        Raises:
            PermissionError: the file is readable by group or others.
            ValueError: the file holds fewer than 32 bytes.
        """
        file = Path(path)
        if not file.exists():
            try:
                fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return cls.load_or_create(path)
            try:
                os.write(fd, secrets.token_bytes(32))
                os.fsync(fd)
            finally:
                os.close(fd)
        if file.stat().st_mode & 0o077:
            raise PermissionError(f"token key {file} is readable by group or others; chmod 600 it")
        return cls(file.read_bytes())

    def root_tag(self, token_id: str) -> bytes:
        return hmac.new(self._secret, TOKEN_DOMAIN + token_id.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class TokenScope:
    """What a verified token lets its holder do."""

    token_id: str
    task: str
    principal: str
    actions: frozenset[str]
    expires_at: float


@dataclass(frozen=True)
class TokenCheck:
    """The verdict on a token: ``status`` is 200 (ok), 401 (not authentic / expired) or 403."""

    ok: bool
    status: int
    reason: str
    scope: TokenScope | None = None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return decode_base64url(text)


def _chain(tag: bytes, caveats: Sequence[Mapping[str, Any]]) -> bytes:
    for caveat in caveats:
        tag = hmac.new(tag, canonical_json(dict(caveat)), hashlib.sha256).digest()
    return tag


def _encode(token_id: str, caveats: Sequence[Mapping[str, Any]], tag: bytes) -> str:
    body = canonical_json({"id": token_id, "caveats": [dict(c) for c in caveats]})
    return f"{TOKEN_PREFIX}.{_b64(body)}.{_b64(tag)}"


def _decode(token: str) -> tuple[str, list[dict[str, Any]], bytes]:
    """Read the one canonical encoding of a token; every other spelling is refused.

    Canonical means: ASCII, three dot-separated segments, unpadded canonical base64url (no
    whitespace, ``+``, ``/``, padding or junk), a 32-byte tag, and a body that is exactly
    ``canonical_json`` of what it decodes to (sorted keys, no whitespace, no duplicate keys,
    numbers within 64 bits). Re-encoding the decoded token reproduces the exact text.
    """
    if not isinstance(token, str):
        raise TypeError("a token is a string")
    if len(token) > MAX_TOKEN_BYTES:
        raise ValueError("token is too long")
    if not token.isascii():
        raise ValueError("token contains non-ASCII characters")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise ValueError(f"token does not start with {TOKEN_PREFIX}. or has the wrong number of parts")
    raw_body = _unb64(parts[1])
    tag = _unb64(parts[2])
    if len(tag) != TAG_BYTES:
        raise ValueError(f"token tag is {len(tag)} bytes, not {TAG_BYTES}")
    body = parse_json_document(raw_body, max_bytes=MAX_TOKEN_BYTES, max_depth=MAX_TOKEN_DEPTH)
    if not isinstance(body, dict) or set(body) != {"id", "caveats"}:
        raise ValueError("token body must be an object with exactly an id and a list of caveats")
    if not isinstance(body["id"], str) or not isinstance(body["caveats"], list):
        raise ValueError("token body must be an object with an id and a list of caveats")
    caveats = body["caveats"]
    if not all(isinstance(c, dict) and len(c) == 1 for c in caveats):
        raise ValueError("every caveat must be an object with exactly one key")
    if canonical_json(body) != raw_body:
        raise ValueError("token body is not canonical JSON (sorted keys, no whitespace, one spelling per number)")
    return body["id"], caveats, tag


def mint_token(
    key: TokenKey, *, task: str, principal: str, actions: Sequence[str], ttl_s: float, now: float | None = None
) -> str:
    """Mint a token for ``principal`` running ``task``, allowed ``actions``, valid ``ttl_s`` seconds.

    Raises:
        ValueError: empty principal/task/actions or a non-positive TTL.
    """
    if not task or not principal or not actions:
        raise ValueError("a token needs a task, a principal and at least one action")
    if ttl_s <= 0:
        raise ValueError("ttl_s must be positive")
    issued = time.time() if now is None else now
    token_id = secrets.token_hex(12)
    caveats: list[dict[str, Any]] = [
        {"task": task},
        {"principal": principal},
        {"actions": sorted(set(actions))},
        {"expires_at": round(issued + ttl_s, 3)},
    ]
    return _encode(token_id, caveats, _chain(key.root_tag(token_id), caveats))


def attenuate(token: str, caveat: Mapping[str, Any]) -> str:
    """Return ``token`` narrowed by one more caveat (no key needed). Never widens.

    Raises:
        ValueError: the token is malformed or the caveat is not a known single-key caveat.
    """
    token_id, caveats, tag = _decode(token)
    if len(caveat) != 1 or next(iter(caveat)) not in CAVEAT_KINDS:
        raise ValueError(f"a caveat is one of {', '.join(CAVEAT_KINDS)} with one value")
    return _encode(token_id, [*caveats, dict(caveat)], _chain(tag, [caveat]))


def _fold(caveats: Sequence[Mapping[str, Any]]) -> tuple[set[str], set[str], frozenset[str] | None, float | None]:
    tasks: set[str] = set()
    principals: set[str] = set()
    actions: frozenset[str] | None = None
    expires: float | None = None
    for caveat in caveats:
        ((kind, value),) = caveat.items()
        if kind == "task" and isinstance(value, str):
            tasks.add(value)
        elif kind == "principal" and isinstance(value, str):
            principals.add(value)
        elif kind == "actions" and isinstance(value, list) and all(isinstance(a, str) for a in value):
            actions = frozenset(value) if actions is None else actions & frozenset(value)
        elif kind == "expires_at" and type(value) in (int, float) and abs(value) <= MAX_EXPIRES_AT:
            expires = float(value) if expires is None else min(expires, float(value))
        else:
            raise ValueError(f"unknown or malformed caveat {kind!r}")
    return tasks, principals, actions, expires


def verify_token(key: TokenKey, token: str, *, now: float | None = None) -> TokenCheck:
    """Rebuild the chain from the root key and fold the caveats into a scope.

    Returns a ``TokenCheck``: 401 for malformed (any spelling but the canonical one, see
    ``_decode``), forged (tag mismatch, including any removed or edited caveat) or expired
    tokens; 403 for tokens whose caveats contradict each other (two principals or tasks) or leave
    no action. Never raises: an unexpected error while checking is a 401 (fail closed).
    """
    try:
        return _verify(key, token, now=now)
    except Exception:  # a bug in checking must deny, never escape to the caller's decision path
        log.exception("token verification failed unexpectedly; refusing the token")
        return TokenCheck(False, 401, "token could not be checked; refused")


def _verify(key: TokenKey, token: str, *, now: float | None) -> TokenCheck:
    try:
        token_id, caveats, tag = _decode(token)
        expected = _chain(key.root_tag(token_id), caveats)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        return TokenCheck(False, 401, f"malformed token: {exc}")
    if not hmac.compare_digest(expected, tag):
        return TokenCheck(False, 401, "token signature does not match (forged, or a caveat was removed or edited)")
    try:
        tasks, principals, actions, expires = _fold(caveats)
    except ValueError as exc:
        return TokenCheck(False, 403, f"token refused: {exc}")
    if expires is None or len(tasks) != 1 or len(principals) != 1 or actions is None:
        return TokenCheck(False, 403, "token must name exactly one task, one principal, an action list and an expiry")
    current = time.time() if now is None else now
    if current >= expires:
        return TokenCheck(False, 401, f"token expired at {expires:.0f} (now {current:.0f})")
    if not actions:
        return TokenCheck(False, 403, "token allows no action (its action caveats do not overlap)")
    scope = TokenScope(token_id, tasks.pop(), principals.pop(), actions, expires)
    return TokenCheck(True, 200, "ok", scope)
