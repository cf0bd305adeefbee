"""The sandbox Pod and its Localhost seccomp profile, planned from the boundary; pure.

What the Pod carries, and from where:

| Pod field | value | from |
|---|---|---|
| ``runtimeClassName`` | gvisor / kata (or the named object) | ``kubernetes.runtime_class`` |
| ``automountServiceAccountToken`` | false | always: the API token is an ambient credential |
| ``enableServiceLinks`` | true only with network | kubelet expands the proxy Service's address into HTTP(S)_PROXY |
| ``hostNetwork/hostPID/hostIPC`` | false | always |
| ``restartPolicy`` | Never | a run is one attempt; no restart re-resolves subPaths after the workload ran |
| ``activeDeadlineSeconds`` | ceil(wall_s) | ``resources.wall_s`` |
| ``dnsPolicy: None``, nameserver 127.0.0.1 | no resolver | the proxy resolves names; DNS is an exfiltration channel |
| ``securityContext`` | non-root uid/gid, seccomp | ``kubernetes.run_as_*``, ``kubernetes.seccomp`` |
| container ``securityContext`` | no privilege escalation, read-only root, drop ALL | always |
| ``resources`` | requests = limits (Guaranteed QoS: no swap) | memory_bytes, cpu_cores, disk_bytes |
| ``budget`` emptyDir, ``medium: Memory`` | sizeLimit = disk_bytes | /tmp, /dev/shm, scratch as subPaths |
| read inputs | PVC (readOnly) or ConfigMap (0444), mount readOnly | ``kubernetes.inputs`` |
| ``nodeSelector`` | kubernetes.io/arch | ``kubernetes.arch``: the profile is rendered for it |

Scratch is ONE memory-backed emptyDir with a subPath per place (``runtime.disk_budget
.plan_disk_places``), as ``contain run`` uses one tmpfs: filling /tmp leaves less for /work, the
kernel enforces the size (ENOSPC at the limit, not an eviction some seconds later, which is how
kubelet enforces sizeLimit on a disk-backed emptyDir), and the pages count against the memory
limit, as in ``contain run``. The cost is the same too: scratch use is memory use.

NOT enforced by this Pod (docs/k8s.md lists them): ``cpu_s``, ``pids_max`` (kubelet's
podPidsLimit is per node), ``open_files_max`` and ``output_bytes``; Landlock and contain's
cgroup layer (the RuntimeClass is the isolation). The seccomp profile is enforced only where
the node's runtime applies it: runsc needs ``--oci-seccomp``, Kata needs
``disable_guest_seccomp = false``; the render cannot check either.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from contain.boundary.kinds import FileAccess
from contain.boundary.kubernetes import Kubernetes, NodeArch, SeccompChoice
from contain.boundary.plain import PlainBoundary
from contain.egress.session import plan_sandbox_env
from contain.k8s.names import K8sNames
from contain.runtime.disk_budget import default_scratch_paths, plan_disk_places

__all__ = [
    "BUDGET_VOLUME",
    "PROFILE_DIR",
    "PROXY_PORT",
    "container_security_context",
    "plan_pod",
    "plan_sandbox_env_list",
    "profile_file_name",
    "quantity_cpu",
    "seccomp_profile_json",
]

BUDGET_VOLUME = "budget"
PROXY_PORT = 3128
# Localhost profiles are paths relative to kubelet's seccomp root (/var/lib/kubelet/seccomp).
PROFILE_DIR = "contain"
# kubernetes.io/arch values (GOARCH) for the arches SECCOMP_RULES supports.
_GOARCH = {NodeArch.X86_64: "amd64", NodeArch.AARCH64: "arm64"}
_CONFIG_MAP_MODE = 0o444  # read-only for everyone: the workload's uid does not own the files


def seccomp_profile_json(profile: Mapping[str, Any]) -> str:
    """The profile file's exact bytes (as text): sorted keys, so the name's hash is stable."""
    return json.dumps(profile, indent=2, sort_keys=True) + "\n"


def profile_file_name(names: K8sNames, profile_text: str) -> str:
    """``<stem>-<sha256 prefix>.json``: a changed table gives a new file, never a silent swap."""
    digest = hashlib.sha256(profile_text.encode("utf-8")).hexdigest()[:16]
    return f"{names.stem}-{digest}.json"


def quantity_cpu(cores: float) -> str:
    """``cpu_cores`` as millicores, rounded up (0.0001 cores is still 1m)."""
    return f"{max(1, math.ceil(cores * 1000))}m"


def container_security_context() -> dict[str, Any]:
    """The container-level hardening both Pods share."""
    return {
        "allowPrivilegeEscalation": False,  # no_new_privs: setuid binaries and file caps do nothing
        "privileged": False,
        "readOnlyRootFilesystem": True,  # writable places are the budget emptyDir only
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
    }


def pod_security_context(settings: Kubernetes, seccomp: dict[str, str]) -> dict[str, Any]:
    """The Pod-level context: non-root ids and the seccomp profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_group,
        "seccompProfile": seccomp,
    }


