"""IP literals in every spelling, and the table of address ranges egress refuses by default.

What this module enforces:

* ``parse_ip_literal`` reads a host string the way the most permissive parser in the chain would
  (``inet_aton``: ``127.1``, ``0177.0.0.1``, ``0x7f000001``, ``2130706433``, ``0x7f.0.0.01``;
  bracketed and bare IPv6, IPv4-mapped IPv6, zone ids). Anything that *looks* numeric but does
  not parse is reported as an unreadable literal, so the caller can refuse it instead of handing
  it to a resolver that might read it differently.
* ``SPECIAL_RANGES`` is the table of destinations a name may not resolve to unless the manifest
  names them: metadata services, loopback, link-local, private and unique-local space, CGNAT,
  multicast, unspecified, broadcast, reserved space and translation prefixes that embed an
  IPv4 address. Each row carries the reason and whether a ``network.hosts`` override that the
  manifest also allows may relax it (``relaxable_by_hosts``; see ``contain.egress.resolve``).
* ``classify_address`` returns the first row that contains an address (IPv4-mapped IPv6 is
  unwrapped first), and ``local_interface_addresses`` reads this host's own addresses, which are
  refused like loopback.

The shape test (``looks_like_ip_literal``) lives in ``contain.boundary.hostnames`` so that the
manifest, the hostname canonicaliser and this module share one definition of "numeric"; it is
re-exported here.

What it does not do: decide policy (``policy.py``) or resolve names (``resolve.py``).
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from contain.boundary.hostnames import looks_like_ip_literal

__all__ = [
    "SPECIAL_RANGES",
    "IPAddress",
    "IPNetwork",
    "SpecialRange",
    "UnreadableLiteral",
    "classify_address",
    "local_interface_addresses",
    "looks_like_ip_literal",
    "parse_ip_literal",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class UnreadableLiteral(ValueError):
    """A host string that looks like an IP address but is not a valid one (e.g. 999.1.1.1)."""


@dataclass(frozen=True)
class SpecialRange:
    """One address range refused by default, with the reason and the rule id that refuses it."""

    network: IPNetwork
    name: str
    why: str
    relaxable_by_hosts: bool

    @property
    def rule_id(self) -> str:
        return f"egress.special_address.{self.name}"


# The third column of the table: may a ``network.hosts`` override the manifest also allows relax
# the row (``SpecialRange.relaxable_by_hosts``; contain.egress.resolve decides)?
_RELAXABLE = True
_FIXED = False

# Order matters: the first containing row names the refusal, so the specific metadata rows come
# before the broader ranges that contain them (169.254/16, 100.64/10, fd00::/8).
# Sources: RFC 6890 (special-purpose registries), RFC 6598 (CGNAT), RFC 4193 (ULA), cloud
# provider documentation for the metadata endpoints.
_TABLE: tuple[tuple[str, str, bool, str], ...] = (
    # (cidr, name, relaxable_by_hosts, why)
    ("169.254.169.254/32", "metadata", _FIXED, "cloud instance metadata (AWS, GCP, Azure, OpenStack)"),
    ("169.254.170.2/32", "metadata", _FIXED, "AWS ECS task metadata and credentials"),
    ("100.100.100.200/32", "metadata", _FIXED, "Alibaba Cloud instance metadata"),
    ("fd00:ec2::254/128", "metadata", _FIXED, "AWS instance metadata over IPv6"),
    ("0.0.0.0/8", "unspecified", _FIXED, "'this network'; 0.0.0.0 reaches the local host"),
    ("::/128", "unspecified", _FIXED, "the unspecified address reaches the local host"),
    ("127.0.0.0/8", "loopback", _RELAXABLE, "services on this host's loopback"),
    ("::1/128", "loopback", _RELAXABLE, "services on this host's loopback"),
    ("169.254.0.0/16", "link_local", _FIXED, "link-local: metadata, gateways and neighbours"),
    ("fe80::/10", "link_local", _FIXED, "link-local: gateways and neighbours"),
    ("10.0.0.0/8", "private", _RELAXABLE, "private network (RFC 1918)"),
    ("172.16.0.0/12", "private", _RELAXABLE, "private network (RFC 1918)"),
    ("192.168.0.0/16", "private", _RELAXABLE, "private network (RFC 1918)"),
    ("fc00::/7", "unique_local", _RELAXABLE, "unique-local IPv6, the private ranges' twin (RFC 4193)"),
    ("100.64.0.0/10", "cgnat", _RELAXABLE, "carrier-grade NAT space, often the provider's internal network"),
    ("224.0.0.0/4", "multicast", _FIXED, "multicast reaches every listener on a segment"),
    ("ff00::/8", "multicast", _FIXED, "multicast reaches every listener on a segment"),
    ("255.255.255.255/32", "broadcast", _FIXED, "limited broadcast"),
    ("240.0.0.0/4", "reserved", _FIXED, "reserved for future use (RFC 1112)"),
    ("192.0.0.0/24", "reserved", _FIXED, "IETF protocol assignments (RFC 6890)"),
    ("198.18.0.0/15", "reserved", _RELAXABLE, "benchmarking networks, often lab-internal (RFC 2544)"),
    ("192.0.2.0/24", "documentation", _RELAXABLE, "TEST-NET-1, never a public service (RFC 5737)"),
    ("198.51.100.0/24", "documentation", _RELAXABLE, "TEST-NET-2, never a public service (RFC 5737)"),
    ("203.0.113.0/24", "documentation", _RELAXABLE, "TEST-NET-3, never a public service (RFC 5737)"),
    ("2001:db8::/32", "documentation", _RELAXABLE, "IPv6 documentation prefix (RFC 3849)"),
    ("::/96", "translation", _FIXED, "IPv4-compatible IPv6 embeds an IPv4 address"),
    ("64:ff9b::/96", "translation", _FIXED, "NAT64 reaches the embedded IPv4 address"),
    ("64:ff9b:1::/48", "translation", _FIXED, "local NAT64 reaches an embedded IPv4 address"),
    ("2002::/16", "translation", _FIXED, "6to4 reaches the embedded IPv4 address"),
    ("2001::/32", "translation", _FIXED, "Teredo tunnels to an embedded IPv4 address"),
    ("100::/64", "reserved", _FIXED, "discard-only prefix (RFC 6666)"),
)
SPECIAL_RANGES: tuple[SpecialRange, ...] = tuple(
    SpecialRange(ipaddress.ip_network(cidr), name, why, relaxable) for cidr, name, relaxable, why in _TABLE
)

HOST_ADDRESS_ROW = SpecialRange(
    ipaddress.ip_network("0.0.0.0/32"),
    "host_address",
    "an address of this host: services bound to it are the host's, not the internet's",
    _RELAXABLE,
)


def _inet_aton_part(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)  # raises ValueError for 8 and 9, as inet_aton refuses them
    return int(part, 10)


def parse_ip_literal(text: str) -> IPAddress | None:
    """Read ``text`` as an IP address in any spelling a C library would accept.

    Args:
        text: a host as a client sent it (bracketed IPv6 allowed, one trailing dot allowed).

    Returns:
        The address, or ``None`` when ``text`` is not numeric at all (a hostname).

    Raises:
        UnreadableLiteral: ``text`` looks like an address but is not a valid one.
    """
    if not looks_like_ip_literal(text):
        return None
    body = text[:-1] if text.endswith(".") else text
    if body.startswith("[") or ":" in body:
        inner = body[1:-1] if body.startswith("[") and body.endswith("]") else body
        try:
            addr = ipaddress.IPv6Address(inner)
        except ValueError as exc:
            raise UnreadableLiteral(f"{text!r} is not a valid IPv6 address") from exc
        return addr.ipv4_mapped or addr
    parts = body.split(".")
    try:
        values = [_inet_aton_part(p) for p in parts]
    except ValueError as exc:
        raise UnreadableLiteral(f"{text!r} is not a valid IPv4 address") from exc
    # inet_aton: a.b.c.d, a.b.c (c is 16 bits), a.b (b is 24 bits), a (32 bits).
    last_bits = 32 - 8 * (len(values) - 1)
    if any(v > 255 for v in values[:-1]) or values[-1] >= 1 << last_bits:
        raise UnreadableLiteral(f"{text!r} has a part out of range for an IPv4 address")
    number = values[-1]
    for index, value in enumerate(values[:-1]):
        number |= value << (24 - 8 * index)
    return ipaddress.IPv4Address(number)


def classify_address(address: IPAddress, *, host_addresses: frozenset[IPAddress] = frozenset()) -> SpecialRange | None:
    """Return the first ``SPECIAL_RANGES`` row containing ``address``, or ``None`` if public.

    IPv4-mapped IPv6 (``::ffff:a.b.c.d``) is classified as the IPv4 address it reaches. An address
    in ``host_addresses`` (this host's interfaces) is refused like loopback.
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    for row in SPECIAL_RANGES:
        if address.version == row.network.version and address in row.network:
            return row
    if address in host_addresses:
        return HOST_ADDRESS_ROW
    return None


def local_interface_addresses(proc: Path = Path("/proc/net")) -> frozenset[IPAddress]:
    """This host's own addresses, read from ``fib_trie`` (IPv4) and ``if_inet6`` (IPv6).

    A fact probed once per egress session. Unreadable files give an empty set for that family;
    the loopback and private rows still cover the usual interface addresses.
    """
    found: set[IPAddress] = set()
    try:
        lines = (proc / "fib_trie").read_text().splitlines()
    except OSError:
        lines = []
    previous = ""
    for line in lines:
        if line.strip() == "/32 host LOCAL" and previous.strip().startswith("|--"):
            with contextlib.suppress(ValueError):
                found.add(ipaddress.IPv4Address(previous.strip()[3:].strip()))
        previous = line
    try:
        v6_lines = (proc / "if_inet6").read_text().splitlines()
    except OSError:
        v6_lines = []
    for line in v6_lines:
        hexaddr = line.split(" ", 1)[0]
        if len(hexaddr) == 32:
            found.add(ipaddress.IPv6Address(int(hexaddr, 16)))
    return frozenset(found)
