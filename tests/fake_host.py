"""Host facts and a backend plan that unit tests construct instead of probing the host.

One definition each, so a field added to ``HostFacts`` or ``BackendPlan`` is filled in one place.
Tests that care about a fact still say so at the call (``facts_as_root(mounts, cgroup_root=...)``,
``facts_as_user(is_root=True)``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.host.facts import CgroupMount, HostFacts
from contain.runtime.backend import BackendPlan
from contain.runtime.paths import gather_path_facts
from contain.runtime.plan import LayerPlan

LIBSECCOMP = "/usr/lib/x86_64-linux-gnu/libseccomp.so.2"


# The one literal: root on x86_64 with user namespaces and seccomp, and nothing else.
_ROOT = HostFacts(
    arch="x86_64",
    is_root=True,
    uid=0,
    gid=0,
    bwrap_path=None,
    user_namespaces=True,
    seccomp=True,
    landlock_abi=0,
)


def facts_as_root(cgroups: tuple[CgroupMount, ...] = (), **changes: Any) -> HostFacts:
    """Root on x86_64 with user namespaces and seccomp, ``cgroups`` mounted, no bwrap or Landlock
    unless ``changes`` say so (``bwrap_path=...``, ``landlock_abi=7``, ``cgroup_root=...``)."""
    return replace(_ROOT, cgroups=cgroups, **changes)


def facts_as_user(**changes: Any) -> HostFacts:
    """uid 1000 on x86_64 with bwrap, user namespaces, seccomp and libseccomp; no Landlock and no
    cgroups unless ``changes`` say so."""
    fields: dict[str, Any] = {"is_root": False, "uid": 1000, "gid": 1000, "bwrap_path": "/usr/bin/bwrap"}
    return replace(_ROOT, **{**fields, "libseccomp_path": LIBSECCOMP, **changes})


def user_backend_plan() -> BackendPlan:
    """The plan a backend gets for ``Boundary()`` on ``facts_as_user()``: seccomp only, no cgroup."""
    boundary = plain_boundary(Boundary())
    return BackendPlan(
        boundary=boundary,
        facts=facts_as_user(),
        layers=LayerPlan(seccomp=True, landlock=None, cgroups=False, egress=False, report={}),
        host_ids=(1000, 1000),
        paths=gather_path_facts(boundary, sandbox_host_uid=1000, sandbox_host_gid=1000, idmapped=False),
        bind_sources={},
        attachments=(),
        resolv_conf="",
        cgroup=None,
    )
