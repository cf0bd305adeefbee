"""Canonical hostnames and host patterns, shared by the manifest and the egress proxy.

One function decides what a hostname *is*, so the manifest validator, the proxy's matcher and any
credential routing all compare the same string. Past bypasses of agent sandboxes were parsing
mismatches (a NUL byte in a name, ``allowed@evil``, a trailing dot); every such spelling is refused
here, before any matching happens.

Canonicalisation is idempotent: ``canonical_hostname(canonical_hostname(x)) == canonical_hostname(x)``
for every ``x`` it accepts. That needs the IP-literal test to run on the canonical form, not only on
what was sent: IDNA's nameprep maps full-width (``１２７.０.０.１``) and superscript (``¹²⁷``) digits to
ASCII digits, and lower-casing turns ``0X7F000001`` into ``0x7f000001``, so a spelling that is not
numeric on the way in can be an address on the way out (fuzzing found both). Such names are
refused with ``HostnameIsAddress``. ``looks_like_ip_literal`` is the one shape test for addresses:
every spelling ``inet_aton(3)`` accepts (``127.1``, ``0177.0.0.1``, ``0x7f000001``,
``2130706433``, hex digits in either case), and bracketed or bare IPv6 with a zone id.

Does not resolve names (that is egress's job), parse addresses into values
(``contain.egress.addresses.parse_ip_literal``) or decide policy.
"""

from __future__ import annotations

import re

__all__ = [
    "HostnameError",
    "HostnameIsAddress",
    "canonical_hostname",
    "canonical_pattern",
    "is_ip_literal",
    "looks_like_ip_literal",
]

_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
# Characters that have meant something else to some parser in the chain: userinfo, percent
# encoding, path separators, ports, brackets.
_FORBIDDEN = set("@%\\/:[]?#")
# One inet_aton part: hex (0x, either case, digits optional as glibc allows), octal or decimal.
# ASCII only: [0-9] never matches "²" or "１" (\d would).
_NUMERIC_PART = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")
_IPV6_SHAPE = re.compile(r"[0-9a-fA-F:.]*:[0-9a-fA-F:.]*(%[^%\]]*)?")


class HostnameError(ValueError):
    """A hostname or pattern that contain refuses to interpret."""


class HostnameIsAddress(HostnameError):
    """A hostname whose canonical form is an IP literal (``0X7F000001``, ``１２７.０.０.１``)."""


def _reject_spelling(raw: str) -> None:
    for ch in raw:
        if ord(ch) < 0x21 or ord(ch) == 0x7F:
            raise HostnameError(f"{raw!r} contains a control character or whitespace")
        if ch in _FORBIDDEN:
            raise HostnameError(f"{raw!r} contains {ch!r}, which is not allowed in a hostname")


def looks_like_ip_literal(text: str) -> bool:
    """True when a resolver or socket layer could read ``text`` as an address, valid or not.

    Args:
        text: a host as sent (one trailing dot and IPv6 brackets allowed).
    """
    body = text[:-1] if text.endswith(".") else text
    if body.startswith("[") or _IPV6_SHAPE.fullmatch(body):
        return True
    parts = body.split(".")
    return 1 <= len(parts) <= 4 and all(_NUMERIC_PART.fullmatch(p) for p in parts)


def is_ip_literal(raw: str) -> bool:
    """True for anything a resolver or socket layer would read as an address (see above)."""
    return looks_like_ip_literal(raw)


def canonical_hostname(raw: str) -> str:
    """Return the one spelling of ``raw`` that policy compares: lower case, IDNA, no final dot.

    Raises:
        HostnameError: for empty labels, forbidden characters or over-long names.
        HostnameIsAddress: when ``raw``, or its canonical form, is an IP literal.
    """
    if not isinstance(raw, str) or not raw:
        raise HostnameError("a hostname cannot be empty")
    _reject_spelling(raw)
    name = raw[:-1] if raw.endswith(".") else raw
    if looks_like_ip_literal(name):
        raise HostnameIsAddress(f"{raw!r} is an IP address, not a hostname")
    try:
        name = name.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise HostnameError(f"{raw!r} is not a valid internationalised hostname: {exc}") from exc
    if len(name) > 253:
        raise HostnameError(f"{raw!r} is longer than 253 characters")
    for label in name.split("."):
        if not _LABEL.fullmatch(label):
            raise HostnameError(f"{raw!r} has an empty or invalid label {label!r}")
    if looks_like_ip_literal(name):  # decided on the canonical form: nameprep and lower() ran
        raise HostnameIsAddress(f"{raw!r} is the IP address {name!r} in another spelling, not a hostname")
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
