"""NetworkPolicies: the sandbox reaches only its proxy, on one port; the proxy only DNS and the allowed ports."""

from __future__ import annotations

import copy

from contain.boundary.plain import plain_boundary
from contain.egress.addresses import SPECIAL_RANGES
from contain.k8s.names import plan_names
from contain.k8s.network import plan_excepted_ranges, plan_proxy_policy, plan_sandbox_policy
from k8s.conftest import NETWORKED, OFFLINE, make_boundary

SANDBOX = {"app.kubernetes.io/name": "inv-1", "app.kubernetes.io/component": "sandbox"}
PROXY = {"app.kubernetes.io/name": "inv-1", "app.kubernetes.io/component": "egress-proxy"}
# The literal lists, so a change to SPECIAL_RANGES shows up here as a reviewed diff.
EXCEPT_V4 = [
    "169.254.169.254/32",
    "169.254.170.2/32",
    "100.100.100.200/32",
    "0.0.0.0/8",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "224.0.0.0/4",
    "255.255.255.255/32",
    "240.0.0.0/4",
    "192.0.0.0/24",
    "198.18.0.0/15",
    "192.0.2.0/24",
    "198.51.100.0/24",
    "203.0.113.0/24",
]
EXCEPT_V6 = [
    "fd00:ec2::254/128",
    "::/128",
    "::1/128",
    "fe80::/10",
    "fc00::/7",
    "ff00::/8",
    "2001:db8::/32",
    "::/96",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "2002::/16",
    "2001::/32",
    "100::/64",
]


def _names(boundary):  # type: ignore[no-untyped-def]
    return plan_names(boundary.task, boundary.kubernetes)


def test_the_sandbox_policy_allows_only_tcp_to_its_own_proxy_pods() -> None:
    boundary = make_boundary(NETWORKED)
    policy = plan_sandbox_policy(plain_boundary(boundary), _names(boundary))
    assert policy["spec"] == {
        "podSelector": {"matchLabels": SANDBOX},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [],
        "egress": [{"to": [{"podSelector": {"matchLabels": PROXY}}], "ports": [{"protocol": "TCP", "port": 3128}]}],
    }
    assert policy["metadata"]["name"] == "inv-1-sandbox"


def test_without_network_the_sandbox_policy_denies_all_egress_dns_included() -> None:
    boundary = make_boundary(OFFLINE)
    spec = plan_sandbox_policy(plain_boundary(boundary), _names(boundary))["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == [] and spec["ingress"] == []


def test_the_proxy_policy_admits_only_the_sandbox_and_reaches_dns_and_the_allowed_ports() -> None:
    boundary = make_boundary(NETWORKED)
    spec = plan_proxy_policy(plain_boundary(boundary), _names(boundary))["spec"]
    assert spec["podSelector"] == {"matchLabels": PROXY}
    assert spec["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": SANDBOX}}], "ports": [{"protocol": "TCP", "port": 3128}]}
    ]
    assert spec["egress"] == [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {
            "to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": EXCEPT_V4}},
                {"ipBlock": {"cidr": "::/0", "except": EXCEPT_V6}},
            ],
            "ports": [{"protocol": "TCP", "port": 80}, {"protocol": "TCP", "port": 443}],
        },
    ]


def test_the_except_lists_are_every_special_range_row_of_their_version() -> None:
    v4 = [str(r.network) for r in SPECIAL_RANGES if r.network.version == 4]
    v6 = [str(r.network) for r in SPECIAL_RANGES if r.network.version == 6]
    assert list(dict.fromkeys(v4)) == EXCEPT_V4 and list(dict.fromkeys(v6)) == EXCEPT_V6
    assert {"169.254.169.254/32", "10.0.0.0/8", "127.0.0.0/8", "100.64.0.0/10"} <= set(EXCEPT_V4)
    assert {"fd00:ec2::254/128", "fc00::/7", "fe80::/10"} <= set(EXCEPT_V6)


def test_a_range_the_manifest_names_on_purpose_is_not_excepted() -> None:
    data = copy.deepcopy(NETWORKED)
    data["network"]["allow"].append({"host": "10.1.2.3", "ports": [5432]})
    boundary = make_boundary(data)
    excepted = plan_excepted_ranges(plain_boundary(boundary), version=4)
    assert "10.0.0.0/8" not in excepted and "172.16.0.0/12" in excepted


def test_policies_of_two_tasks_never_select_each_others_pods() -> None:
    first, second = make_boundary(NETWORKED), make_boundary(NETWORKED, task="inv-2")
    a = plan_sandbox_policy(plain_boundary(first), _names(first))
    b = plan_sandbox_policy(plain_boundary(second), _names(second))
    assert a["spec"]["podSelector"] != b["spec"]["podSelector"]
    assert a["spec"]["egress"][0]["to"] != b["spec"]["egress"][0]["to"]
