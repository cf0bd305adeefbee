"""The raw-runtime baseline of ``contain bench startup``: ``runc run`` / ``runsc run`` of contain's bundle.

For ``--backend container:runc`` and ``container:runsc`` the bench sets contain's API beside the
runtime alone running **the bundle contain writes**: ``plan_oci_bundle`` for ``Boundary()`` (the
same mounts, namespaces, user namespace with two leased host ids, cgroup under
``contain-container``, rlimits, masked /proc paths and, for runsc, ``--oci-seccomp`` with the same
rendered filter), written once, with one change: the container's process is the measured command
itself instead of contain's supervisor. What the difference then measures is contain's own work
per sandbox: planning, writing a bundle, the disk budget tmpfs and network namespace made per
sandbox, the supervisor and its channel, the checks after start, and teardown.

Each sample is one foreground ``run`` of a fresh container name (runc and runsc delete the
container when its process exits; ``delete --force`` runs after each sample, outside the timing,
in case one did not). The disk budget tmpfs and, for runsc, the pinned network namespace are made
once per bundle and reused by every sample: in contain they are per sandbox, so they count as
contain's cost.

Does not: run anything as a contain sandbox, check any layer, or judge; it measures.
Needs root (leased host ids, mounts), as the container backend does.
"""

from __future__ import annotations

import contextlib
import json
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
from contain.host.facts import HostFacts, detect_host
from contain.runtime.backend import BackendPlan
from contain.runtime.bwrap import ETC_PASSTHROUGH, default_scratch_paths, generated_etc_files
from contain.runtime.container.bundle import BundleInputs, BundlePlan, RootfsEntry, plan_oci_bundle
from contain.runtime.disk_budget import inode_budget, plan_disk_places
from contain.runtime.etc_tree import ensure_etc_tree
from contain.runtime.host_ids import lease_host_ids
from contain.runtime.paths import gather_path_facts
from contain.runtime.plan import plan_layers
from contain.runtime.supervisor_build import ensure_supervisor_binary

__all__ = ["RAW_RUNTIME_FLAGS", "RawBundle", "raw_argv", "raw_oci_bundle", "runtime_path"]

_RLIMIT_NAMES = ("AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK", "MSGQUEUE", "NOFILE", "NPROC", "SIGPENDING", "STACK")
_LOADER_PATHS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_TIMEOUT_S = 60.0

# The runtime's global flags for the raw run, as contain's container backend gives them (its
# GLOBAL_FLAGS), minus the log file and pid file that only contain reads.
RAW_RUNTIME_FLAGS: dict[str, tuple[str, ...]] = {
    "runc": ("--root={state}",),
    "runsc": ("--root={state}", "--platform={platform}", "--network=host", "--oci-seccomp", "--host-uds=none"),
}


def runtime_path(runtime: str) -> str:
    """The runtime binary: PATH, then where Debian installs it."""
    found = shutil.which(runtime) or shutil.which(runtime, path="/usr/sbin:/usr/bin:/usr/local/sbin:/usr/local/bin")
    if found is None:
        raise FileNotFoundError(f"{runtime} is not installed")
    return found


def raw_argv(runtime: str, *, path: str, state: str, platform: str, bundle: str, name: str) -> list[str]:
    """``<runtime> <flags> run --bundle BUNDLE NAME``: the foreground run of one container. Pure."""
    flags = [f.format(state=state, platform=platform) for f in RAW_RUNTIME_FLAGS[runtime]]
    return [path, *flags, "run", "--bundle", bundle, name]


