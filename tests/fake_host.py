"""Host facts and a backend plan that unit tests construct instead of probing the host.

One definition each, so a field added to ``HostFacts`` or ``BackendPlan`` is filled in one place.
Tests that care about a fact still say so at the call (``facts_as_root(mounts, cgroup_root=...)``,
``dataclasses.replace(facts_as_user(), ...)``).
"""

from __future__ import annotations

from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.host.facts import CgroupMount, HostFacts
from contain.runtime.backend import BackendPlan
from contain.runtime.paths import gather_path_facts
from contain.runtime.plan import LayerPlan

LIBSECCOMP = "/usr/lib/x86_64-linux-gnu/libseccomp.so.2"


def facts_as_root(cgroups: tuple[CgroupMount, ...] = (), *, cgroup_root: str | None = None) -> HostFacts:
    """Root on x86_64 with user namespaces and seccomp, no bwrap, no Landlock, and ``cgroups`` mounted."""
    return HostFacts(
        arch="x86_64",
        is_root=True,
        uid=0,
        gid=0,
        bwrap_path=None,
        user_namespaces=True,
        seccomp=True,
        landlock_abi=0,
        cgroups=cgroups,
        cgroup_root=cgroup_root,
    )


def facts_as_user() -> HostFacts:
    """uid 1000 on x86_64 with bwrap, user namespaces, seccomp and libseccomp; no Landlock, no cgroups."""
    return HostFacts(
        arch="x86_64",
        is_root=False,
        uid=1000,
        gid=1000,
        bwrap_path="/usr/bin/bwrap",
        user_namespaces=True,
        seccomp=True,
        landlock_abi=0,
        libseccomp_path=LIBSECCOMP,
    )


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
