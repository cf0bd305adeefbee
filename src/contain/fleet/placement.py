"""Which backends a node offers, as Ray custom resources, and which nodes a job may land on (pure).

A node advertises one Ray custom resource per backend it can run, named by ``BACKEND_ROWS``
(``contain_backend_process``, ...), with a count: how many sandboxes of that backend it runs at
once. The count comes from the node's own facts (``NodeFacts``: its ``HostFacts``, the backends
this contain build has, its runtimes, its CPUs), through ``plan_node_resources``; ``contain fleet
resources`` prints that mapping for ``ray start --resources``, and ``contain fleet run --address
local`` passes it for the nodes it starts.

A job goes only to a node whose resources name its backend (``nodes_for_backend``); the node's
pool actor checks again against its own facts before it starts anything (``is_backend_supported``)
and refuses a job its node cannot run. A node without any ``contain_backend_*`` resource gets no
job: the fleet never guesses that a node can sandbox.

What this does not decide: whether the sandbox will start. A backend a node advertises can still
fail for one boundary (a layer the boundary requires is missing); that job fails with the
sandbox's cause.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from contain.host.facts import HostFacts

__all__ = [
    "BACKEND_ROWS",
    "RESOURCE_PREFIX",
    "BackendRow",
    "NodeFacts",
    "gather_node_facts",
    "is_backend_supported",
    "nodes_for_backend",
    "plan_node_resources",
    "resource_name",
]

RESOURCE_PREFIX = "contain_backend_"


@dataclass(frozen=True)
class NodeFacts:
    """What one node offers the fleet; gathered once by the node (``gather_node_facts``)."""

    host: HostFacts
    built_backends: tuple[str, ...]  # backend specs this contain build can start (runtime.sandbox.BACKENDS)
    binaries: Mapping[str, str | None]  # runtime binary name -> its path on this node, or None
    has_kvm: bool
    cpus: int


@dataclass(frozen=True)
class BackendRow:
    """One backend the fleet can place: its resource name, what the node needs, and why."""

    backend: str  # the backend spec a job's manifest resolves to (jobs.backend_of)
    resource: str
    needs: Callable[[NodeFacts], str | None]  # None when the node can run it, else what is missing
    why: str


def _process_needs(facts: NodeFacts) -> str | None:
    host = facts.host
    if host.bwrap_path is None:
        return "bubblewrap (bwrap) is not installed"
    if not host.user_namespaces:
        return "user namespaces are disabled"
    if not host.seccomp:
        return "the kernel has no seccomp"
    return None


def _binary_needs(name: str) -> Callable[[NodeFacts], str | None]:
    def needs(facts: NodeFacts) -> str | None:
        return None if facts.binaries.get(name) else f"{name} is not installed"

    return needs


def _kvm_needs(facts: NodeFacts) -> str | None:
    return None if facts.has_kvm else "/dev/kvm is not usable"


BACKEND_ROWS: tuple[BackendRow, ...] = (
    BackendRow(
        "process",
        RESOURCE_PREFIX + "process",
        _process_needs,
        "bubblewrap, user namespaces and seccomp are what the process backend is built from",
    ),
    BackendRow(
        "container:runc",
        RESOURCE_PREFIX + "container_runc",
        _binary_needs("runc"),
        "the container backend hands an OCI bundle to runc",
    ),
    BackendRow(
        "container:runsc",
        RESOURCE_PREFIX + "container_runsc",
        _binary_needs("runsc"),
        "gVisor's runsc runs the bundle on a user-space kernel",
    ),
    BackendRow("microvm", RESOURCE_PREFIX + "microvm", _kvm_needs, "the micro-VM needs hardware virtualisation"),
)
_BY_BACKEND = {row.backend: row for row in BACKEND_ROWS}
# A manifest that says only `container` means the container backend's default runtime (runc).
_ALIASES = {"container": "container:runc"}


def _row(backend: str) -> BackendRow | None:
    return _BY_BACKEND.get(_ALIASES.get(backend, backend))


# A node gets up to this many attempts per slot of a backend: the ones beyond its slots wait on
# the node (NodePool's slot gate), so a slot that frees starts its next job without a round trip
# to the driver. 2: one running and one waiting per slot (each waiting one holds an actor thread
# and its job's inputs in memory, nothing else).
SENT_PER_SLOT = 2


def canonical_backend(backend: str) -> str:
    """The backend spec a placement row names (``container`` -> ``container:runc``)."""
    return _ALIASES.get(backend, backend)


def plan_backend_slots(resources: Mapping[str, float]) -> dict[str, int]:
    """backend spec -> sandboxes at once, from a node's advertised resources (what its actor enforces)."""
    return {row.backend: int(resources[row.resource]) for row in BACKEND_ROWS if resources.get(row.resource, 0) >= 1}


def resource_name(backend: str) -> str | None:
    """The Ray resource that advertises ``backend``, or None for a backend the fleet cannot place."""
    row = _row(backend)
    return row.resource if row is not None else None


def is_backend_supported(facts: NodeFacts, backend: str) -> str | None:
    """None when this node can run ``backend``; otherwise why not (for the job's failure)."""
    row = _row(backend)
    if row is None:
        return f"the fleet knows no backend {backend!r}"
    spec = _ALIASES.get(backend, backend)
    if spec not in facts.built_backends and backend not in facts.built_backends:
        return f"this contain build has no {spec} backend (it has: {', '.join(facts.built_backends)})"
    return row.needs(facts)


def plan_node_resources(facts: NodeFacts, *, slots: int | None = None) -> dict[str, float]:
    """The custom resources a node advertises: each backend it can run -> sandboxes at once.

    Args:
        facts: the node's facts.
        slots: sandboxes at once per backend (default: the node's CPU count, at least 1).
    """
    count = float(max(1, slots if slots is not None else facts.cpus))
    return {row.resource: count for row in BACKEND_ROWS if is_backend_supported(facts, row.backend) is None}


def nodes_for_backend(nodes: Mapping[str, Mapping[str, float]], backend: str) -> dict[str, int]:
    """node id -> sandboxes at once, for the alive nodes whose resources advertise ``backend``."""
    resource = resource_name(backend)
    if resource is None:
        return {}
    return {node: int(resources[resource]) for node, resources in nodes.items() if resources.get(resource, 0) >= 1}


def gather_node_facts() -> NodeFacts:
    """This node's facts (a few file checks; ``detect_host`` is cached per process)."""
    from contain.host.facts import detect_host
    from contain.runtime.sandbox import BACKENDS

    return NodeFacts(
        host=detect_host(),
        built_backends=tuple(BACKENDS),
        binaries={name: shutil.which(name) for name in ("runc", "runsc")},
        has_kvm=os.access("/dev/kvm", os.R_OK | os.W_OK),
        cpus=len(os.sched_getaffinity(0)),
    )