def _escape_expansion(value: str) -> str:
    # kubelet expands $(VAR) in env values; $$ is its escape. The manifest's text stays literal.
    return value.replace("$", "$$")


def plan_sandbox_env_list(boundary: PlainBoundary, names: K8sNames) -> list[dict[str, str]]:
    """The container's env, in order: base variables, proxy variables (with network), manifest env.

    Nothing comes from the renderer's environment. The proxy URL is built by kubelet from the
    proxy Service's variables (``$(<NAME>_SERVICE_HOST)``), so no DNS lookup is needed; if the Pod
    is created before the Service those stay unexpanded, the URL is unusable and there is no
    network (fail closed).
    """
    env = {"HOME": default_scratch_paths(boundary)[0], "LANG": "C.UTF-8", "TMPDIR": "/tmp", "USER": "sandbox"}
    items = [{"name": k, "value": v} for k, v in env.items()]
    if boundary.allows_network:
        stem = names.proxy_env_stem
        url = f"http://$({stem}_SERVICE_HOST):$({stem}_SERVICE_PORT)"
        items += [{"name": k, "value": v} for k, v in plan_sandbox_env(url).items()]
    items += [{"name": k, "value": _escape_expansion(v)} for k, v in sorted(boundary.env.items())]
    return items


def _volumes(boundary: PlainBoundary, settings: Kubernetes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": BUDGET_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": str(boundary.resources.disk_bytes)}}
    ]
    mounts: list[dict[str, Any]] = [
        {"name": BUDGET_VOLUME, "mountPath": place.sandbox_path, "subPath": place.name}
        for place in plan_disk_places(boundary)
    ]
    sources = {item.path: item for item in settings.inputs}
    reads = [rule.path for rule in boundary.files if rule.access is FileAccess.READ and rule.path in sources]
    for index, path in enumerate(reads):
        item, name = sources[path], f"input-{index}"
        if item.claim is not None:
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": item.claim, "readOnly": True}})
        else:
            volumes.append({"name": name, "configMap": {"name": item.config_map, "defaultMode": _CONFIG_MAP_MODE}})
        mounts.append({"name": name, "mountPath": path, "readOnly": True})
    return volumes, mounts


def plan_pod(
    boundary: PlainBoundary,
    settings: Kubernetes,
    names: K8sNames,
    *,
    image: str,
    command: Sequence[str] = (),
    profile_file: str | None,
) -> dict[str, Any]:
    """The sandbox Pod.

    Args:
        boundary: the validated boundary (refusals already checked by the caller).
        settings: the ``kubernetes:`` section with overrides applied.
        names: from ``plan_names``.
        image: the workload image.
        command: the command to run; empty runs the image's entrypoint.
        profile_file: the Localhost profile's file name (``seccomp: localhost``), else None.
    """
    if settings.seccomp is SeccompChoice.LOCALHOST:
        assert profile_file is not None
        seccomp = {"type": "Localhost", "localhostProfile": f"{PROFILE_DIR}/{profile_file}"}
    else:
        seccomp = {"type": "RuntimeDefault"}
    volumes, mounts = _volumes(boundary, settings)
    res = boundary.resources
    budget = {
        "cpu": quantity_cpu(res.cpu_cores),
        "memory": str(res.memory_bytes),
        "ephemeral-storage": str(res.disk_bytes),
    }
    container: dict[str, Any] = {
        "name": "task",
        "image": image,
        "env": plan_sandbox_env_list(boundary, names),
        "workingDir": default_scratch_paths(boundary)[0],
        "resources": {"requests": dict(budget), "limits": dict(budget)},
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
        "stdin": False,
        "tty": False,
    }
    if command:
        container["command"] = [_escape_expansion(part) for part in command]  # kubelet expands $(VAR) here too
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": names.pod, "namespace": names.namespace, "labels": names.labels("sandbox")},
        "spec": {
            "runtimeClassName": settings.runtime_class_object,
            "automountServiceAccountToken": False,
            "enableServiceLinks": boundary.allows_network,
            "hostNetwork": False,
            "hostPID": False,
            "hostIPC": False,
            "shareProcessNamespace": False,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": max(1, math.ceil(res.wall_s)),
            "terminationGracePeriodSeconds": 5,
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["127.0.0.1"]},  # nothing listens: lookups fail at once
            "nodeSelector": {"kubernetes.io/arch": _GOARCH[settings.arch], "kubernetes.io/os": "linux"},
            "securityContext": pod_security_context(settings, seccomp),
            "containers": [container],
            "volumes": volumes,
        },
    }
