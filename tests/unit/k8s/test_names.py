"""Object names derive from one stem; a stem that is not a Kubernetes name is refused, never rewritten."""

from __future__ import annotations

import pytest

from contain.boundary.kubernetes import Kubernetes
from contain.errors import RenderRefused
from contain.k8s.names import plan_names


def test_every_name_derives_from_the_task_name() -> None:
    names = plan_names("inv-1", Kubernetes(namespace="agents"))
    assert (names.pod, names.proxy, names.sandbox_policy, names.proxy_policy, names.namespace) == (
        "inv-1",
        "inv-1-egress-proxy",
        "inv-1-sandbox",
        "inv-1-egress-proxy",
        "agents",
    )
    assert names.labels("sandbox") == {
        "app.kubernetes.io/name": "inv-1",
        "app.kubernetes.io/component": "sandbox",
        "app.kubernetes.io/managed-by": "contain",
    }


@pytest.mark.parametrize("task", ["Invoices", "inv_1", "inv.1", "1inv", "a" * 51, "inv-"])
def test_a_task_name_that_is_not_a_dns_1035_label_is_refused_with_the_fix(task: str) -> None:
    with pytest.raises(RenderRefused) as caught:
        plan_names(task, Kubernetes())
    assert "kubernetes.name" in caught.value.fix
    assert caught.value.rule_id == "k8s.name"


def test_kubernetes_name_replaces_an_unusable_task_name() -> None:
    assert plan_names("Invoices_2026", Kubernetes(name="invoices-2026")).pod == "invoices-2026"


def test_the_longest_derived_name_stays_a_label() -> None:
    names = plan_names("a" * 50, Kubernetes())
    assert len(names.proxy) == 63
