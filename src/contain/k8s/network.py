"""The NetworkPolicies: the sandbox Pod reaches only its egress proxy; the proxy only DNS and the
allowed ports; pure.

Sandbox policy (always rendered): ``policyTypes: [Ingress, Egress]`` with no ingress rule and, when
the boundary allows any destination, one egress rule: TCP ``PROXY_PORT`` to the Pods of this
task's proxy Deployment. Nothing else, DNS included: the proxy resolves names itself, the Pod
has no resolver (``dnsPolicy: None``, see ``pod.py``), and the cluster resolver forwards queries
upstream, so allowing it would open a channel that carries data in names. The proxy address
comes from the Service's environment variables, not from DNS.

Proxy policy (rendered with the proxy): ingress only from this task's sandbox Pod on TCP
``PROXY_PORT``; egress to kube-dns on port 53 (UDP and TCP; the proxy resolves names there) and
to any address on the ports ``network.allow`` lists, *except* every ``SPECIAL_RANGES`` row
(metadata, loopback, link-local, private, CGNAT, ...) that no allow entry names. The proxy
refuses those addresses itself (``egress/addresses.py``); the policy repeats the refusal so a bug
in the proxy still cannot reach Pods, Services or the metadata service. A range the manifest
names on purpose (``{host: 10.1.2.3}``) is left out of the except list, as the proxy allows it.

What this does NOT do: enforce anything by itself. A NetworkPolicy is enforced by the cluster's
network plugin (Calico, Cilium, ...); with one that ignores policies (flannel alone, kubenet) the
Pod has an open network. No API server runs here, so enforcement is not tested (docs/k8s.md).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from contain.boundary.plain import PlainBoundary
from contain.egress.addresses import SPECIAL_RANGES
from contain.k8s.names import K8sNames
from contain.k8s.pod import PROXY_PORT

__all__ = ["DNS_NAMESPACE", "DNS_POD_LABELS", "plan_excepted_ranges", "plan_proxy_policy", "plan_sandbox_policy"]

# Where the cluster resolver runs in kubeadm, kind, GKE, EKS and AKS: kube-system, k8s-app=kube-dns
# (CoreDNS keeps the kube-dns label for compatibility). Namespaces carry their own name as the
# label kubernetes.io/metadata.name since Kubernetes 1.21.
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}


def plan_sandbox_policy(boundary: PlainBoundary, names: K8sNames) -> dict[str, Any]:
    """Deny all ingress and egress of the sandbox Pod except TCP to its proxy (with network)."""
    egress: list[dict[str, Any]] = []
    if boundary.allows_network:
        egress.append(
            {
                "to": [{"podSelector": {"matchLabels": names.selector("egress-proxy")}}],
                "ports": [{"protocol": "TCP", "port": PROXY_PORT}],
            }
        )
    return _network_policy(names, name=names.sandbox_policy, component="sandbox", ingress=[], egress=egress)


def plan_excepted_ranges(boundary: PlainBoundary, *, version: int) -> list[str]:
    """``SPECIAL_RANGES`` of one IP version that no ``network.allow`` entry overlaps, in table order."""
    named = []
    for rule in boundary.network.allow:
        try:
            named.append(ipaddress.ip_network(rule.host))
        except ValueError:
            continue  # a name: its addresses are checked by the proxy at connect time
    out: list[str] = []
    for row in SPECIAL_RANGES:
        net = row.network
        if net.version != version or any(n.version == version and n.overlaps(net) for n in named):
            continue
        if str(net) not in out:
            out.append(str(net))
    return out


def plan_proxy_policy(boundary: PlainBoundary, names: K8sNames) -> dict[str, Any]:
    """Ingress from the sandbox Pod only; egress to kube-dns and to the allowed ports."""
    ports = sorted({port for rule in boundary.network.allow for port in rule.ports})
    dns_peer = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": DNS_NAMESPACE}},
        "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
    }
    anywhere = [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": plan_excepted_ranges(boundary, version=4)}},
        {"ipBlock": {"cidr": "::/0", "except": plan_excepted_ranges(boundary, version=6)}},
    ]
    ingress = [
        {
            "from": [{"podSelector": {"matchLabels": names.selector("sandbox")}}],
            "ports": [{"protocol": "TCP", "port": PROXY_PORT}],
        }
    ]
    egress = [
        {"to": [dns_peer], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": anywhere, "ports": [{"protocol": "TCP", "port": port} for port in ports]},
    ]
    return _network_policy(names, name=names.proxy_policy, component="egress-proxy", ingress=ingress, egress=egress)


def _network_policy(
    names: K8sNames, *, name: str, component: str, ingress: list[dict[str, Any]], egress: list[dict[str, Any]]
) -> dict[str, Any]:
    """A NetworkPolicy for the Pods of one ``component``, both directions governed (``policyTypes``
    lists Ingress and Egress, so an empty list denies that direction)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": names.namespace, "labels": names.labels(component)},
        "spec": {
            "podSelector": {"matchLabels": names.selector(component)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }
