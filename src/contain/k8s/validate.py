"""Schema checks of a render: every object against the Kubernetes OpenAPI schema, the seccomp
profile against the shape runtimes read.

Objects are checked with ``kubernetes-validate`` (the ``k8s`` extra, pinned in pyproject.toml),
which bundles the JSON Schemas generated from Kubernetes' OpenAPI document per release. Strict
mode is used: a field the schema does not know is an error, so a typo cannot become a silently
ignored setting (the API server would drop it with only a warning).

The seccomp profile is checked against ``SECCOMP_PROFILE_SCHEMA``: the fields of the OCI runtime
spec's ``LinuxSeccomp`` that containerd and CRI-O read from a Localhost profile (default action,
architectures, and syscall entries with names, action, errno and argument comparisons). No
additional fields are allowed, so a renamed key fails here instead of being ignored on the node.

What this does NOT check: admission (Pod Security admission, policy engines), defaulting, or
anything a live API server or kubelet decides (that the RuntimeClass exists, that the node
accepts the profile). No API server runs here; docs/k8s.md says what is not tested live.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contain.errors import RenderRefused
from contain.k8s.render import K8sRender

__all__ = ["K8S_SCHEMA_VERSION", "SECCOMP_PROFILE_SCHEMA", "validate_render", "validate_seccomp_profile"]

# The newest Kubernetes release whose schemas kubernetes-validate==1.37.0 bundles.
K8S_SCHEMA_VERSION = "1.37.0"

_ACTIONS = [
    "SCMP_ACT_KILL",
    "SCMP_ACT_KILL_PROCESS",
    "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_TRAP",
    "SCMP_ACT_ERRNO",
    "SCMP_ACT_TRACE",
    "SCMP_ACT_ALLOW",
    "SCMP_ACT_LOG",
    "SCMP_ACT_NOTIFY",
]
_OPS = [
    "SCMP_CMP_NE",
    "SCMP_CMP_LT",
    "SCMP_CMP_LE",
    "SCMP_CMP_EQ",
    "SCMP_CMP_GE",
    "SCMP_CMP_GT",
    "SCMP_CMP_MASKED_EQ",
]
_U64 = {"type": "integer", "minimum": 0, "maximum": 2**64 - 1}

SECCOMP_PROFILE_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["defaultAction", "architectures", "syscalls"],
    "properties": {
        "defaultAction": {"enum": _ACTIONS},
        "architectures": {
            "type": "array",
            "minItems": 1,
            "items": {"enum": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"]},
        },
        "syscalls": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["names", "action"],
                "properties": {
                    "names": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"type": "string", "pattern": "^[a-z0-9_]+$"},
                    },
                    "action": {"enum": _ACTIONS},
                    "errnoRet": {"type": "integer", "minimum": 1, "maximum": 4095},
                    "args": {
                        "type": "array",
                        "maxItems": 6,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["index", "value", "op"],
                            "properties": {
                                "index": {"type": "integer", "minimum": 0, "maximum": 5},
                                "value": _U64,
                                "valueTwo": _U64,
                                "op": {"enum": _OPS},
                            },
                        },
                    },
                },
            },
        },
    },
}


def validate_seccomp_profile(profile: Mapping[str, Any]) -> None:
    """Check a Localhost profile's shape.

    Raises:
        RenderRefused: the profile does not have the shape runtimes read.
    """
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(SECCOMP_PROFILE_SCHEMA).iter_errors(profile), key=str)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path)
        raise RenderRefused(
            f"the seccomp profile fails its shape check at {where or '(top)'}: {errors[0].message}",
            "report this as a bug in contain (the profile is rendered from SECCOMP_RULES)",
            rule_id="k8s.seccomp_shape",
        )


def validate_render(render: K8sRender, *, version: str = K8S_SCHEMA_VERSION) -> None:
    """Check every object against the Kubernetes schema of ``version`` and every profile's shape.

    Raises:
        RenderRefused: ``kubernetes-validate`` is not installed, or an object or profile fails.
    """
    import json

    try:
        import kubernetes_validate  # type: ignore[import-untyped]
    except ImportError as exc:
        raise RenderRefused(
            "--validate needs the kubernetes-validate package", "pip install 'contain[k8s]'", rule_id="k8s.validate"
        ) from exc
    for obj in render.objects:
        try:
            kubernetes_validate.validate(dict(obj.body), version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            raise RenderRefused(
                f"{obj.file_name} fails the Kubernetes {version} schema at {where or '(top)'}: {exc.message}",
                "report this as a bug in contain",
                rule_id="k8s.schema",
            ) from exc
    for node_file in render.files:
        validate_seccomp_profile(json.loads(node_file.text))
