"""Network destinations a process started here could reach, read from tables, never probed.

Sources: the kernel routing tables (``/proc/net/route``, ``/proc/net/ipv6_route``), listening TCP
sockets (``/proc/net/tcp``, ``/proc/net/tcp6``), resolvers in ``resolv.conf`` and proxy variables.
Whether a cloud metadata address is reachable is answered by longest-prefix match over the
routing table: **no packet is sent to any address**, not even loopback. A route is therefore
"could reach", not "answered": a firewall may still drop the traffic.

``gather_network_facts`` reads the files; ``classify_network`` is pure. Proxy URLs are reported
with their password removed and replaced by a ``redacted_fingerprint``.

Not covered: policy routing (``ip rule``), nftables/iptables, VPN split tunnels beyond what the
main table shows, UDP listeners.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from contain.inventory.items import Group, InventoryItem, Verdict, redacted_fingerprint

__all__ = [
    "METADATA_ADDRESSES",
    "PROXY_VARIABLES",
    "MetadataAddress",
    "NetworkFacts",
    "Route",
    "classify_network",
    "covering_route",
    "gather_network_facts",
    "parse_ipv4_routes",
    "parse_ipv6_routes",
    "parse_listening_tcp",
    "parse_resolv_conf",
    "redact_url",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_RTF_UP = 0x0001
_RTF_GATEWAY = 0x0002
_RTF_REJECT = 0x0200  # route(8): unreachable/prohibit routes
_TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10


@dataclass(frozen=True)
class MetadataAddress:
    """A link-local service that hands out credentials to anything that asks."""

    address: str
    serves: str


METADATA_ADDRESSES: tuple[MetadataAddress, ...] = (
    MetadataAddress("169.254.169.254", "AWS, GCP, Azure and OpenStack instance metadata and role credentials"),
    MetadataAddress("169.254.170.2", "AWS ECS task role credentials"),
    MetadataAddress("fd00:ec2::254", "AWS instance metadata over IPv6"),
    MetadataAddress("100.100.100.200", "Alibaba Cloud instance metadata"),
)
PROXY_VARIABLES: tuple[str, ...] = ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy")


@dataclass(frozen=True)
class Route:
    """One usable route."""

    network: IPNetwork
    gateway: str | None
    interface: str


@dataclass(frozen=True)
class NetworkFacts:
    """What ``classify_network`` needs."""

    routes: tuple[Route, ...]
    resolvers: tuple[str, ...]
    listening: tuple[str, ...]  # "address:port"
    proxies: tuple[tuple[str, str], ...]  # (variable, value); values may hold passwords


def gather_network_facts(
    *, environ: Mapping[str, str], root: Path = Path("/"), proc_root: Path = Path("/proc")
) -> NetworkFacts:
    """Read routing tables, listening sockets, resolv.conf and proxy variables (no packets).

    Args:
        environ: where proxy variables are read.
        root: the file system root holding ``etc/resolv.conf``.
        proc_root: where procfs is mounted.
    """
    net = proc_root / "net"
    routes = parse_ipv4_routes(_read(net / "route")) + parse_ipv6_routes(_read(net / "ipv6_route"))
    listening = parse_listening_tcp(_read(net / "tcp")) + parse_listening_tcp(_read(net / "tcp6"))
    proxies = tuple(
        (name, value) for name, value in sorted(environ.items()) if name.lower() in PROXY_VARIABLES and value
    )
    return NetworkFacts(routes, parse_resolv_conf(_read(root / "etc" / "resolv.conf")), listening, proxies)


def parse_ipv4_routes(text: str) -> tuple[Route, ...]:
    """Parse /proc/net/route (addresses are little-endian hex, as the kernel prints them)."""
    routes: list[Route] = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 8:
            continue
        try:
            flags = int(cols[3], 16)
            dest = _le_ipv4(cols[1])
            gateway = _le_ipv4(cols[2])
            mask = _le_ipv4(cols[7])
            network = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        except ValueError:
            continue
        if not flags & _RTF_UP or flags & _RTF_REJECT:
            continue
        routes.append(Route(network, str(gateway) if flags & _RTF_GATEWAY else None, cols[0]))
    return tuple(routes)


def parse_ipv6_routes(text: str) -> tuple[Route, ...]:
    """Parse /proc/net/ipv6_route, skipping loopback and reject (unreachable) routes."""
    routes: list[Route] = []
    for line in text.splitlines():
        cols = line.split()
        if len(cols) < 10 or cols[9] == "lo":
            continue
        try:
            network = ipaddress.IPv6Network(
                (ipaddress.IPv6Address(bytes.fromhex(cols[0])), int(cols[1], 16)), strict=False
            )
            hop = ipaddress.IPv6Address(bytes.fromhex(cols[4]))
            flags = int(cols[8], 16)
        except ValueError:
            continue
        if not flags & _RTF_UP or flags & _RTF_REJECT or network.is_multicast:
            continue
        routes.append(Route(network, None if hop.is_unspecified else str(hop), cols[9]))
    return tuple(routes)


def parse_listening_tcp(text: str) -> tuple[str, ...]:
    """``address:port`` of every socket in LISTEN state in /proc/net/tcp or tcp6."""
    found: list[str] = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 4 or cols[3] != _TCP_LISTEN:
            continue
        address, _, port = cols[1].partition(":")
        try:
            raw = bytes.fromhex(address)
            # Each 32-bit word is in host (little-endian) order.
            ordered = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            ip = ipaddress.ip_address(ordered)
            text_ip = f"[{ip}]" if ip.version == 6 else str(ip)
            found.append(f"{text_ip}:{int(port, 16)}")
        except ValueError:
            continue
    return tuple(dict.fromkeys(found))


def parse_resolv_conf(text: str) -> tuple[str, ...]:
    """The ``nameserver`` addresses of a resolv.conf."""
    servers: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            servers.append(parts[1])
    return tuple(servers)


def covering_route(routes: tuple[Route, ...], address: str) -> Route | None:
    """The longest-prefix route that would carry a packet to ``address``, or None."""
    ip = ipaddress.ip_address(address)
    matches = [r for r in routes if r.network.version == ip.version and ip in r.network]
    return max(matches, key=lambda r: r.network.prefixlen, default=None)


def redact_url(url: str) -> str:
    """``url`` without its password, query and fragment (all may carry secrets)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable URL>"
    if not parts.scheme or not host:
        return "<unparseable URL>"
    user = f"{parts.username}@" if parts.username else ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"


