from __future__ import annotations

import ipaddress

from contain.inventory.items import Verdict
from contain.inventory.network import (
    NetworkFacts,
    Route,
    classify_network,
    covering_route,
    parse_ipv4_routes,
    parse_ipv6_routes,
    parse_listening_tcp,
    parse_resolv_conf,
    redact_url,
)

from .conftest import IPV6_ROUTE, ROUTE_WITH_DEFAULT, TCP, TCP6


def test_ipv4_routes_decode_little_endian_hex() -> None:
    routes = parse_ipv4_routes(ROUTE_WITH_DEFAULT)
    assert routes == (
        Route(ipaddress.ip_network("0.0.0.0/0"), "192.0.2.1", "eth0"),
        Route(ipaddress.ip_network("192.0.2.0/24"), None, "eth0"),
    )


def test_ipv6_routes_skip_loopback_and_keep_the_default() -> None:
    routes = parse_ipv6_routes(IPV6_ROUTE)
    assert [str(r.network) for r in routes] == ["fd00::/64", "::/0"]
    assert routes[1].gateway == "fd00::1"


def test_metadata_is_covered_by_the_default_route_and_not_without_it() -> None:
    routes = parse_ipv4_routes(ROUTE_WITH_DEFAULT)
    assert covering_route(routes, "169.254.169.254") == routes[0]
    assert covering_route(routes[1:], "169.254.169.254") is None
    assert covering_route(routes, "192.0.2.7") == routes[1]  # longest prefix wins


def test_metadata_items_say_whether_a_route_exists() -> None:
    facts = NetworkFacts(routes=parse_ipv4_routes(ROUTE_WITH_DEFAULT)[1:], resolvers=(), listening=(), proxies=())
    meta = [i for i in classify_network(facts) if i.location == "169.254.169.254"]
    assert len(meta) == 1 and "no route covers it" in meta[0].reason
    assert meta[0].verdict is Verdict.BLOCK


def test_listening_tcp_sockets_are_decoded() -> None:
    assert parse_listening_tcp(TCP) == ("127.0.0.1:5432",)
    assert parse_listening_tcp(TCP6) == ("[::1]:80",)


def test_resolv_conf_nameservers() -> None:
    assert parse_resolv_conf("# c\nnameserver 1.1.1.1\nsearch x\nnameserver ::1\n") == ("1.1.1.1", "::1")


def test_redact_url_drops_password_query_and_fragment() -> None:
    assert redact_url("postgres://u:pw@h:5432/db?sslkey=secret#x") == "postgres://u@h:5432/db"
    assert redact_url("not a url") == "<unparseable URL>"


def test_proxy_with_password_is_fingerprinted_not_printed() -> None:
    facts = NetworkFacts(
        routes=(),
        resolvers=(),
        listening=(),
        proxies=(("https_proxy", "http://u:topsecret@p.test:3128"), ("no_proxy", "localhost")),
    )
    proxies = [i for i in classify_network(facts) if i.kind == "proxy"]
    assert len(proxies) == 1
    assert proxies[0].location == "$https_proxy=http://u@p.test:3128"
    assert proxies[0].fingerprint and "topsecret" not in repr(proxies[0])
