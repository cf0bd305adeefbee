"""NetworkPolicies: the sandbox reaches only its proxy, on one port; the proxy only DNS and the allowed ports."""

from __future__ import annotations

from contain.boundary.plain import plain_boundary
from contain.k8s.names import plan_names
from contain.k8s.network import plan_proxy_policy, plan_sandbox_policy
from k8s.conftest import NETWORKED, OFFLINE, make_boundary

SANDBOX = {"app.kubernetes.io/name": "inv-1", "app.kubernetes.io/component": "sandbox"}
PROXY = {"app.kubernetes.io/name": "inv-1", "app.kubernetes.io/component": "egress-proxy"}


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
            "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
            "ports": [{"protocol": "TCP", "port": 80}, {"protocol": "TCP", "port": 443}],
        },
    ]


def test_policies_of_two_tasks_never_select_each_others_pods() -> None:
    first, second = make_boundary(NETWORKED), make_boundary(NETWORKED, task="inv-2")
    a = plan_sandbox_policy(plain_boundary(first), _names(first))
    b = plan_sandbox_policy(plain_boundary(second), _names(second))
    assert a["spec"]["podSelector"] != b["spec"]["podSelector"]
    assert a["spec"]["egress"][0]["to"] != b["spec"]["egress"][0]["to"]
