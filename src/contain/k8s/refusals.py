"""What a valid boundary may say that the Kubernetes render cannot carry: ``RENDER_REFUSALS``.

One row per refusal, with its reason and fix. ``refusal_hits`` runs every row; the render refuses
the whole boundary on any hit (nothing is written), and ``contain check`` reports the same hits
as errors for a manifest with a ``kubernetes:`` section, so a manifest that checks clean renders.

Why refuse instead of dropping the rule: a dropped rule is a silently weaker sandbox (a write
bind that lost its protected paths, a credential copied into a Pod spec). Where the render is
*stricter* than ``contain run`` it says so in docs/k8s.md (no DNS at all, no Unix sockets from
volumes) and does not refuse.

Decisions written down here:

* hostPath is never rendered. It puts a node directory into an untrusted Pod: symlinks the
  workload plants are followed by node-side tools, the node path differs per node, and the
  restricted Pod Security Standard forbids it. Read inputs name a PersistentVolumeClaim or a
  ConfigMap (``kubernetes.inputs``), mounted read-only.
* Write binds are refused, not mapped to read-write volumes: the protected paths of a write bind
  (``PROTECTED_PATHS``: ``.git``, shell rc files) are read-only overlays below it, and a volume
  has no such overlays. Results leave through the broker or through an input pipeline outside
  the Pod.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from contain.boundary.kinds import CredentialVia, FileAccess
from contain.boundary.kubernetes import DNS1035_LABEL, NAME_MAX, Kubernetes
from contain.boundary.plain import PlainBoundary
from contain.egress.session import plan_sandbox_env

__all__ = ["PROXY_ENV_NAMES", "RENDER_REFUSALS", "RefusalHit", "RenderRefusal", "refusal_hits"]

KeyPath = tuple[str | int, ...]

# Every variable the render sets to reach the proxy; the manifest's env may not replace one.
PROXY_ENV_NAMES = frozenset(plan_sandbox_env("http://proxy"))


@dataclass(frozen=True)
class RefusalHit:
    """One place a refusal fires: the manifest key path and what is there."""

    rule_id: str
    key_path: KeyPath
    message: str


@dataclass(frozen=True)
class RenderRefusal:
    """One thing the render will not carry, with why and what to do instead."""

    id: str
    title: str
    why: str
    fix: str
    check: Callable[[PlainBoundary, Kubernetes], Iterable[tuple[KeyPath, str]]]


def _write_binds(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for index, rule in enumerate(boundary.files):
        if rule.access is FileAccess.WRITE:
            yield ("files", index), f"{rule.path} is a write bind"


def _unmapped_reads(boundary: PlainBoundary, settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    mapped = {item.path for item in settings.inputs}
    for index, rule in enumerate(boundary.files):
        if rule.access is FileAccess.READ and rule.required and rule.path not in mapped:
            yield ("files", index), f"read rule {rule.path} has no entry in kubernetes.inputs"


def _inputs_without_read_rule(boundary: PlainBoundary, settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    reads = {rule.path for rule in boundary.files if rule.access is FileAccess.READ}
    for index, item in enumerate(settings.inputs):
        if item.path not in reads:
            yield ("kubernetes", "inputs", index), f"kubernetes.inputs names {item.path}, which no read rule lists"


def _scratch_exports(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for index, rule in enumerate(boundary.files):
        if rule.export is not None:
            yield ("files", index, "export"), f"scratch {rule.path} exports to {rule.export}"


def _blocks(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for index, rule in enumerate(boundary.files):
        if rule.access is FileAccess.BLOCK:
            yield ("files", index), f"block {rule.path} hides part of a read volume"


def _kept_sockets(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for index, rule in enumerate(boundary.files):
        if rule.allow_sockets:
            yield ("files", index, "allow_sockets"), f"{rule.path} keeps Unix sockets {list(rule.allow_sockets)}"


def _env_credentials(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for index, cred in enumerate(boundary.credentials):
        if cred.via is CredentialVia.ENV:
            yield ("credentials", index), f"credential {cred.name} travels via env"


def _needs_broker(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for index, record in enumerate(boundary.records):
        yield ("records", index), f"records {record.name} are written through the broker"
    for index, cred in enumerate(boundary.credentials):
        if cred.via is CredentialVia.BROKER:
            yield ("credentials", index), f"credential {cred.name} is used by the broker"


def _pinned_hosts(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for name, address in boundary.network.hosts.items():
        yield ("network", "hosts", name), f"network.hosts pins {name} to {address}"


def _loopback_destinations(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for index, rule in enumerate(boundary.network.allow):
        try:
            network = ipaddress.ip_network(rule.host)
        except ValueError:
            continue  # a name: the proxy resolves it in the cluster and checks the addresses
        if any(network.version == own.version and network.overlaps(own) for own in _THIS_POD):
            yield ("network", "allow", index), f"network.allow names {rule.host}, which is the proxy Pod itself"


# Ranges that reach the proxy Pod's own sockets: loopback, "this host" (0.0.0.0/8 and :: connect
# to local listeners on Linux) and their IPv4-mapped IPv6 spellings.
_THIS_POD = tuple(
    ipaddress.ip_network(text)
    for text in ("127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128", "::ffff:127.0.0.0/104", "::ffff:0.0.0.0/104")
)


def _proxy_env(boundary: PlainBoundary, _settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    for name in sorted(boundary.env):
        if name in PROXY_ENV_NAMES:
            yield ("env", name), f"env sets {name}"


def _task_not_a_name(boundary: PlainBoundary, settings: Kubernetes) -> Iterable[tuple[KeyPath, str]]:
    if settings.name is None and (len(boundary.task) > NAME_MAX or not DNS1035_LABEL.fullmatch(boundary.task)):
        yield ("task",), f"task {boundary.task!r} is not a DNS-1035 label of at most {NAME_MAX} characters"


RENDER_REFUSALS: tuple[RenderRefusal, ...] = (
    RenderRefusal(
        "K8S-001",
        "write bind",
        "a write bind's protected paths (.git, shell rc files) are read-only overlays that a Kubernetes "
        "volume cannot express, and hostPath is never rendered",
        "use access: scratch, and send results through the broker or a pipeline outside the Pod",
        _write_binds,
    ),
    RenderRefusal(
        "K8S-002",
        "read rule without a cluster volume",
        "contain never renders hostPath (a node directory inside an untrusted Pod); a read input needs "
        "a PersistentVolumeClaim or ConfigMap",
        "add kubernetes.inputs: [{path: <the read path>, claim: <pvc>}] (or config_map:), or required: false",
        _unmapped_reads,
    ),
    RenderRefusal(
        "K8S-003",
        "cluster volume for a path the boundary does not list",
        "a volume at a path no read rule names would show the workload more than the boundary allows",
        "remove the kubernetes.inputs entry, or add a files rule with access: read for that path",
        _inputs_without_read_rule,
    ),
    RenderRefusal(
        "K8S-004",
        "scratch export",
        "export copies scratch to the host after the sandbox closes; a Pod's emptyDir is deleted with the "
        "Pod and there is no host to copy to",
        "remove export:, and send results through the broker",
        _scratch_exports,
    ),
    RenderRefusal(
        "K8S-005",
        "block inside a read volume",
        "whether a blocked path is a file or a directory is known only on the volume; a mask of the wrong "
        "kind stops the Pod, and no mask means the path is visible",
        "keep the blocked content out of the volume (a separate claim or ConfigMap)",
        _blocks,
    ),
    RenderRefusal(
        "K8S-006",
        "Unix sockets kept from a volume",
        "a socket in a cluster volume connects to whatever listens on the node that mounted it; the render "
        "cannot keep the named ones and hide the rest",
        "remove allow_sockets; reach services through network.allow and the proxy",
        _kept_sockets,
    ),
    RenderRefusal(
        "K8S-007",
        "credential via env",
        "the value would be copied from the renderer's environment into a Pod spec, readable by anyone who "
        "can read Pods in the namespace",
        "use via: broker",
        _env_credentials,
    ),
    RenderRefusal(
        "K8S-008",
        "records or broker credentials",
        "writes and broker credentials go through contain's broker, which the render does not deploy; the "
        "Pod could not reach it",
        "run this task with contain run, or remove records and broker credentials",
        _needs_broker,
    ),
    RenderRefusal(
        "K8S-009",
        "network.hosts override",
        "an override pins a name to an address of the machine that runs contain; in a cluster the proxy "
        "resolves names itself, and a pinned private address would open the cluster network",
        "remove network.hosts; allowed names must resolve in the cluster's DNS",
        _pinned_hosts,
    ),
    RenderRefusal(
        "K8S-010",
        "loopback or this-host destination",
        "in a cluster, loopback is the proxy Pod itself (its own listener), not the service the manifest "
        "meant on the machine that runs contain",
        "name the service by a hostname or address reachable from the cluster",
        _loopback_destinations,
    ),
    RenderRefusal(
        "K8S-011",
        "env sets a proxy variable",
        "the render points every proxy variable at the egress proxy Service; an env entry would replace it",
        "remove the variable from env",
        _proxy_env,
    ),
    RenderRefusal(
        "K8S-012",
        "task name is not a Kubernetes name",
        "object names, label values and the proxy's variable names derive from it; rewriting it could make "
        "two tasks share one proxy and its allow list",
        "set kubernetes.name to a DNS-1035 label (lower-case letters, digits, '-'), e.g. invoices-2026",
        _task_not_a_name,
    ),
)


def refusal_hits(
    boundary: PlainBoundary, settings: Kubernetes, *, rules: Iterable[RenderRefusal] = RENDER_REFUSALS
) -> tuple[RefusalHit, ...]:
    """Every place a refusal row fires, in table order; pure.

    Args:
        boundary: the validated boundary, as the runtime reads it.
        settings: its ``kubernetes:`` section (or the defaults, with CLI overrides applied).
        rules: the table (default ``RENDER_REFUSALS``).
    """
    return tuple(
        RefusalHit(rule.id, key_path, message) for rule in rules for key_path, message in rule.check(boundary, settings)
    )
