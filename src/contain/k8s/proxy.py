"""The egress proxy's ConfigMap, Deployment and Service for one boundary; pure.

The proxy is contain's own (``contain egress-proxy``, ``contain.egress.standalone``): the same
``EgressPolicy``, ``Resolver`` and ``ProxyServer`` that serve ``contain run``, listening on the
Pod's address instead of inside a sandbox's netns. Its configuration is a boundary manifest
holding only ``network.allow`` (``plan_proxy_config``), read with ``load_boundary`` like any
manifest, so the allow list keeps one format and one validator.

Hardening: the same Pod and container security contexts as the sandbox (non-root, read-only
root, no privilege escalation, all capabilities dropped, no service-account token, no service
links) and the same RuntimeClass, because the proxy parses HTTP the workload wrote. Two
differences, on purpose: the proxy runs under ``RuntimeDefault`` seccomp, not contain's table
(the table is written for untrusted workloads and refuses socket families glibc's resolver may
use), and it uses the cluster's DNS (it resolves the allowed names, then checks every address).

No readiness or liveness probe: a TCP probe is a connection without a request, which the proxy
records as a refusal (``egress.request``) every period (seen in tests/integration/test_k8s_proxy.py),
and the NetworkPolicy admits only the sandbox Pod anyway.

Not enforced here: the proxy image is a parameter; whether it really runs this contain is the
image builder's business (pin it by digest). One replica: a proxy restart drops open tunnels.
"""

from __future__ import annotations

import json
from typing import Any

from contain.boundary.kubernetes import Kubernetes
from contain.boundary.plain import PlainBoundary
from contain.k8s.names import K8sNames
from contain.k8s.pod import PROXY_PORT, container_security_context, pod_security_context

__all__ = [
    "CONFIG_KEY",
    "CONFIG_MOUNT",
    "PROXY_COMMAND",
    "PROXY_RESOURCES",
    "plan_proxy_config",
    "plan_proxy_config_map",
    "plan_proxy_deployment",
    "plan_proxy_service",
]

CONFIG_KEY = "egress.json"
CONFIG_MOUNT = "/etc/contain"
# The command the proxy image runs; tests parse it with contain's own CLI parser.
PROXY_COMMAND = (
    "contain",
    "egress-proxy",
    "--config",
    f"{CONFIG_MOUNT}/{CONFIG_KEY}",
    "--listen",
    f"0.0.0.0:{PROXY_PORT}",
)
# At most MAX_OPEN_CONNECTIONS (512) connections at ~100 KiB each (egress/session.py) is 64 MiB
# of buffers; the interpreter and the event log take the rest.
PROXY_RESOURCES = {"cpu": "500m", "memory": str(256 * 1024**2), "ephemeral-storage": str(64 * 1024**2)}


def plan_proxy_config(boundary: PlainBoundary) -> dict[str, Any]:
    """The proxy's configuration: a manifest with the task name and ``network.allow`` only."""
    return {
        "version": 1,
        "task": boundary.task,
        "network": {"allow": [{"host": rule.host, "ports": list(rule.ports)} for rule in boundary.network.allow]},
    }


def plan_proxy_config_map(boundary: PlainBoundary, names: K8sNames) -> dict[str, Any]:
    """The ConfigMap holding ``plan_proxy_config`` as ``egress.json``; immutable."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": names.proxy, "namespace": names.namespace, "labels": names.labels("egress-proxy")},
        "immutable": True,  # a changed allow list is a new render, not an edit in place
        "data": {CONFIG_KEY: json.dumps(plan_proxy_config(boundary), indent=2, sort_keys=True) + "\n"},
    }


def plan_proxy_deployment(settings: Kubernetes, names: K8sNames, *, image: str) -> dict[str, Any]:
    """One proxy replica, hardened like the sandbox Pod (see the module docstring)."""
    labels = names.labels("egress-proxy")
    container = {
        "name": "egress-proxy",
        "image": image,
        "command": list(PROXY_COMMAND),
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],  # the root file system is read-only
        "ports": [{"name": "proxy", "containerPort": PROXY_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(PROXY_RESOURCES), "limits": dict(PROXY_RESOURCES)},
        "securityContext": container_security_context(),
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names.proxy, "namespace": names.namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": names.selector("egress-proxy")},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "runtimeClassName": settings.runtime_class_object,
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "hostNetwork": False,
                    "hostPID": False,
                    "hostIPC": False,
                    "securityContext": pod_security_context(settings, {"type": "RuntimeDefault"}),
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": names.proxy, "defaultMode": 0o444}},
                        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": str(16 * 1024**2)}},
                    ],
                },
            },
        },
    }


def plan_proxy_service(names: K8sNames) -> dict[str, Any]:
    """A ClusterIP Service in front of the proxy; its variables give the sandbox the proxy URL."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.proxy, "namespace": names.namespace, "labels": names.labels("egress-proxy")},
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector("egress-proxy"),
            "ports": [{"name": "proxy", "port": PROXY_PORT, "targetPort": "proxy", "protocol": "TCP"}],
        },
    }
