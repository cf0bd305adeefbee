"""The kubernetes: section: safe defaults, DNS-1123 names, non-root ids, unknown keys refused."""

from __future__ import annotations

from typing import Any

import pytest

from contain.boundary.kubernetes import Kubernetes, KubernetesInput, NodeArch, RuntimeClassChoice, SeccompChoice
from contain.boundary.load import boundary_from_mapping
from contain.errors import BoundaryInvalid


def _manifest(section: dict[str, Any]) -> dict[str, Any]:
    return {"version": 1, "task": "t", "kubernetes": section}


def test_defaults_are_the_strong_side() -> None:
    k8s = Kubernetes()
    assert k8s.runtime_class is RuntimeClassChoice.GVISOR
    assert k8s.seccomp is SeccompChoice.LOCALHOST
    assert k8s.run_as_user != 0 and k8s.run_as_group != 0
    assert (k8s.namespace, k8s.arch, k8s.inputs) == ("contain", NodeArch.X86_64, ())
    assert k8s.runtime_class_object == "gvisor"


def test_a_manifest_without_the_section_has_none() -> None:
    assert boundary_from_mapping({"version": 1}).kubernetes is None


@pytest.mark.parametrize(
    "section",
    [
        {"runtime_clas": "gvisor"},
        {"runtime_class": "runc"},
        {"runtime_class": "kata", "privileged": True},
        {"seccomp": "unconfined"},
        {"run_as_user": 0},
        {"run_as_group": 0},
        {"namespace": "Default"},
        {"namespace": "ns.with.dots"},
        {"namespace": "-ns"},
        {"namespace": "a" * 64},
        {"name": "9lives"},  # Service names must start with a letter
        {"name": "a" * 51},
        {"runtime_class_name": "Kata_QEMU"},
        {"image": "reg.test/a b"},
        {"proxy_image": "reg.test/a\nb"},
        {"arch": "i386"},
        {"inputs": [{"path": "/inputs/a"}]},
        {"inputs": [{"path": "/inputs/a", "claim": "a", "config_map": "b"}]},
        {"inputs": [{"path": "/inputs/a", "claim": "../etc"}]},
        {"inputs": [{"path": "/inputs/a", "claim": "a"}, {"path": "/inputs/a", "claim": "b"}]},
        {"inputs": [{"path": "/inputs/a", "claim": "a", "hostPath": "/"}]},
        {"inputs": [{"path": "inputs/a", "claim": "a"}]},
        {"inputs": [{"path": "/inputs/../etc", "claim": "a"}]},
    ],
)
def test_a_bad_section_is_refused_with_its_key(section: dict[str, Any]) -> None:
    with pytest.raises(BoundaryInvalid) as caught:
        boundary_from_mapping(_manifest(section))
    assert "kubernetes" in caught.value.cause


def test_a_full_section_round_trips() -> None:
    section = {
        "runtime_class": "kata",
        "runtime_class_name": "kata-qemu",
        "seccomp": "runtime-default",
        "namespace": "agents",
        "name": "inv-1",
        "image": "registry.test/tools@sha256:" + "0" * 64,
        "proxy_image": "registry.test/contain:0.1.0",
        "run_as_user": 1000,
        "run_as_group": 1000,
        "arch": "aarch64",
        "inputs": [{"path": "/inputs/a", "claim": "a"}, {"path": "/inputs/b", "config_map": "b"}],
    }
    boundary = boundary_from_mapping(_manifest(section))
    assert boundary.kubernetes is not None
    assert boundary.kubernetes.model_dump(mode="json") == {
        **section,
        "inputs": [
            {"path": "/inputs/a", "claim": "a", "config_map": None},
            {"path": "/inputs/b", "claim": None, "config_map": "b"},
        ],
    }
    assert boundary.kubernetes.runtime_class_object == "kata-qemu"
    assert KubernetesInput(path="/x", claim="c").config_map is None