@dataclass
class RawBundle:
    """One written bundle whose process is the measured command; ``run_once`` runs it once."""

    runtime: str
    path: str
    platform: str
    bundle_dir: Path
    state_dir: Path
    name: str
    runs: int = field(default=0)

    def run_once(self) -> None:
        """Run a fresh container of the bundle in the foreground; raise if the command failed."""
        self.runs += 1
        name = f"{self.name}-{self.runs}"
        argv = raw_argv(
            self.runtime,
            path=self.path,
            state=str(self.state_dir),
            platform=self.platform,
            bundle=str(self.bundle_dir),
            name=name,
        )
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"raw {self.runtime} run failed ({done.returncode}): {done.stderr[-600:]!r}")

    def sweep(self) -> None:
        """Delete whatever container of this bundle is left (outside the timing)."""
        for n in range(max(1, self.runs - 2), self.runs + 1):
            subprocess.run(
                [self.path, f"--root={self.state_dir}", "delete", "--force", f"{self.name}-{n}"],
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


def _with_command(bundle: BundlePlan, command: Sequence[str], *, runtime: str) -> BundlePlan:
    """The bundle with ``command`` as its process; for runsc also the mount points its gofer needs
    under /dev (docs/gvisor-notes.md: runsc mounts binds onto the host rootfs)."""
    config = {**bundle.config, "process": {**bundle.config["process"], "args": list(command)}}
    rootfs = bundle.rootfs
    if runtime == "runsc":
        have = {entry.path for entry in rootfs}
        rootfs += tuple(
            RootfsEntry(m["destination"], "dir" if m["type"] != "bind" or os.path.isdir(m["source"]) else "file")
            for m in config["mounts"]
            if m["destination"].startswith("/dev/") and m["destination"] not in have
        )
    return BundlePlan(config, rootfs, bundle.files)


def _write(bundle: BundlePlan, bundle_dir: Path) -> None:
    rootfs = bundle_dir / "rootfs"
    rootfs.mkdir(mode=0o755)
    for entry in bundle.rootfs:
        target = rootfs / entry.path.lstrip("/")
        if entry.kind == "symlink":
            target.symlink_to(entry.target)
        elif entry.kind == "dir":
            target.mkdir(mode=0o755)
        else:
            target.touch(mode=0o444)
    (bundle_dir / "data").mkdir(mode=0o755)
    for file in bundle.files:
        (bundle_dir / file.name).write_bytes(file.content)
        (bundle_dir / file.name).chmod(file.mode)
    (bundle_dir / "config.json").write_text(json.dumps(bundle.config))


@contextlib.contextmanager
def _disk_budget(plan: BackendPlan, root: Path) -> Iterator[str]:
    root.mkdir(mode=0o755)
    disk = plan.boundary.resources.disk_bytes
    options = f"size={disk},nr_inodes={inode_budget(disk)},mode=755"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(root)], check=True)
    try:
        for place in plan_disk_places(plan.boundary):
            (root / place.name).mkdir()
            os.chown(root / place.name, *plan.host_ids)
            (root / place.name).chmod(int(place.mode, 8))
        yield str(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


@contextlib.contextmanager
def raw_oci_bundle(runtime: str, command: Sequence[str], *, platform: str = "ptrace") -> Iterator[RawBundle]:
    """Write contain's bundle for ``Boundary()`` with ``command`` as its process; clean up after.

    Args:
        runtime: "runc" or "runsc".
        command: the measured command, e.g. ["/bin/true"].
        platform: runsc's --platform (contain's choice for this binary).

    Raises:
        FileNotFoundError: the runtime is not installed.
        PermissionError: not root.
    """
    if os.geteuid() != 0:
        raise PermissionError("the raw OCI baseline needs root, as the container backend does")
    path = runtime_path(runtime)
    facts = detect_host()
    work = Path(tempfile.mkdtemp(prefix=f"contain-bench-{runtime}-"))
    work.chmod(0o755)
    ids, root_ids = lease_host_ids(), lease_host_ids()
    try:
        plan = _plan(facts, (ids.uid, ids.gid))
        supervisor = ensure_supervisor_binary()
        etc = generated_etc_files(home=default_scratch_paths(plan.boundary)[0], resolv_conf="")
        bundle_dir = work / "bundle"
        bundle_dir.mkdir(mode=0o755)
        name = f"contain-bench-{os.getpid()}-{runtime}-{os.urandom(3).hex()}"
        with _disk_budget(plan, work / "disk") as disk_root:
            inputs = BundleInputs(
                bundle_dir=str(bundle_dir),
                name=name,
                loader_links={p: os.readlink(p) for p in _LOADER_PATHS if os.path.islink(p)},
                loader_dirs=tuple(p for p in _LOADER_PATHS if os.path.isdir(p) and not os.path.islink(p)),
                etc_tree=ensure_etc_tree(supervisor.parent, etc, (e.path for e in ETC_PASSTHROUGH)),
                supervisor_host_path=str(supervisor),
                supervisor_args=(),
                disk_root=disk_root,
                root_host_ids=(root_ids.uid, root_ids.gid),
                host_hard_limits={n: resource.getrlimit(getattr(resource, f"RLIMIT_{n}"))[1] for n in _RLIMIT_NAMES},
            )
            _write(_with_command(plan_oci_bundle(plan, inputs), command, runtime=runtime), bundle_dir)
            raw = RawBundle(runtime, path, platform, bundle_dir, work / "state", name)
            try:
                yield raw
            finally:
                raw.sweep()
    finally:
        ids.release()
        root_ids.release()
        shutil.rmtree(work, ignore_errors=True)
