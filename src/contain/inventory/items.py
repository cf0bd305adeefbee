"""The value every inventory probe returns: one reachable thing, its proposed verdict and why.

An ``InventoryItem`` names what an unsandboxed process started here could reach (a credential,
a directory, a route, a socket, an external record) and proposes ``block``, ``read`` or
``review``. Items never carry a secret: the only trace of a secret value is ``fingerprint``,
made by ``redacted_fingerprint``, which shows 4 hex digits of the value's SHA-256 and its length
and never any character of the value itself.

Does not probe anything (see the sibling modules) and does not enforce anything: a verdict is a
proposal that ``contain inventory --draft-manifest`` turns into a boundary, and the runtime
enforces.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

__all__ = ["Group", "InventoryItem", "Verdict", "redacted_fingerprint"]

# 4 hex digits = 16 bits: enough to tell two secrets apart in one report, too little to confirm
# a guessed secret with any confidence (65536 values share each fingerprint).
_FINGERPRINT_HEX_DIGITS = 4


class Group(StrEnum):
    """The five kinds of things a task could reach (issue 7)."""

    CREDENTIALS = "credentials"
    FILES = "files"
    NETWORK = "network"
    PROCESSES = "processes"
    RECORDS = "records"


class Verdict(StrEnum):
    """What the draft boundary proposes for an item."""

    BLOCK = "block"  # the sandbox must not see it
    READ = "read"  # the sandbox may see it read-only
    REVIEW = "review"  # a person decides; the draft keeps it out until they do


@dataclass(frozen=True)
class InventoryItem:
    """One thing the task could reach.

    ``location`` is where it is (a path, a variable name, an address, a redacted URL), never a
    secret value. ``fingerprint`` is set only for secret values, via ``redacted_fingerprint``.
    """

    group: Group
    kind: str
    location: str
    verdict: Verdict
    reason: str
    fingerprint: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able mapping (enums as their values)."""
        data = asdict(self)
        data["group"] = self.group.value
        data["verdict"] = self.verdict.value
        return data


def redacted_fingerprint(value: str | bytes) -> str:
    """A short, non-reversible tag for a secret: ``sha256:1a2b/len=40``.

    Args:
        value: the secret.

    Returns:
        4 hex digits of its SHA-256 and its length; no character of ``value`` appears.
    """
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    digest = hashlib.sha256(raw).hexdigest()[:_FINGERPRINT_HEX_DIGITS]
    return f"sha256:{digest}/len={len(raw)}"
