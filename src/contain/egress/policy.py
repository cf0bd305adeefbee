"""Which destinations a sandbox may reach: matching a target against ``network.allow``.

What this module enforces (pure, no I/O):

* A target host is read once. Numeric spellings of every kind (see ``addresses.py``) are IP
  literals and pass only when an allow entry names that address or a range containing it, on
  that port. A name whose *canonical* form is numeric (``１２７.０.０.１``, full-width digits that
  IDNA maps to ASCII) is refused as an IP literal; it never matches a name entry. Everything
  else must survive ``canonical_hostname`` (lower case, IDNA, one trailing dot dropped; NUL,
  control characters, whitespace, ``@``, ``%``, ``\\``, empty labels refused), the same function
  the manifest validator uses, so both sides compare one spelling.
* ``*.example.com`` matches proper subdomains only: ``a.example.com`` and ``a.b.example.com``,
  never ``example.com``, ``evilexample.com`` or ``example.com.evil.test``.
* A matching host on an unlisted port is refused with its own rule id, so the message says which
  ports would have worked.
* Every answer is an ``EgressDecision`` value (a ``contain.decision.Decision`` with the host, port
  and checked addresses); refusals carry a rule id from ``DENY_RULES`` or
  ``SPECIAL_RANGES`` and a reason written for the agent that has to act on it.

What it does not do: resolve names or check resolved addresses (``resolve.py``), or speak HTTP
(``proxy.py``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import StrEnum

from contain.boundary.hostnames import HostnameError, HostnameIsAddress, canonical_hostname
from contain.boundary.kinds import ToolVerdict
from contain.boundary.plain import PlainBoundary
from contain.decision import Decision
from contain.egress.addresses import IPAddress, IPNetwork, UnreadableLiteral, parse_ip_literal

__all__ = [
    "DENY_RULES",
    "AllowEntry",
    "DenyRule",
    "Destination",
    "EgressDecision",
    "EgressPolicy",
    "Via",
    "deny",
]


class Via(StrEnum):
    """How an attempt reached the host side."""

    CONNECT = "connect"  # HTTP CONNECT through the proxy listener
    HTTP = "http"  # absolute-form plain HTTP through the proxy listener
    TRANSPARENT = "transparent"  # a connection to a placeholder address
    DNS = "dns"  # a query to the stub resolver


@dataclass(frozen=True)
class Destination:
    """What a client asked for, as it spelled it (not yet canonical)."""

    host: str
    port: int
    via: Via


@dataclass(frozen=True)
class EgressDecision(Decision):
    """The answer for one attempt: a ``contain.decision.Decision`` (allow or deny, never review)
    plus the destination it is about. ``addresses`` are the checked addresses to dial, in order."""

    host: str
    port: int
    addresses: tuple[IPAddress, ...] = field(default=())


@dataclass(frozen=True)
class DenyRule:
    """A refusal that is not an address range, with the reason it exists."""

    rule_id: str
    why: str


DENY_RULES: tuple[DenyRule, ...] = (
    DenyRule("egress.not_allowed", "default deny: no network.allow entry names the host"),
    DenyRule("egress.port_not_allowed", "the host is allowed, but only on the ports listed"),
    DenyRule("egress.hostname", "spellings that parsers disagree on (NUL, CRLF, @, %, \\) are refused"),
    DenyRule("egress.ip_literal", "an IP address bypasses name policy unless the manifest names it"),
    DenyRule("egress.resolve_failed", "a name that does not resolve cannot be checked or dialled"),
    DenyRule("egress.request", "malformed or ambiguous HTTP could be read two ways (smuggling)"),
    DenyRule("egress.host_mismatch", "a Host header that disagrees with the target routes elsewhere"),
    DenyRule("egress.internal_error", "an error inside a decision denies (fail closed)"),
)
_DENY_IDS = frozenset(rule.rule_id for rule in DENY_RULES)


def deny(rule_id: str, reason: str, *, host: str, port: int) -> EgressDecision:
    """Build a refusal; ``rule_id`` must be a ``DENY_RULES`` row or an address-range rule id."""
    if rule_id not in _DENY_IDS and not rule_id.startswith("egress.special_address."):
        raise ValueError(f"unknown deny rule id {rule_id!r}")
    return EgressDecision(ToolVerdict.DENY, rule_id, reason, host, port)


@dataclass(frozen=True)
class AllowEntry:
    """One ``network.allow`` row: a name pattern or an address range, and its ports."""

    index: int
    pattern: str | None
    network: IPNetwork | None
    ports: frozenset[int]

    @property
    def rule_id(self) -> str:
        return f"network.allow[{self.index}]"

    def matches_name(self, name: str) -> bool:
        """``name`` must already be canonical."""
        if self.pattern is None:
            return False
        if self.pattern.startswith("*."):
            return name.endswith(self.pattern[1:])  # ".example.com": proper subdomains only
        return name == self.pattern

    def contains_address(self, address: IPAddress) -> bool:
        return self.network is not None and self.network.version == address.version and address in self.network


def _ports_text(ports: frozenset[int]) -> str:
    return ", ".join(str(p) for p in sorted(ports))


class EgressPolicy:
    """``network.allow`` and ``network.hosts`` of one boundary, ready for matching."""

    def __init__(self, entries: tuple[AllowEntry, ...], hosts: dict[str, IPAddress]) -> None:
        self.entries = entries
        self.hosts = dict(hosts)

    @classmethod
    def from_boundary(cls, boundary: PlainBoundary) -> EgressPolicy:
        """Build from a validated boundary (hosts there are already canonical)."""
        entries = []
        for index, rule in enumerate(boundary.network.allow):
            network: IPNetwork | None
            try:
                network = ipaddress.ip_network(rule.host)
                pattern = None
            except ValueError:
                network, pattern = None, rule.host
            entries.append(AllowEntry(index, pattern, network, frozenset(rule.ports)))
        hosts = {name: ipaddress.ip_address(addr) for name, addr in boundary.network.hosts.items()}
        return cls(tuple(entries), hosts)

    def exact_names(self) -> tuple[str, ...]:
        """Names allowed without a wildcard, in manifest order (they get placeholders up front)."""
        names = [e.pattern for e in self.entries if e.pattern and not e.pattern.startswith("*.")]
        return tuple(dict.fromkeys(names))

    def ports_for_name(self, name: str) -> frozenset[int]:
        """Every port any entry allows for canonical ``name`` (empty: the name is not allowed)."""
        ports: set[int] = set()
        for entry in self.entries:
            if entry.matches_name(name):
                ports |= entry.ports
        return frozenset(ports)

    def entry_naming_address(self, address: IPAddress, port: int) -> AllowEntry | None:
        """The first address-range entry that contains ``address`` and allows ``port``."""
        for entry in self.entries:
            if entry.contains_address(address) and port in entry.ports:
                return entry
        return None

    def check_target(self, destination: Destination) -> EgressDecision:
        """Decide everything that can be decided before resolution.

        Returns:
            A refusal; or, for an IP literal named by an entry, an allowed decision whose
            ``addresses`` holds that address; or, for an allowed name, an allowed decision with
            no addresses yet (the resolver fills them in after checking).
        """
        raw, port = destination.host, destination.port
        if not 1 <= port <= 65535:
            return deny("egress.request", f"port {port} is outside 1-65535", host=raw, port=port)
        try:
            literal = parse_ip_literal(raw)
        except UnreadableLiteral as exc:
            return deny("egress.ip_literal", f"{exc}; refused", host=raw, port=port)
        if literal is not None:
            return self._check_literal(raw, literal, port)
        try:
            name = canonical_hostname(raw)
        except HostnameIsAddress as exc:  # 0X7F000001, full-width digits: an address, never a name
            return deny("egress.ip_literal", f"{exc}; use a hostname listed in network.allow", host=raw, port=port)
        except HostnameError as exc:
            return deny(
                "egress.hostname",
                f"{raw!r} is not an acceptable hostname: {exc}",
                host=raw,
                port=port,
            )
        return self.check_name(name, port)

    def check_name(self, name: str, port: int) -> EgressDecision:
        """Match a canonical name and port against the allow entries."""
        named = [e for e in self.entries if e.matches_name(name)]
        for entry in named:
            if port in entry.ports:
                reason = f"{name}:{port} matches {entry.rule_id}"
                return EgressDecision(ToolVerdict.ALLOW, entry.rule_id, reason, name, port)
        if named:
            ports = frozenset().union(*(e.ports for e in named))
            return deny(
                "egress.port_not_allowed",
                f"{name}:{port} is not in network.allow ({name} is allowed on port(s) {_ports_text(ports)} only)",
                host=name,
                port=port,
            )
        return deny("egress.not_allowed", f"{name}:{port} is not in network.allow", host=name, port=port)

    def _check_literal(self, raw: str, address: IPAddress, port: int) -> EgressDecision:
        entry = self.entry_naming_address(address, port)
        if entry is None:
            return deny(
                "egress.ip_literal",
                f"{raw}:{port} is an IP address ({address}), and network.allow names no range "
                f"containing it on port {port}; use a hostname listed in network.allow",
                host=str(address),
                port=port,
            )
        return EgressDecision(
            ToolVerdict.ALLOW,
            entry.rule_id,
            f"{address}:{port} is named by {entry.rule_id}",
            str(address),
            port,
            (address,),
        )
