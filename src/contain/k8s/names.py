"""Object names, labels and selectors of one rendered boundary: ``K8sNames``, a pure value.

Every rendered object derives its name from one stem (``kubernetes.name`` or, when that is unset,
the task name) so that the NetworkPolicies, the Service and the Pod agree by construction. The
stem must already be a DNS-1035 label short enough for the longest suffix: a task name that is
not (``Invoices_2026``, an upper-case letter, a dot) is refused with the fix, never rewritten,
because two rewritten names could collide and share a proxy and its allow list.

Labels are what the NetworkPolicies select on. They name the stem and the component, so a
policy written for one task never selects another task's Pods. They do not stop someone who may
create Pods in the namespace from creating a Pod with the same labels: keep the namespace to
contain's objects (docs/k8s.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from contain.boundary.kubernetes import DNS1035_LABEL, NAME_MAX, Kubernetes
from contain.errors import RenderRefused

__all__ = ["LABEL_COMPONENT", "LABEL_MANAGED_BY", "LABEL_NAME", "K8sNames", "plan_names"]

# The recommended labels of https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/
LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"


@dataclass(frozen=True)
class K8sNames:
    """Names of every object rendered for one boundary."""

    stem: str
    namespace: str

    @property
    def pod(self) -> str:
        return self.stem

    @property
    def proxy(self) -> str:
        """Deployment, Service and ConfigMap of the egress proxy (one name, three kinds)."""
        return f"{self.stem}-egress-proxy"

    @property
    def sandbox_policy(self) -> str:
        return f"{self.stem}-sandbox"

    @property
    def proxy_policy(self) -> str:
        return f"{self.stem}-egress-proxy"

    @property
    def proxy_env_stem(self) -> str:
        """The prefix kubelet gives the proxy Service's variables (``<NAME>_SERVICE_HOST``)."""
        return self.proxy.upper().replace("-", "_")

    def labels(self, component: str) -> dict[str, str]:
        """Labels of one component's Pods and objects (``sandbox`` or ``egress-proxy``)."""
        return {LABEL_NAME: self.stem, LABEL_COMPONENT: component, LABEL_MANAGED_BY: "contain"}

    def selector(self, component: str) -> dict[str, str]:
        """The labels a selector matches for one component (managed-by is not needed to tell them apart)."""
        return {LABEL_NAME: self.stem, LABEL_COMPONENT: component}


def plan_names(task: str, settings: Kubernetes) -> K8sNames:
    """The names for ``task`` under ``settings``.

    Raises:
        RenderRefused: no ``kubernetes.name`` and the task name is not a DNS-1035 label of at most
            ``NAME_MAX`` characters.
    """
    stem = settings.name or task
    if settings.name is None and (len(stem) > NAME_MAX or not DNS1035_LABEL.fullmatch(stem)):
        raise RenderRefused(
            f"task name {stem!r} is not usable as a Kubernetes name (a DNS-1035 label of at most {NAME_MAX} "
            "characters: lower-case letters, digits and '-', starting with a letter)",
            "set kubernetes.name to such a name, e.g. invoices-2026",
            rule_id="k8s.name",
        )
    return K8sNames(stem=stem, namespace=settings.namespace)