def classify_network(facts: NetworkFacts) -> tuple[InventoryItem, ...]:
    """Turn network facts into items; pure."""
    items: list[InventoryItem] = []
    for route in facts.routes:
        via = f" via {route.gateway}" if route.gateway else ""
        location = f"{route.network}{via} dev {route.interface}"
        if route.network.prefixlen == 0:
            items.append(
                InventoryItem(
                    Group.NETWORK,
                    "default-route",
                    location,
                    Verdict.BLOCK,
                    "every public address is reachable; a sandbox gets no route, only the egress proxy's allow list",
                )
            )
        else:
            items.append(
                InventoryItem(
                    Group.NETWORK,
                    "route",
                    location,
                    Verdict.BLOCK,
                    "hosts on this network are reachable directly; a sandbox has its own network namespace",
                )
            )
    for meta in METADATA_ADDRESSES:
        cover = covering_route(facts.routes, meta.address)
        state = (
            f"a route covers it ({cover.network} dev {cover.interface})"
            if cover
            else "no route covers it now, but routes change"
        )
        items.append(
            InventoryItem(
                Group.NETWORK,
                "metadata-endpoint",
                meta.address,
                Verdict.BLOCK,
                f"{meta.serves}; {state}; never allow it in a manifest",
            )
        )
    for server in facts.resolvers:
        items.append(
            InventoryItem(
                Group.NETWORK,
                "resolver",
                server,
                Verdict.BLOCK,
                "DNS queries can carry data out; in a sandbox names are resolved by the egress proxy",
            )
        )
    for address in facts.listening:
        items.append(
            InventoryItem(
                Group.NETWORK,
                "listening-tcp",
                address,
                Verdict.BLOCK,
                "a local service any process here can connect to (databases and dev servers often "
                "trust local clients); a sandbox has its own loopback",
            )
        )
    for name, value in facts.proxies:
        if name.lower() == "no_proxy":
            continue
        redacted = redact_url(value)
        has_password = _has_password(value)
        items.append(
            InventoryItem(
                Group.NETWORK,
                "proxy",
                f"${name}={redacted}",
                Verdict.REVIEW,
                "an outbound proxy"
                + (" with a password in the URL" if has_password else "")
                + "; the sandbox's only way out is contain's egress proxy, which may chain to it",
                fingerprint=redacted_fingerprint(value) if has_password else None,
            )
        )
    return tuple(items)


def _has_password(url: str) -> bool:
    try:
        return urlsplit(url).password is not None
    except ValueError:
        return True  # unparseable: assume the worst and fingerprint it


def _le_ipv4(hex_text: str) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(bytes.fromhex(hex_text)[::-1])


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
