"""The sandbox Pod, asserted whole: hardening, budget, scratch, inputs, env and seccomp."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from contain.boundary.kubernetes import Kubernetes
from contain.boundary.plain import plain_boundary
from contain.k8s.names import plan_names
from contain.k8s.pod import plan_pod, plan_sandbox_env_list, profile_file_name, quantity_cpu, seccomp_profile_json
from k8s.conftest import IMAGE, NETWORKED, OFFLINE, make_boundary

PROXY_URL = "http://$(INV_1_EGRESS_PROXY_SERVICE_HOST):$(INV_1_EGRESS_PROXY_SERVICE_PORT)"
NO_PROXY = "localhost,127.0.0.1,::1"
BUDGET = {"cpu": "1500m", "memory": str(1024**3), "ephemeral-storage": str(128 * 1024**2)}


def _pod(data: dict[str, Any], *, command: tuple[str, ...] = (), profile: str | None = "p.json") -> dict[str, Any]:
    boundary = make_boundary(data)
    assert boundary.kubernetes is not None
    plain = plain_boundary(boundary)
    names = plan_names(plain.task, boundary.kubernetes)
    return plan_pod(plain, boundary.kubernetes, names, image=IMAGE, command=command, profile_file=profile)


def test_the_networked_pod_is_rendered_exactly() -> None:
    assert _pod(NETWORKED, command=("python3", "-c", "print($(X))")) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "inv-1",
            "namespace": "contain",
            "labels": {
                "app.kubernetes.io/name": "inv-1",
                "app.kubernetes.io/component": "sandbox",
                "app.kubernetes.io/managed-by": "contain",
            },
        },
        "spec": {
            "runtimeClassName": "gvisor",
            "automountServiceAccountToken": False,
            "enableServiceLinks": True,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "shareProcessNamespace": False,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 91,
            "terminationGracePeriodSeconds": 5,
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["127.0.0.1"]},
            "nodeSelector": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"},
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "Localhost", "localhostProfile": "contain/p.json"},
            },
            "containers": [
                {
                    "name": "task",
                    "image": IMAGE,
                    "env": [
                        {"name": "HOME", "value": "/work"},
                        {"name": "LANG", "value": "C.UTF-8"},
                        {"name": "TMPDIR", "value": "/tmp"},
                        {"name": "USER", "value": "sandbox"},
                        {"name": "HTTP_PROXY", "value": PROXY_URL},
                        {"name": "http_proxy", "value": PROXY_URL},
                        {"name": "HTTPS_PROXY", "value": PROXY_URL},
                        {"name": "https_proxy", "value": PROXY_URL},
                        {"name": "ALL_PROXY", "value": PROXY_URL},
                        {"name": "all_proxy", "value": PROXY_URL},
                        {"name": "NO_PROXY", "value": NO_PROXY},
                        {"name": "no_proxy", "value": NO_PROXY},
                        {"name": "npm_config_proxy", "value": PROXY_URL},
                        {"name": "npm_config_https_proxy", "value": PROXY_URL},
                        {"name": "npm_config_noproxy", "value": NO_PROXY},
                        {"name": "PIP_PROXY", "value": PROXY_URL},
                        {"name": "NODE_USE_ENV_PROXY", "value": "1"},
                        {"name": "MODE", "value": "fast $$(HOME)"},
                    ],
                    "workingDir": "/work",
                    "resources": {"requests": BUDGET, "limits": BUDGET},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "privileged": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True,
                    },
                    "volumeMounts": [
                        {"name": "budget", "mountPath": "/tmp", "subPath": "tmp"},
                        {"name": "budget", "mountPath": "/dev/shm", "subPath": "shm"},
                        {"name": "budget", "mountPath": "/work", "subPath": "scratch-0"},
                        {"name": "input-0", "mountPath": "/inputs/data", "readOnly": True},
                        {"name": "input-1", "mountPath": "/inputs/prompts", "readOnly": True},
                    ],
                    "stdin": False,
                    "tty": False,
                    "command": ["python3", "-c", "print($$(X))"],
                }
            ],
            "volumes": [
                {"name": "budget", "emptyDir": {"medium": "Memory", "sizeLimit": str(128 * 1024**2)}},
                {"name": "input-0", "persistentVolumeClaim": {"claimName": "invoices", "readOnly": True}},
                {"name": "input-1", "configMap": {"name": "prompts", "defaultMode": 0o444}},
            ],
        },
    }


def test_a_pod_without_network_gets_no_proxy_variables_and_no_service_links() -> None:
    pod = _pod(OFFLINE)
    spec = pod["spec"]
    assert spec["enableServiceLinks"] is False
    names = [item["name"] for item in spec["containers"][0]["env"]]
    assert names == ["HOME", "LANG", "TMPDIR", "USER"]
    assert "command" not in spec["containers"][0]  # the image's entrypoint runs


def test_every_writable_place_is_a_subpath_of_the_one_size_limited_memory_volume() -> None:
    spec = _pod(
        make_boundary_data(files=[{"path": "/tmp", "access": "scratch"}, {"path": "/out", "access": "scratch"}])
    )["spec"]
    mounts = spec["containers"][0]["volumeMounts"]
    assert [(m["mountPath"], m.get("subPath"), m.get("readOnly", False)) for m in mounts] == [
        ("/dev/shm", "shm", False),
        ("/tmp", "scratch-0", False),
        ("/out", "scratch-1", False),
    ]
    assert spec["volumes"] == [{"name": "budget", "emptyDir": {"medium": "Memory", "sizeLimit": str(256 * 1024**2)}}]
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def make_boundary_data(**changes: Any) -> dict[str, Any]:
    data = {**OFFLINE, **changes}
    return data


def test_runtime_default_seccomp_names_no_profile_file() -> None:
    data = {**OFFLINE, "kubernetes": {**OFFLINE["kubernetes"], "seccomp": "runtime-default"}}
    assert _pod(data, profile=None)["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize(
    ("section", "runtime_class", "arch"),
    [
        ({"runtime_class": "kata"}, "kata", "amd64"),
        ({"runtime_class": "kata", "runtime_class_name": "kata-qemu"}, "kata-qemu", "amd64"),
        ({"arch": "aarch64"}, "gvisor", "arm64"),
    ],
)
def test_runtime_class_and_node_arch_follow_the_settings(
    section: dict[str, str], runtime_class: str, arch: str
) -> None:
    data = {**OFFLINE, "kubernetes": {**OFFLINE["kubernetes"], **section}}
    spec = _pod(data)["spec"]
    assert spec["runtimeClassName"] == runtime_class
    assert spec["nodeSelector"]["kubernetes.io/arch"] == arch


def test_manifest_env_cannot_reference_kubelet_variables() -> None:
    boundary = plain_boundary(make_boundary(OFFLINE, env={"A": "$(KUBERNETES_SERVICE_HOST)", "B": "$$x"}))
    env = plan_sandbox_env_list(boundary, plan_names("offline", Kubernetes()))
    assert env[-2:] == [{"name": "A", "value": "$$(KUBERNETES_SERVICE_HOST)"}, {"name": "B", "value": "$$$$x"}]


def test_cpu_is_rounded_up_to_whole_millicores() -> None:
    assert [quantity_cpu(c) for c in (1.0, 1.5, 0.0001, 2.0005)] == ["1000m", "1500m", "1m", "2001m"]


def test_the_profile_file_name_changes_with_its_content() -> None:
    names = plan_names("inv-1", Kubernetes())
    text = seccomp_profile_json({"defaultAction": "SCMP_ACT_ALLOW", "architectures": [], "syscalls": []})
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    assert profile_file_name(names, text) == f"inv-1-{digest}.json"
    assert profile_file_name(names, text + " ") != profile_file_name(names, text)
