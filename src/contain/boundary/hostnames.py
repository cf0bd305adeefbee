"""Canonical hostnames and host patterns, shared by the manifest and the egress proxy.

One function decides what a hostname *is*, so the manifest validator, the proxy's matcher and any
credential routing all compare the same string. Past bypasses of agent sandboxes were parsing
mismatches (a NUL byte in a name, ``allowed@evil``, a trailing dot); every such spelling is refused
here, before any matching happens.

Does not resolve names (that is egress's job) and does not decide policy.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["HostnameError", "canonical_hostname", "canonical_pattern", "is_ip_literal"]

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
# Characters that have meant something else to some parser in the chain: userinfo, percent
# encoding, path separators, ports, brackets.
_FORBIDDEN = set("@%\\/:[]?#")


class HostnameError(ValueError):
    """A hostname or pattern that contain refuses to interpret."""


def _reject_spelling(raw: str) -> None:
    for ch in raw:
        if ord(ch) < 0x21 or ord(ch) == 0x7F:
            raise HostnameError(f"{raw!r} contains a control character or whitespace")
        if ch in _FORBIDDEN:
            raise HostnameError(f"{raw!r} contains {ch!r}, which is not allowed in a hostname")


def is_ip_literal(raw: str) -> bool:
    """True for anything a resolver or socket layer would read as an address.

    That covers dotted quads, but also ``127.1``, ``0x7f000001``, ``2130706433`` and octal
    spellings, which ``inet_aton`` accepts, and bracketed or bare IPv6.
    """
    text = raw.strip("[]")
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    parts = text.rstrip(".").split(".")
    if not parts or len(parts) > 4:
        return False
    return all(re.fullmatch(r"(0x[0-9a-fA-F]*|[0-9]+)", part) for part in parts)


def canonical_hostname(raw: str) -> str:
    """Return the one spelling of ``raw`` that policy compares: lower case, IDNA, no final dot.

    Raises:
        HostnameError: for empty labels, forbidden characters, IP literals or over-long names.
    """
    if not isinstance(raw, str) or not raw:
        raise HostnameError("a hostname cannot be empty")
    _reject_spelling(raw)
    name = raw[:-1] if raw.endswith(".") else raw
    if is_ip_literal(name):
        raise HostnameError(f"{raw!r} is an IP address, not a hostname")
    try:
        name = name.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise HostnameError(f"{raw!r} is not a valid internationalised hostname: {exc}") from exc
    if len(name) > 253:
        raise HostnameError(f"{raw!r} is longer than 253 characters")
    for label in name.split("."):
        if not _LABEL.match(label):
            raise HostnameError(f"{raw!r} has an empty or invalid label {label!r}")
    return name


def canonical_pattern(raw: str) -> str:
    """Canonicalise an allow-list entry: an exact name or ``*.domain`` (proper subdomains only).

    Raises:
        HostnameError: for bare ``*``, wildcards anywhere but the first label, or a wildcard over a
            top-level domain (``*.com``), which would allow a whole registry.
    """
    if raw.startswith("*."):
        domain = canonical_hostname(raw[2:])
        if "." not in domain:
            raise HostnameError(
                f"{raw!r} would allow every name under a top-level domain; "
                "name a registered domain, such as *.example.com"
            )
        return "*." + domain
    if "*" in raw:
        raise HostnameError(f"{raw!r}: a wildcard is allowed only as the whole first label, as in *.example.com")
    return canonical_hostname(raw)
