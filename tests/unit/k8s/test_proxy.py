"""The proxy's ConfigMap, Deployment and Service: the allow list in the manifest format, hardened Pod."""

from __future__ import annotations

import json

from contain.boundary.load import boundary_from_mapping
from contain.boundary.plain import plain_boundary
from contain.cli import _build_parser
from contain.k8s.names import plan_names
from contain.k8s.proxy import (
    CONFIG_KEY,
    PROXY_COMMAND,
    plan_proxy_config,
    plan_proxy_config_map,
    plan_proxy_deployment,
    plan_proxy_service,
)
from k8s.conftest import NETWORKED, PROXY_IMAGE, make_boundary


def test_the_config_map_holds_the_allow_list_as_a_manifest_the_proxy_loads() -> None:
    boundary = make_boundary(NETWORKED)
    plain = plain_boundary(boundary)
    config_map = plan_proxy_config_map(plain, plan_names("inv-1", boundary.kubernetes))  # type: ignore[arg-type]
    assert config_map["immutable"] is True
    config = json.loads(config_map["data"][CONFIG_KEY])
    assert config == {
        "version": 1,
        "task": "inv-1",
        "network": {"allow": [{"host": "api.example.com", "ports": [443]}, {"host": "*.pypi.org", "ports": [80, 443]}]},
    }
    # the proxy reads it with the manifest validator; its network section is the boundary's, exactly
    assert plain_boundary(boundary_from_mapping(config)).network == plain.network


def test_the_proxy_pod_is_hardened_like_the_sandbox_but_runs_the_runtime_default_profile() -> None:
    boundary = make_boundary(NETWORKED)
    assert boundary.kubernetes is not None
    deployment = plan_proxy_deployment(boundary.kubernetes, plan_names("inv-1", boundary.kubernetes), image=PROXY_IMAGE)
    spec = deployment["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
    }
    assert container["image"] == PROXY_IMAGE
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]} == {
        "/etc/contain": True,
        "/tmp": False,
    }
    assert set(deployment["spec"]["selector"]["matchLabels"].items()) <= set(
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_proxy_command_is_one_contain_itself_accepts() -> None:
    name, *argv = PROXY_COMMAND
    assert name == "contain"
    args = _build_parser(argv[0]).parse_args(argv)
    assert (args.command, args.config, args.listen) == ("egress-proxy", "/etc/contain/egress.json", "0.0.0.0:3128")


def test_the_service_name_gives_the_variables_the_sandbox_env_expands() -> None:
    names = plan_names("inv-1", make_boundary(NETWORKED).kubernetes)  # type: ignore[arg-type]
    service = plan_proxy_service(names)
    assert service["metadata"]["name"] == "inv-1-egress-proxy"
    assert names.proxy_env_stem == "INV_1_EGRESS_PROXY"  # kubelet: upper case, '-' -> '_'
    assert service["spec"]["ports"] == [{"name": "proxy", "port": 3128, "targetPort": "proxy", "protocol": "TCP"}]
    assert plan_proxy_config(plain_boundary(make_boundary(NETWORKED)))["task"] == "inv-1"
