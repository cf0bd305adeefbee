"""The manifest's optional ``kubernetes:`` section: how ``contain k8s render`` renders the boundary.

Only settings the boundary itself cannot carry live here: which RuntimeClass isolates the Pod,
which seccomp profile it gets, the namespace and object name, the two container images, the
non-root uid, and which cluster volume backs each read input. Everything the boundary already
says (files, network, budgets, env) is rendered from the boundary, never restated here.

What is validated: names are DNS-1123 (namespace, object name, RuntimeClass, volume claims and
ConfigMaps) because the API server refuses anything else and a name is also a label value and an
environment-variable stem; images are references without whitespace or control characters;
``run_as_user`` and ``run_as_group`` are never 0. What is NOT validated here: whether the cluster
has that RuntimeClass, image, claim or ConfigMap (no API server is consulted), and whether the
read inputs cover every read rule (``contain.k8s.refusals`` decides that with the whole boundary).
"""

from __future__ import annotations

import posixpath
import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "DNS1035_LABEL",
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "Kubernetes",
    "KubernetesInput",
    "NodeArch",
    "RuntimeClassChoice",
    "SeccompChoice",
]

_STRICT = ConfigDict(extra="forbid", frozen=True)

# Kubernetes' own name grammars (k8s.io/apimachinery/pkg/util/validation): a label is at most 63
# characters, a subdomain at most 253; a DNS-1035 label (Service names) must start with a letter.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# An image reference: registry/path[:tag][@sha256:...]; printable ASCII without whitespace or quotes.
_IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]{0,254}", re.IGNORECASE)
# Longest suffix contain adds to ``name`` ("-egress-proxy"), so every derived name stays a label.
NAME_MAX = 63 - len("-egress-proxy")


class RuntimeClassChoice(StrEnum):
    """Which sandboxing runtime isolates the Pod's kernel view."""

    GVISOR = "gvisor"  # runsc: a user-space kernel (the sentry) answers the workload's syscalls
    KATA = "kata"  # Kata Containers: a lightweight VM with its own guest kernel per Pod


class SeccompChoice(StrEnum):
    """Which seccomp profile the containers run under."""

    LOCALHOST = "localhost"  # contain's SECCOMP_RULES, rendered as a node file (Localhost profile)
    RUNTIME_DEFAULT = "runtime-default"  # the container runtime's own default profile


class NodeArch(StrEnum):
    """The node architecture the Pod is pinned to (and the seccomp profile is rendered for)."""

    X86_64 = "x86_64"
    AARCH64 = "aarch64"


def _check_label(value: str, *, what: str, pattern: re.Pattern[str] = DNS1123_LABEL, limit: int = 63) -> str:
    if len(value) > limit or not pattern.fullmatch(value):
        start = "a lower-case letter" if pattern is DNS1035_LABEL else "a lower-case letter or digit"
        raise ValueError(
            f"{what} {value[:80]!r} is not a Kubernetes name: use at most {limit} lower-case letters, "
            f"digits and '-', starting with {start} and ending with a letter or digit, e.g. invoices-1"
        )
    return value


class KubernetesInput(BaseModel):
    """The cluster volume that backs one read rule; it is always mounted read-only."""

    model_config = _STRICT
    path: str = Field(description="Sandbox path of a files rule with access: read, e.g. /inputs/data.")
    claim: str | None = Field(
        default=None, description="PersistentVolumeClaim to mount read-only at path, e.g. invoices-2026."
    )
    config_map: str | None = Field(default=None, description="ConfigMap to mount read-only at path, e.g. prompts.")

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        if not value.startswith("/") or posixpath.normpath(value) != value or "\x00" in value:
            raise ValueError(f"input path {value[:80]!r} must be the normalised absolute path of a read rule")
        return value

    @field_validator("claim", "config_map")
    @classmethod
    def _check_source(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value)):
            raise ValueError(f"volume source {value[:80]!r} is not a Kubernetes object name (DNS-1123 subdomain)")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> KubernetesInput:
        if (self.claim is None) == (self.config_map is None):
            raise ValueError(f"input {self.path}: name exactly one of claim or config_map")
        return self


class Kubernetes(BaseModel):
    """How ``contain k8s render`` turns this boundary into Kubernetes objects."""

    model_config = _STRICT
    runtime_class: RuntimeClassChoice = Field(
        default=RuntimeClassChoice.GVISOR, description="gvisor | kata: the sandboxing runtime of the Pod."
    )
    runtime_class_name: str | None = Field(
        default=None,
        description="The cluster's RuntimeClass object for that runtime (default: gvisor or kata), e.g. kata-qemu.",
    )
    seccomp: SeccompChoice = Field(
        default=SeccompChoice.LOCALHOST,
        description="localhost (contain's rule table as a node profile) | runtime-default.",
    )
    namespace: str = Field(default="contain", description="Namespace of every rendered object, e.g. agents.")
    name: str | None = Field(
        default=None, description="Object name stem (default: the task name, if it is a DNS-1035 label), e.g. inv-1."
    )
    image: str | None = Field(
        default=None, description="Workload image, ideally pinned by digest, e.g. registry.test/tools@sha256:..."
    )
    proxy_image: str | None = Field(
        default=None, description="Image that runs `contain egress-proxy`, e.g. registry.test/contain:0.1.0."
    )
    run_as_user: int = Field(default=65532, ge=1, le=2**31 - 1, description="Non-root uid of both Pods, e.g. 65532.")
    run_as_group: int = Field(default=65532, ge=1, le=2**31 - 1, description="Non-root gid of both Pods, e.g. 65532.")
    arch: NodeArch = Field(
        default=NodeArch.X86_64, description="x86_64 | aarch64: node architecture (nodeSelector and seccomp)."
    )
    inputs: tuple[KubernetesInput, ...] = Field(
        default=(), description="Cluster volume for each read rule, e.g. [{path: /inputs/data, claim: data}]."
    )

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, value: str) -> str:
        return _check_label(value, what="namespace")

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return _check_label(value, what="name", pattern=DNS1035_LABEL, limit=NAME_MAX)

    @field_validator("runtime_class_name")
    @classmethod
    def _check_runtime_class_name(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value)):
            raise ValueError(f"runtime_class_name {value[:80]!r} is not a Kubernetes object name (DNS-1123 subdomain)")
        return value

    @field_validator("image", "proxy_image")
    @classmethod
    def _check_image(cls, value: str | None) -> str | None:
        if value is not None and not _IMAGE.fullmatch(value):
            raise ValueError(
                f"image {value[:80]!r} is not an image reference: letters, digits and . _ / : @ - only, "
                "e.g. registry.test/tools@sha256:<64 hex>"
            )
        return value

    @field_validator("inputs")
    @classmethod
    def _check_inputs(cls, value: tuple[KubernetesInput, ...]) -> tuple[KubernetesInput, ...]:
        paths = [item.path for item in value]
        for path in paths:
            if paths.count(path) > 1:
                raise ValueError(f"inputs: {path} is listed twice; one volume per read path")
        return value

    @property
    def runtime_class_object(self) -> str:
        """The RuntimeClass object name the Pod names."""
        return self.runtime_class_name or self.runtime_class.value
