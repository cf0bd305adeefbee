"""`contain doctor`'s verdict per OCI runtime: can ``container:runc`` / ``container:runsc`` run here?

Pure: ``judge_runtime(facts, observed)`` turns ``HostFacts`` and what ``host/observe.py`` saw of
one runtime (``ObservedRuntime``) into a ``RuntimeVerdict``: ok, warn or fail, with a detail and
the fix. The judging uses the runtime's own tables and decisions, never copies:

1. the binary, its version and (runsc) its platforms come from the container backend's own probe
   (``oci_runtime.probe_runtime``, which reads ``runsc help platforms`` from the binary); the
   platform contain would use is ``backend_names.plan_runsc_platform`` (systrap, else ptrace;
   never kvm);
2. every global flag the backend passes (``oci_runtime.GLOBAL_FLAGS``) must be one the binary
   lists; a runsc without ``--oci-seccomp`` would drop the bundle's seccomp section silently;
3. whether the backend can run here is ``plan.plan_layers`` for a default ``Boundary()`` on that
   backend: root, user namespaces, seccomp, the cgroup layout (``plan_cgroup_hierarchies``), and
   for runsc the Landlock refusal; its ``UnsupportedHost`` cause and fix become the verdict's.

Status: ``warn`` when the runtime is not installed (the container backend is optional; the exit
code stays the process backend's), ``fail`` when it is installed but contain could not use it,
``ok`` when a default sandbox would be planned.

Does not: start a container (``contain probe --backend container:...`` does), or judge manifests
other than the default one (a manifest asking for a required Landlock is refused on runsc at
``contain run``, with the same cause).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.errors import UnsupportedHost
from contain.host.facts import HostFacts
from contain.host.observe import ObservedRuntime
from contain.runtime.backend_names import plan_runsc_platform
from contain.runtime.container.oci_runtime import GLOBAL_FLAGS
from contain.runtime.plan import plan_layers

__all__ = ["RuntimeVerdict", "judge_runtime", "required_flags"]

_INSTALL = {"runc": "apt-get install runc", "runsc": "apt-get install runsc (gVisor)"}


@dataclass(frozen=True)
class RuntimeVerdict:
    """One runtime's verdict, with what was found (for ``--json``)."""

    name: str  # the backend spec, e.g. "container:runsc"
    status: str  # "ok" | "warn" | "fail", as doctor's Status
    detail: str
    fix: str = ""
    path: str | None = None
    version: str | None = None
    platforms: tuple[str, ...] = ()  # runsc: what the build lists (`runsc help platforms`)
    platform: str | None = None  # runsc: the one contain would use
    missing_flags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        document = asdict(self)
        document["platforms"] = list(self.platforms)
        document["missing_flags"] = list(self.missing_flags)
        return document


def required_flags(runtime: str) -> tuple[str, ...]:
    """The global flag names (no dashes) the container backend passes ``runtime``: ``GLOBAL_FLAGS``."""
    names = (row.flag.lstrip("-").split("=")[0] for row in GLOBAL_FLAGS if row.runtime == runtime)
    return tuple(dict.fromkeys(names))


def judge_runtime(facts: HostFacts, observed: ObservedRuntime) -> RuntimeVerdict:
    """Judge one OCI runtime from facts already gathered. Pure.

    Args:
        facts: the host facts (``detect_host``).
        observed: what ``observe_oci_runtime`` found for it.

    Returns:
        The verdict; never raises for a host problem (that is the verdict).
    """
    spec = f"container:{observed.name}"
    runtime = observed.facts
    if runtime is None:
        cause = observed.error or "not probed"
        status = "warn" if "not installed" in cause else "fail"
        return RuntimeVerdict(spec, status, cause, observed.fix or _INSTALL.get(observed.name, ""))
    platform = plan_runsc_platform(runtime.platforms).name if observed.name == "runsc" else None

    def verdict(status: str, detail: str, fix: str = "", missing: tuple[str, ...] = ()) -> RuntimeVerdict:
        return RuntimeVerdict(
            spec, status, detail, fix, runtime.path, runtime.version, runtime.platforms, platform, missing
        )

    listed = observed.flags
    missing = tuple(f for f in required_flags(observed.name) if listed is not None and f not in listed)
    if missing:
        return verdict(
            "fail",
            f"{runtime.version} does not know the flag(s) contain passes: {', '.join('--' + f for f in missing)}",
            f"install a newer {observed.name} ({_INSTALL.get(observed.name, 'its docs')}), or use --backend process",
            missing,
        )
    try:  # the runtime's own decision, for the default boundary
        layers = plan_layers(plain_boundary(Boundary()), facts, egress_available=True, backend=spec, runtime=runtime)
    except UnsupportedHost as exc:
        return verdict("fail", f"cannot run here: {exc.cause}", exc.fix)
    where = f"{runtime.version} at {runtime.path}"
    if platform is not None:
        where += f"; platform {platform} (the build offers {', '.join(runtime.platforms)})"
    enforced = ", ".join(
        (
            "seccomp" if layers.seccomp else "no seccomp",
            "cgroup limits" if layers.cgroups else "no cgroup limits",
            "Landlock" if layers.landlock is not None else "no Landlock",
        )
    )
    if listed is None:
        return verdict(
            "warn",
            f"works: {where}; default sandbox: {enforced}; its flags could not be listed",
            f"check that {runtime.path} accepts --{', --'.join(required_flags(observed.name))}",
        )
    return verdict("ok", f"works: {where}; default sandbox: {enforced}")
