"""The raw-runtime baseline of ``contain bench startup``: ``runc run`` / ``runsc run`` of contain's bundle.

For ``--backend container:runc`` and ``container:runsc`` the bench sets contain's API beside the
runtime alone running **the bundle contain writes**: ``plan_oci_bundle`` for ``Boundary()`` (the
same mounts, namespaces, for runc the user namespace owned by the sandbox's leased uid and the
network namespace the backend pins (made with the backend's own ``host_setup`` functions), cgroup
under ``contain-container``, rlimits, masked /proc paths, the rendered seccomp
filter), written by the backend's own ``write_bundle``, and run with the backend's own global flags
(``oci_runtime.GLOBAL_FLAGS``: state root, runsc's platform from ``plan_runsc_platform``,
``--network=host``, ``--oci-seccomp``). One change: the container's process is the measured
command itself instead of contain's supervisor. What the difference then measures is contain's
own work per sandbox: planning, writing a bundle, the disk budget tmpfs and network namespace made
per sandbox, the supervisor and its channel, the checks after start, and teardown.

Each sample is one foreground ``run`` of a fresh container name (runc and runsc delete the
container when its process exits; ``delete --force`` runs for every name at the end, outside the
timing, in case one did not). The disk budget tmpfs and the pinned namespaces are made once per
bundle and reused by every sample: in contain they are per sandbox, so they count as contain's
cost.

Does not: run anything as a contain sandbox, check any layer, or judge; it measures.
Needs root (leased host ids, mounts, namespaces), as the container backend does.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contain.boundary import Boundary
from contain.boundary.plain import plain_boundary
from contain.errors import UnsupportedHost
from contain.host.facts import HostFacts, detect_host
from contain.runtime.backend import BackendPlan
from contain.runtime.backend_names import RuntimeFacts, plan_runsc_platform
from contain.runtime.bwrap import ETC_PASSTHROUGH, default_scratch_paths, generated_etc_files
from contain.runtime.container.bundle import BundleInputs, BundlePlan, plan_oci_bundle
from contain.runtime.container.host_setup import (
    disk_budget_mounted,
    pin_new_netns,
    pin_owned_namespaces,
    umount,
    write_bundle,
)
from contain.runtime.container.oci_runtime import GLOBAL_FLAGS, probe_runtime
from contain.runtime.etc_tree import ensure_etc_tree
from contain.runtime.host_ids import lease_host_ids
from contain.runtime.paths import gather_path_facts
from contain.runtime.plan import plan_layers
from contain.runtime.supervisor_build import ensure_supervisor_binary

__all__ = ["RawBundle", "raw_argv", "raw_oci_bundle"]

_RLIMIT_NAMES = ("AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK", "MSGQUEUE", "NOFILE", "NPROC", "SIGPENDING", "STACK")
_LOADER_PATHS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_TIMEOUT_S = 60.0


def raw_argv(runtime: RuntimeFacts, *, state: str, log: str, bundle: str, name: str) -> list[str]:
    """``<runtime> <contain's global flags> run --bundle BUNDLE NAME``: one foreground run. Pure.

    The global flags are the container backend's own rows (``oci_runtime.GLOBAL_FLAGS``), so the
    raw runtime runs with the state root, platform, network mode and ``--oci-seccomp`` contain
    gives it; only contain's ``--detach``, ``--preserve-fds`` and ``--pid-file`` are left out.
    """
    platform = plan_runsc_platform(runtime.platforms).name if runtime.runtime == "runsc" else ""
    flags = [
        row.flag.format(state=state, platform=platform, log=log)
        for row in GLOBAL_FLAGS
        if row.runtime == runtime.runtime
    ]
    return [runtime.path, *flags, "run", "--bundle", bundle, name]


@dataclass
class RawBundle:
    """One written bundle whose process is the measured command; ``run_once`` runs it once."""

    runtime: RuntimeFacts
    bundle_dir: Path
    state_dir: Path
    name: str
    runs: int = field(default=0)

    def run_once(self) -> None:
        """Run a fresh container of the bundle in the foreground; raise if the command failed."""
        self.runs += 1
        argv = raw_argv(
            self.runtime,
            state=str(self.state_dir),
            log=str(self.bundle_dir.parent / "runtime.log"),
            bundle=str(self.bundle_dir),
            name=f"{self.name}-{self.runs}",
        )
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"raw {self.runtime.runtime} run failed ({done.returncode}): {done.stderr[-600:]!r}")

    def sweep(self) -> None:
        """Delete whatever container of this bundle is left (outside the timing)."""
        for n in range(1, self.runs + 1):
            subprocess.run(
                [self.runtime.path, f"--root={self.state_dir}", "delete", "--force", f"{self.name}-{n}"],
                capture_output=True,
                timeout=_TIMEOUT_S,
                check=False,
            )


def _plan(facts: HostFacts, ids: tuple[int, int]) -> BackendPlan:
    boundary = plain_boundary(Boundary())
    return BackendPlan(
        boundary=boundary,
        facts=facts,
        layers=plan_layers(boundary, facts, egress_available=False, backend="process"),
        host_ids=ids,
        paths=gather_path_facts(boundary, sandbox_host_uid=ids[0], sandbox_host_gid=ids[1]),
        bind_sources={},
        attachments=(),
        resolv_conf="",
        cgroup=None,
    )


def _with_command(bundle: BundlePlan, command: Sequence[str]) -> BundlePlan:
    """The bundle with ``command`` as its process instead of the supervisor; nothing else changes."""
    config = {**bundle.config, "process": {**bundle.config["process"], "args": list(command)}}
    return BundlePlan(config, bundle.rootfs, bundle.files)


@contextlib.contextmanager
def _pinned_namespaces(
    runtime: str, work: Path, ids: tuple[int, int], root_ids: tuple[int, int], launcher: str
) -> Iterator[tuple[str, str]]:
    """The namespaces the backend pins per sandbox, made here once: runc a user namespace owned by
    the sandbox's uid plus a netns (``host_setup.pin_owned_namespaces``), runsc a netns
    (``pin_new_netns``). Returns (userns path or "", netns path)."""
    user_path, net_path = str(work / "userns"), str(work / "netns")
    try:
        if runtime == "runc":
            unshare = shutil.which("unshare", path="/usr/bin:/bin")
            if unshare is None:
                raise UnsupportedHost("unshare (util-linux) is not installed", "apt-get install util-linux")
            pin_owned_namespaces(
                launcher=launcher, unshare=unshare, ids=ids, root_ids=root_ids, user_path=user_path, net_path=net_path
            )
            yield user_path, net_path
        else:
            pin_new_netns(net_path)
            yield "", net_path
    finally:
        for path in (net_path, user_path):
            umount(path)


@contextlib.contextmanager
def raw_oci_bundle(runtime: str, command: Sequence[str]) -> Iterator[RawBundle]:
    """Write contain's bundle for ``Boundary()`` with ``command`` as its process; clean up after.

    Args:
        runtime: "runc" or "runsc" (probed with the backend's ``probe_runtime``).
        command: the measured command, e.g. ["/bin/true"].

    Raises:
        UnsupportedHost: not root, the runtime is missing or unusable, or a setup command failed.
    """
    if os.geteuid() != 0:
        raise UnsupportedHost(
            "the raw OCI baseline needs root, as the container backend does",
            "run `contain bench startup` as root, or measure --backend process only",
        )
    facts_of_runtime = probe_runtime(runtime)
    facts = detect_host()
    work = Path(tempfile.mkdtemp(prefix=f"contain-bench-{runtime}-"))
    work.chmod(0o755)
    name = f"contain-bench-{os.getpid()}-{runtime}-{os.urandom(3).hex()}"
    ids, root_ids = lease_host_ids(), lease_host_ids()
    try:
        plan = _plan(facts, (ids.uid, ids.gid))
        supervisor = ensure_supervisor_binary()
        etc = generated_etc_files(home=default_scratch_paths(plan.boundary)[0], resolv_conf="")
        bundle_dir = work / "bundle"
        bundle_dir.mkdir(mode=0o755)
        root_pair = (root_ids.uid, root_ids.gid)
        with (
            disk_budget_mounted(plan.boundary, work / "disk", plan.host_ids) as disk_root,
            _pinned_namespaces(runtime, work, plan.host_ids, root_pair, str(supervisor)) as (userns, netns),
        ):
            inputs = BundleInputs(
                bundle_dir=str(bundle_dir),
                name=name,
                loader_links={p: os.readlink(p) for p in _LOADER_PATHS if os.path.islink(p)},
                loader_dirs=tuple(p for p in _LOADER_PATHS if os.path.isdir(p) and not os.path.islink(p)),
                etc_tree=ensure_etc_tree(supervisor.parent, etc, (e.path for e in ETC_PASSTHROUGH)),
                supervisor_host_path=str(supervisor),
                supervisor_args=(),
                disk_root=disk_root,
                root_host_ids=root_pair,
                host_hard_limits={n: resource.getrlimit(getattr(resource, f"RLIMIT_{n}"))[1] for n in _RLIMIT_NAMES},
                netns_path=netns,
                userns_path=userns,
                runtime=runtime,
            )
            write_bundle(_with_command(plan_oci_bundle(plan, inputs), command), bundle_dir)
            raw = RawBundle(facts_of_runtime, bundle_dir, work / "state", name)
            try:
                yield raw
            finally:
                raw.sweep()
    finally:
        ids.release()
        root_ids.release()
        shutil.rmtree(work, ignore_errors=True)
