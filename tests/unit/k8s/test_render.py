"""The whole render: apply order, schema validity for every runtime class and seccomp mode, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from contain.boundary.kubernetes import Kubernetes
from contain.boundary.load import load_boundary
from contain.errors import BoundaryInvalid, RenderRefused
from contain.k8s.render import NODE_REQUIREMENTS, apply_overrides, render_boundary
from contain.k8s.validate import K8S_SCHEMA_VERSION, SECCOMP_PROFILE_SCHEMA
from contain.runtime.container.oci_seccomp import render_oci_seccomp
from contain.runtime.seccomp_rules import SECCOMP_RULES
from k8s.conftest import NETWORKED, OFFLINE, make_boundary

CASES = [
    pytest.param(base, runtime_class, seccomp, id=f"{name}-{runtime_class}-{seccomp}")
    for name, base in (("networked", NETWORKED), ("offline", OFFLINE))
    for runtime_class in ("gvisor", "kata")
    for seccomp in ("localhost", "runtime-default")
]


def _render(base: dict[str, Any], **overrides: Any):  # type: ignore[no-untyped-def]
    return render_boundary(make_boundary(base), overrides=overrides, command=("python3", "-V"))


@pytest.mark.parametrize(("base", "runtime_class", "seccomp"), CASES)
def test_every_rendered_object_passes_the_pinned_kubernetes_schema_strictly(
    base: dict[str, Any], runtime_class: str, seccomp: str
) -> None:
    render = _render(base, runtime_class=runtime_class, seccomp=seccomp)
    for obj in render.objects:
        assert kubernetes_validate.validate(dict(obj.body), K8S_SCHEMA_VERSION, strict=True) == "1.37"
    kinds = [obj.body["kind"] for obj in render.objects]
    if base is NETWORKED:
        assert kinds == ["NetworkPolicy", "NetworkPolicy", "ConfigMap", "Service", "Deployment", "Pod"]
    else:
        assert kinds == ["NetworkPolicy", "Pod"]  # no network: no proxy at all
    pod = render.objects[-1].body
    assert pod["spec"]["runtimeClassName"] == runtime_class
    if seccomp == "localhost":
        (profile_file,) = render.files
        profile = json.loads(profile_file.text)
        jsonschema.Draft202012Validator(SECCOMP_PROFILE_SCHEMA).validate(profile)
        assert pod["spec"]["securityContext"]["seccompProfile"] == {
            "type": "Localhost",
            "localhostProfile": "contain/" + profile_file.relative_path.removeprefix("seccomp/"),
        }
    else:
        assert render.files == ()
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_the_schema_check_is_strict_enough_to_catch_a_misspelled_field() -> None:
    pod = dict(_render(OFFLINE).objects[-1].body)
    pod["spec"] = {**pod["spec"], "automountServiceAcountToken": False}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_SCHEMA_VERSION, strict=True)


def test_the_localhost_profile_is_the_oci_rendering_of_the_one_rule_table() -> None:
    (profile_file,) = _render(OFFLINE).files
    assert json.loads(profile_file.text) == render_oci_seccomp(SECCOMP_RULES, arch="x86_64")


def test_an_aarch64_render_has_the_aarch64_profile_and_node_selector() -> None:
    data = {**OFFLINE, "kubernetes": {**OFFLINE["kubernetes"], "arch": "aarch64"}}
    render = render_boundary(make_boundary(data))
    (profile_file,) = render.files
    assert json.loads(profile_file.text)["architectures"] == ["SCMP_ARCH_AARCH64"]
    assert render.objects[-1].body["spec"]["nodeSelector"]["kubernetes.io/arch"] == "arm64"


def test_node_requirements_name_the_runtimes_own_seccomp_switch() -> None:
    gvisor = _render(OFFLINE).requirements
    kata = _render(OFFLINE, runtime_class="kata", seccomp="runtime-default").requirements
    assert any("oci-seccomp" in line for line in gvisor) and not any("oci-seccomp" in line for line in kata)
    assert any("disable_guest_seccomp" in line for line in kata)
    assert any("/var/lib/kubelet/seccomp" in line for line in gvisor)
    assert not any("/var/lib/kubelet/seccomp" in line for line in kata)
    assert {row.applies for row in NODE_REQUIREMENTS} == {"always", "localhost", "gvisor", "kata"}


def test_a_boundary_with_refusals_names_every_problem_at_once() -> None:
    data = {**NETWORKED, "env": {"HTTPS_PROXY": "http://x.test"}, "task": "Bad_Name"}
    with pytest.raises(RenderRefused) as caught:
        render_boundary(make_boundary(data))
    assert "K8S-011" in caught.value.cause and "K8S-012" in caught.value.cause
    assert "2 problem(s)" in caught.value.cause
    assert caught.value.rule_id == "K8S-011"


@pytest.mark.parametrize(
    ("base", "section", "flag"),
    [(OFFLINE, "image", "--image"), (NETWORKED, "proxy_image", "--proxy-image")],
)
def test_a_missing_image_is_refused_with_the_flag_that_supplies_it(
    base: dict[str, Any], section: str, flag: str
) -> None:
    data = {**base, "kubernetes": {k: v for k, v in base["kubernetes"].items() if k != section}}
    with pytest.raises(RenderRefused) as caught:
        render_boundary(make_boundary(data))
    assert flag in caught.value.fix


def test_an_offline_boundary_needs_no_proxy_image() -> None:
    assert "proxy_image" not in OFFLINE["kubernetes"]
    assert _render(OFFLINE).objects


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("namespace", "Kube-System"),
        ("namespace", "a/b"),
        ("namespace", "x" * 64),
        ("namespace", "ns\nkind: Secret"),
        ("runtime_class", "runc"),
        ("seccomp", "unconfined"),
        ("image", "registry.test/x y"),
        ("image", "x\x1b[2J"),
    ],
)
def test_a_hostile_override_is_refused_as_an_invalid_setting(key: str, value: str) -> None:
    with pytest.raises(BoundaryInvalid) as caught:
        apply_overrides(Kubernetes(), {key: value})
    assert f"kubernetes.{key}" in caught.value.cause


def test_overrides_win_over_the_manifest_and_none_keeps_it() -> None:
    settings = Kubernetes(namespace="agents", runtime_class="kata")  # type: ignore[arg-type]
    merged = apply_overrides(settings, {"namespace": "other", "runtime_class": None})
    assert (merged.namespace, merged.runtime_class.value) == ("other", "kata")


EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples" / "boundaries").glob("*.yaml"))


@pytest.mark.parametrize("path", [p for p in EXAMPLES if "kubernetes:" in p.read_text()], ids=lambda p: p.name)
def test_every_example_with_a_kubernetes_section_renders_schema_valid(path: Path) -> None:
    render = render_boundary(load_boundary(path))
    for obj in render.objects:
        kubernetes_validate.validate(dict(obj.body), K8S_SCHEMA_VERSION, strict=True)
    for node_file in render.files:
        jsonschema.Draft202012Validator(SECCOMP_PROFILE_SCHEMA).validate(json.loads(node_file.text))


def _pod_specs(render) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    specs = []
    for obj in render.objects:
        if obj.body["kind"] == "Pod":
            specs.append(obj.body["spec"])
        elif obj.body["kind"] == "Deployment":
            specs.append(obj.body["spec"]["template"]["spec"])
    return specs


# The "restricted" Pod Security Standard (kubernetes.io/docs/concepts/security/pod-security-standards),
# one row per control, checked on every Pod spec the render writes (sandbox and proxy).
RESTRICTED_CONTROLS = {
    "host namespaces": lambda spec, c: not (spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC")),
    "privileged": lambda spec, c: c["securityContext"].get("privileged") is False,
    "capabilities": lambda spec, c: c["securityContext"]["capabilities"] == {"drop": ["ALL"]},
    "volume types": lambda spec, c: all(
        set(v) - {"name"} <= {"emptyDir", "configMap", "persistentVolumeClaim"} for v in spec["volumes"]
    ),
    "privilege escalation": lambda spec, c: c["securityContext"]["allowPrivilegeEscalation"] is False,
    "non-root": lambda spec, c: (
        spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    ),
    "seccomp": lambda spec, c: spec["securityContext"]["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost"),
    "no host ports": lambda spec, c: all("hostPort" not in p for p in c.get("ports", [])),
}


@pytest.mark.parametrize(("base", "runtime_class", "seccomp"), CASES)
def test_every_pod_spec_meets_the_restricted_pod_security_standard(
    base: dict[str, Any], runtime_class: str, seccomp: str
) -> None:
    render = _render(base, runtime_class=runtime_class, seccomp=seccomp)
    specs = _pod_specs(render)
    assert len(specs) == (2 if base is NETWORKED else 1)
    for spec in specs:
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            failed = [name for name, control in RESTRICTED_CONTROLS.items() if not control(spec, container)]
            assert failed == []
