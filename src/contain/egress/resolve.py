"""Resolve on the host, check every address, then pin: the decision function egress serves.

The order is the point (ESCAPE_CATALOG PX-03/PX-04, NE-06, NE-07):

1. ``EgressPolicy.check_target`` reads the host once and matches it (literals and names).
2. An allowed name is resolved exactly once: through ``network.hosts`` if the manifest maps it,
   otherwise ``getaddrinfo`` in an executor.
3. *Every* returned address is classified against ``SPECIAL_RANGES`` and this host's own
   addresses. One refused address refuses the whole attempt (a mixed answer is how DNS
   rebinding hides a private address behind a public one).
4. The decision carries the checked addresses; the proxy dials exactly those (numeric
   ``connect``, no second lookup), so there is no window between check and use.

How an explicit manifest relaxes the address check (the only two ways):

* An ``network.allow`` entry that names an address or CIDR (``{host: 10.1.2.3}``) permits that
  address on its ports, whatever range it is in, including metadata. Naming is the permission.
* A ``network.hosts`` override ``{name: address}`` for a name that ``network.allow`` also allows
  permits that one address for that name if its range row is ``relaxable_by_hosts`` (loopback,
  private, unique-local, CGNAT, documentation, benchmarking, this host's own addresses). Metadata,
  link-local, multicast, unspecified, broadcast, reserved and translation prefixes are never
  relaxed by an override; they need an explicit address entry. An address that DNS returns is
  never relaxed, even for an allowed name.

Not done here: HTTP parsing (``proxy.py``), or any notion of a name's reputation.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import replace

from contain._log import LazyLogger
from contain.egress.addresses import IPAddress, classify_address
from contain.egress.policy import Destination, EgressDecision, EgressPolicy, deny

__all__ = ["Lookup", "Resolver", "system_lookup"]

log = LazyLogger(__name__)

Lookup = Callable[[str, int], Awaitable[list[IPAddress]]]


async def system_lookup(name: str, port: int) -> list[IPAddress]:
    """Resolve with the host's resolver (``getaddrinfo`` in the loop's executor)."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    out: list[IPAddress] = []
    for family, _type, _proto, _canon, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            out.append(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
    return out


class Resolver:
    """Turns a ``Destination`` into a ``EgressDecision`` with checked, pinned addresses."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        host_addresses: frozenset[IPAddress] = frozenset(),
        lookup: Lookup = system_lookup,
        timeout_s: float = 5.0,
    ) -> None:
        self.policy = policy
        self.host_addresses = host_addresses
        self.lookup = lookup
        self.timeout_s = timeout_s

    async def decide(self, destination: Destination) -> EgressDecision:
        """The ``decide`` callable the proxy and capture listeners receive. Never raises.

        Any exception inside is a refusal (``egress.internal_error``): fail closed.
        """
        try:
            return await self._decide(destination)
        except Exception as exc:  # fail closed: an error in the decision path denies
            log.exception("egress decision failed for %r", destination)
            return deny(
                "egress.internal_error",
                f"{destination.host}:{destination.port} refused: internal error ({type(exc).__name__})",
                host=destination.host,
                port=destination.port,
            )

    async def _decide(self, destination: Destination) -> EgressDecision:
        first = self.policy.check_target(destination)
        if not first.is_allowed or first.addresses:
            return first
        name, port = first.host, first.port
        override = self.policy.hosts.get(name)
        if override is not None:
            addresses = [override]
        else:
            try:
                addresses = await asyncio.wait_for(self.lookup(name, port), self.timeout_s)
            except (OSError, TimeoutError, UnicodeError) as exc:
                return deny(
                    "egress.resolve_failed",
                    f"{name}:{port} does not resolve ({exc})",
                    host=name,
                    port=port,
                )
        unique = tuple(dict.fromkeys(addresses))
        if not unique:
            return deny(
                "egress.resolve_failed",
                f"{name}:{port} resolved to no address",
                host=name,
                port=port,
            )
        for address in unique:
            refusal = self.check_address(name, port, address, from_hosts=override is not None)
            if refusal is not None:
                return refusal
        return replace(first, addresses=unique)

    def check_address(self, name: str, port: int, address: IPAddress, *, from_hosts: bool) -> EgressDecision | None:
        """Return a refusal if ``address`` may not be dialled for ``name``, else ``None``."""
        row = classify_address(address, host_addresses=self.host_addresses)
        if row is None or self.policy.entry_naming_address(address, port) is not None:
            return None
        if from_hosts and row.relaxable_by_hosts:
            return None
        how = "network.hosts maps it to" if from_hosts else "it resolves to"
        fix = (
            "name the address in network.allow"
            if from_hosts or not row.relaxable_by_hosts
            else f"name the address in network.allow, or map {name} to it in network.hosts"
        )
        return deny(
            row.rule_id,
            f"{name}:{port} refused: {how} {address}, {row.why} ({row.name}); to permit it, {fix}",
            host=name,
            port=port,
        )
