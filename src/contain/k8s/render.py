"""``contain k8s render``: a boundary as Kubernetes objects. The orchestrator and the pure plan.

``render_boundary`` is the checklist, in order:

1. Settings: the manifest's ``kubernetes:`` section (or its defaults) with the command line's
   overrides, validated again by the same model (``apply_overrides``).
2. The plain boundary, and every ``RENDER_REFUSALS`` row: any hit refuses the whole render.
3. Names (``plan_names``) and images: both images are required, from the manifest or the flags.
4. Facts: the Localhost seccomp profile, from ``SECCOMP_RULES`` through ``render_oci_seccomp``
   (the OCI runtimes' rendering; it needs libseccomp to resolve the rows for the node arch).
5. ``plan_render``: pure; every object and file as data, in apply order.

Writing is a separate step (``contain.k8s.write``); nothing is written unless all of the above
succeeded. Apply order is the file order: NetworkPolicies first, so the Pod never runs without
its policy; the proxy's Service before the Pod, so kubelet can expand its address into the
Pod's proxy variables.

What this does NOT do: talk to a cluster, check that the RuntimeClass, images, claims or
ConfigMaps exist, or install the seccomp profile on the nodes (``NODE_REQUIREMENTS`` says what
the nodes must provide; docs/k8s.md says what is validated and what is not tested live).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from contain.boundary.kubernetes import Kubernetes, RuntimeClassChoice, SeccompChoice
from contain.boundary.model import Boundary
from contain.boundary.plain import PlainBoundary, plain_boundary
from contain.errors import BoundaryInvalid, RenderRefused
from contain.k8s.names import K8sNames, plan_names
from contain.k8s.network import plan_proxy_policy, plan_sandbox_policy
from contain.k8s.pod import PROFILE_DIR, plan_pod, profile_file_name, seccomp_profile_json
from contain.k8s.proxy import plan_proxy_config_map, plan_proxy_deployment, plan_proxy_service
from contain.k8s.refusals import RENDER_REFUSALS, refusal_hits

__all__ = [
    "NODE_REQUIREMENTS",
    "K8sRender",
    "NodeRequirement",
    "RenderedFile",
    "RenderedObject",
    "apply_overrides",
    "plan_render",
    "render_boundary",
]


@dataclass(frozen=True)
class RenderedObject:
    """One Kubernetes object and the file it is written to (file order = apply order)."""

    file_name: str
    body: Mapping[str, Any]


@dataclass(frozen=True)
class RenderedFile:
    """A file that is not an API object: the seccomp profile, to install on every node."""

    relative_path: str
    text: str


@dataclass(frozen=True)
class NodeRequirement:
    """Something the nodes must provide for the render to mean what it says, with why."""

    applies: str  # "always", a RuntimeClassChoice value, or a SeccompChoice value
    text: str


NODE_REQUIREMENTS: tuple[NodeRequirement, ...] = (
    NodeRequirement(
        "always",
        "a network plugin that enforces NetworkPolicy (Calico, Cilium, ...); without one the Pod's network is open",
    ),
    NodeRequirement(
        "always",
        "apply the files in name order: the NetworkPolicies before the Pod, the proxy Service before the Pod",
    ),
    NodeRequirement(
        SeccompChoice.LOCALHOST.value,
        f"install the profile on every node as /var/lib/kubelet/seccomp/{PROFILE_DIR}/<file>; "
        "a Pod whose profile is missing does not start",
    ),
    NodeRequirement(
        RuntimeClassChoice.GVISOR.value,
        "runsc applies a Pod's seccomp profile (Localhost or RuntimeDefault) only with oci-seccomp "
        "enabled in its runsc.toml (without it the profile is silently ignored: docs/gvisor-notes.md)",
    ),
    NodeRequirement(
        RuntimeClassChoice.KATA.value,
        "Kata applies a Pod's seccomp profile inside the guest only with disable_guest_seccomp = false in its "
        "configuration.toml (the default is true: the profile is ignored)",
    ),
)


@dataclass(frozen=True)
class K8sRender:
    """Everything one render produces."""

    objects: tuple[RenderedObject, ...]
    files: tuple[RenderedFile, ...]
    requirements: tuple[str, ...]


def apply_overrides(settings: Kubernetes | None, overrides: Mapping[str, Any]) -> Kubernetes:
    """The manifest's section with command-line values on top, validated by the same model.

    Raises:
        BoundaryInvalid: an override is not a valid value for its field (a hostile namespace).
    """
    data = {} if settings is None else settings.model_dump(mode="json", exclude_unset=False)
    data.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return Kubernetes.model_validate(data)
    except ValidationError as exc:
        problems = [f"kubernetes.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise BoundaryInvalid(
            "invalid Kubernetes setting:\n  " + "\n  ".join(problems),
            "correct the flag or the manifest's kubernetes: section",
            problems=problems,
        ) from exc


def _requirements(settings: Kubernetes) -> tuple[str, ...]:
    wanted = {"always", settings.runtime_class.value, settings.seccomp.value}
    return tuple(row.text for row in NODE_REQUIREMENTS if row.applies in wanted)


def plan_render(
    boundary: PlainBoundary,
    settings: Kubernetes,
    names: K8sNames,
    *,
    image: str,
    proxy_image: str,
    command: Sequence[str] = (),
    seccomp_profile: Mapping[str, Any] | None,
) -> K8sRender:
    """Every object and file, in apply order; pure.

    Args:
        boundary: the validated boundary; the caller has checked ``RENDER_REFUSALS``.
        settings: the effective ``kubernetes:`` settings.
        names: from ``plan_names``.
        image: the workload image.
        proxy_image: the image that runs ``contain egress-proxy`` (unused without network).
        command: the workload command; empty runs the image's entrypoint.
        seccomp_profile: the OCI seccomp object (``seccomp: localhost``), else None.
    """
    files: list[RenderedFile] = []
    profile_file = None
    if settings.seccomp is SeccompChoice.LOCALHOST:
        assert seccomp_profile is not None
        text = seccomp_profile_json(seccomp_profile)
        profile_file = profile_file_name(names, text)
        files.append(RenderedFile(f"seccomp/{profile_file}", text))
    objects = [
        RenderedObject(f"10-networkpolicy-{names.sandbox_policy}.yaml", plan_sandbox_policy(boundary, names)),
    ]
    if boundary.allows_network:
        objects += [
            RenderedObject(f"11-networkpolicy-{names.proxy_policy}.yaml", plan_proxy_policy(boundary, names)),
            RenderedObject(f"20-configmap-{names.proxy}.yaml", plan_proxy_config_map(boundary, names)),
            RenderedObject(f"30-service-{names.proxy}.yaml", plan_proxy_service(names)),
            RenderedObject(
                f"40-deployment-{names.proxy}.yaml", plan_proxy_deployment(settings, names, image=proxy_image)
            ),
        ]
    pod = plan_pod(boundary, settings, names, image=image, command=command, profile_file=profile_file)
    objects.append(RenderedObject(f"90-pod-{names.pod}.yaml", pod))
    return K8sRender(tuple(objects), tuple(files), _requirements(settings))


def render_boundary(
    boundary: Boundary,
    *,
    overrides: Mapping[str, Any] | None = None,
    command: Sequence[str] = (),
    libseccomp_path: str | None = None,
) -> K8sRender:
    """Render a validated boundary (the checklist in the module docstring).

    Args:
        boundary: from ``load_boundary``.
        overrides: ``Kubernetes`` field -> value from the command line; None values are ignored.
        command: the workload command.
        libseccomp_path: a libseccomp to resolve the profile's rows with (tests).

    Raises:
        BoundaryInvalid: an override is invalid.
        RenderRefused: a ``RENDER_REFUSALS`` row fires, the name or an image is missing or unusable.
        UnsupportedHost: libseccomp cannot resolve the table for the node arch.
    """
    from contain.runtime.container.oci_seccomp import render_oci_seccomp

    settings = apply_overrides(boundary.kubernetes, overrides or {})
    plain = plain_boundary(boundary)
    hits = refusal_hits(plain, settings)
    if hits:
        rows = {rule.id: rule for rule in RENDER_REFUSALS}
        lines = [f"{hit.rule_id} {rows[hit.rule_id].title}: {hit.message} ({rows[hit.rule_id].why})" for hit in hits]
        raise RenderRefused(
            f"the boundary cannot be rendered for Kubernetes without weakening it ({len(hits)} problem(s)):\n"
            + "\n".join(lines),
            "; ".join(dict.fromkeys(rows[hit.rule_id].fix for hit in hits)),
            rule_id=hits[0].rule_id,
        )
    names = plan_names(plain.task, settings)
    image = _required_image(settings.image, what="image", flag="--image")
    proxy_image = settings.proxy_image or ""
    if plain.allows_network:
        proxy_image = _required_image(settings.proxy_image, what="proxy_image", flag="--proxy-image")
    profile = None
    if settings.seccomp is SeccompChoice.LOCALHOST:
        profile = render_oci_seccomp(arch=settings.arch.value, libseccomp_path=libseccomp_path)
    return plan_render(
        plain, settings, names, image=image, proxy_image=proxy_image, command=command, seccomp_profile=profile
    )


def _required_image(value: str | None, *, what: str, flag: str) -> str:
    if value is None:
        raise RenderRefused(
            f"no {what}: the render needs the image to run (no registry is assumed)",
            f"set kubernetes.{what} in the manifest or pass {flag}",
            rule_id=f"k8s.{what}",
        )
    return value
