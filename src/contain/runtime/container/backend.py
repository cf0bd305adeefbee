"""The container backend: the OCI bundle of the same plan, run by runc or runsc, with contain's
supervisor as the container's pid 1.

``ContainerBackend.start(plan)``, in order (each step undone by ``ContainerSandbox.close``):
  1. runc: lease a second host id for the container's root (bundle.py explains why runc needs
     one) and start the helper that makes the sandbox's user and network namespaces
     (host_setup.NamespaceHelper: three execs, which run while steps 1-4 are done here; nothing
     is pinned or mapped until step 5); make the sandbox's directory ``<CONTAINER_ROOT>/<name>`` (below);
  2. mount the one disk budget tmpfs (``size=disk_bytes``, ``nr_inodes``) on the host at
     ``<dir>/disk`` and create its places as the sandbox user (disk_budget.py) — before the
     runtime exists, so its binds resolve to that one superblock;
  3. with an image: unpack it into the content-addressed cache (image.py; refused images raise
     ``ImageError``) and mount it at ``<dir>/rootfs`` under an overlay whose upper layer lives on
     the disk budget (``_mount_image_root`` says why an overlay, not a copy);
  4. plan the bundle (``plan_oci_bundle``; for runsc with bundle.RUNTIME_DIFFERENCES and the seccomp
     self-check program), write ``pids.max`` as the bundle has it, and write the bundle
     (``host_setup.write_bundle``: through descriptors, never following a link); it names the
     namespace pins by path, which are made next;
  5. pin the container's own network namespace at ``<dir>/netns`` (runc: and its user namespace
     at ``<dir>/userns``, host_setup.py): egress attaches there (``netns_path``) before any
     workload exists, and the bundle names it (runsc: ``--network=host`` uses it); no runtime
     has started yet, so the bundle is never used before its namespaces exist;
  6. start the runtime (oci_runtime.py plans the argv): runc ``run --detach --preserve-fds 1`` with
     the control socket as fd 3; runsc ``run`` in the foreground with it as stdin;
  7. wait for the supervisor's READY, read the runtime's pid file, confirm that pid is in the
     sandbox cgroup (the runtime joins the cgroup ``Sandbox`` made under ``contain-container``);
  8. runc: check the disk budget from the supervisor's mountinfo (check_disk_mounts);
     runsc: run the seccomp self-check (seccomp_probe.py: ``ptrace`` must get EPERM; runsc
     without ``--oci-seccomp`` ignores the section silently), else refuse the sandbox.

Where things live: ``CONTAINER_ROOT`` (``/run/contain/container``, 0711 root: search but no
listing) holds one directory per sandbox, named by its cgroup leaf. That directory is 0750
root:<gid>: for runc the container root's host gid (runc's init resolves bind sources as the
container's root, a non-root host id, which needs search permission on every parent), for runsc
the sandbox's own gid (file transfers go through the disk places as the sandbox user); nobody
else may enter. Inside: ``state/`` (0700, ``--root`` of the runtime), ``rootfs/``, ``data/``,
``config.json``, ``disk/`` (the budget tmpfs), ``netns`` (the namespace pin), ``runtime.log``,
``pid``.

Files in and out: runc through ``/proc/<supervisor pid>/root`` exactly as the process backend
(files.py: as the sandbox user, through descriptors, never following a symlink). runsc: the
sentry's host pid has no view of the container's files, so scratch files move through the host
directory of the disk budget place that backs the scratch path (the same files.py calls); a bind
mounted *below* a scratch path is not visible that way (the transfer sees the tmpfs under it).

Close (idempotent, never raises, and complete when it returns): EXIT; wait (bounded) until the
supervisor is gone (runc) or runsc's foreground ``run`` has exited; ``delete --force``, except
when its work is already done or can be done here: runc, once the supervisor is gone, removes
the cgroup directories and state ``delete`` would (runc_state.py, falling back to ``delete``);
runsc, when its ``run`` exited and left nothing at all in the state root (``_delete_container``
says why the wait comes first); unmount the
overlay, tmpfs and pins, remove the directory, the cgroup leaves and the empty
``contain-container`` parents runc leaves in every v1 hierarchy, release the lease (``close`` has
the order; sweep.py does the same for a sandbox whose owner died). An OOM kill or ``pids.max``
ends a whole runsc sandbox (``wait_exited``).

Why one file past 600 lines: it is the orchestrator of one mechanism, a container sandbox's
start, files and close; the host-side syscalls are in host_setup.py and the plans in bundle.py
and oci_runtime.py, and the start and close sequences read best side by side.

Does NOT: decide layers (plan_layers), create the cgroup or write its limits (``Sandbox`` does,
under the ``contain-container`` parent; the runtime joins it and writes the same limits), start
egress, or honour an image's entrypoint, env, user or working directory (contain runs the argv it
is given, as the sandbox user, with its own env).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from contain._log import LazyLogger
from contain.errors import ContainError, FileTransferError, SandboxLost, SandboxStartError, UnsupportedHost
from contain.host.facts import HostFacts
from contain.runtime import files as sandbox_files
from contain.runtime.backend import BackendPlan, CommandRequest
from contain.runtime.backend_names import RuntimeFacts
from contain.runtime.bwrap import ETC_PASSTHROUGH, default_scratch_paths, generated_etc_files
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.container.bundle import BundleInputs, plan_oci_bundle, plan_runtime_rlimits
from contain.runtime.container.host_setup import (
    NamespaceHelper,
    make_private_dir,
    mount_disk_budget,
    mount_overlay_root,
    pin_new_netns,
    remove_empty_parents,
    run_bounded,
    runsc_plan,
    tail_of,
    umount,
    wait_pid,
    wait_popen,
    write_bundle,
)
from contain.runtime.container.image import unpack_image
from contain.runtime.container.oci_runtime import (
    OciRuntimeView,
    plan_delete_argv,
    plan_kill_argv,
    plan_runtime_view,
    plan_start_argv,
    probe_runtime,
)
from contain.runtime.container.runc_state import plan_stopped_removal
from contain.runtime.container.seccomp_probe import CLONE3_NOT_ENOSYS, PROBE_SANDBOX_PATH, probe_program
from contain.runtime.container.sweep import sweep_stale
from contain.runtime.disk_budget import check_disk_mounts, plan_disk_places
from contain.runtime.etc_tree import ensure_etc_tree
from contain.runtime.host_ids import HostIdLease, lease_host_ids
from contain.runtime.kernel_differences import supervisor_difference_args
from contain.runtime.supervisor_build import ensure_supervisor_binary, supervisor_cache_dir
from contain.runtime.supervisor_channel import Exited, SpawnFailed, Started, SupervisorChannel

__all__ = ["CONTAINER_ROOT", "ContainerBackend", "ContainerSandbox"]

log = LazyLogger(__name__)

CONTAINER_ROOT = Path("/run/contain/container")
_LOADER_PATHS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_RLIMIT_NAMES = ("CPU", "NPROC", "FSIZE", "NOFILE", "CORE", "DATA")
_STARTUP_TIMEOUT_S = 30.0  # runsc on ptrace takes ~0.2 s; runc ~0.1 s; bounded either way
_DELETE_TIMEOUT_S = 20.0
# After EXIT the supervisor kills its children and exits, and the kernel ends the rest of its pid
# namespace before it is gone. Bounded: a supervisor that does not go is killed by `delete --force`.
_EXIT_WAIT_S = 2.0
_CONTROL_FD = {"runc": 3, "runsc": 0}  # runc: --preserve-fds 1 gives fd 3; runsc: its stdin
_WORKLOAD_KERNEL = {"runc": "linux", "runsc": "gvisor"}  # kernel_differences.WORKLOAD_KERNELS


class ContainerBackend:
    """Starts container sandboxes with ``runtime`` (``runc`` or ``runsc``); see the module docstring.

    Args:
        runtime: the OCI runtime (``backend_names.CONTAINER_RUNTIMES``).
        image: a local image to use as the root; None: the host's /usr read-only.

    Raises:
        UnsupportedHost: the runtime binary is missing or unusable (probed here, once per process).
        UnknownBackend: an unknown runtime name.
    """

    def __init__(self, runtime: str = "runc", image: str | None = None) -> None:
        self.runtime_facts: RuntimeFacts = probe_runtime(runtime)
        self.name = f"container:{runtime}"
        self.image = image

    def cgroup_joined_at_exec(self, facts: HostFacts) -> bool:
        """runc joins the cgroup itself (the bundle names it); nothing joins before exec."""
        return False

    def start(self, plan: BackendPlan) -> ContainerSandbox:
        """Steps 1-7 of the module docstring.

        Raises:
            SandboxStartError: the runtime or the supervisor failed; nothing of it is left.
            UnsupportedHost: seccomp did not take (runsc), or runsc with socket attachments.
            ImageError: the image was refused or could not be unpacked.
        """
        sockets = [a.sandbox_path for a in plan.attachments if a.host_path is not None]
        if sockets and self.runtime_facts.runtime == "runsc":
            # --host-uds=none: the sentry refuses connect() to a bound host socket (EPERM); opening
            # that up (--host-uds=open) would make every bound socket connectable, not just these.
            raise UnsupportedHost(
                f"socket attachments ({', '.join(sockets)}) cannot be reached under runsc",
                "use --backend container:runc or process for a boundary that talks to the broker",
            )
        sweep_stale(CONTAINER_ROOT, plan.facts)
        name = plan.cgroup.leaf if plan.cgroup is not None else f"contain-{os.getpid()}-{os.urandom(6).hex()}"
        sandbox = ContainerSandbox(self.runtime_facts, plan, name, image=self.image)
        try:
            sandbox.build_and_run()
        except BaseException as exc:
            log_text = sandbox.runtime_log()
            sandbox.close()
            if isinstance(exc, ContainError):
                if log_text and isinstance(exc, SandboxLost | SandboxStartError):
                    said = f"{exc.cause}; {self.runtime_facts.runtime} said: {log_text}"
                    raise SandboxStartError(said, exc.fix) from exc
                raise
            raise SandboxStartError(
                f"the container failed to start: {log_text or exc}",
                f"run `contain doctor`; check that {self.runtime_facts.path} works as root",
            ) from exc
        return sandbox


class ContainerSandbox:
    """A running container sandbox: the runtime's container, the supervisor's channel and pid."""

    def __init__(self, runtime: RuntimeFacts, plan: BackendPlan, name: str, *, image: str | None = None) -> None:
        self._rt = runtime
        self._image = image
        self._plan = plan
        self.name = name
        self.dir = CONTAINER_ROOT / name
        self._cgroup = plan.cgroup
        self._ids = plan.host_ids
        self._root_lease: HostIdLease | None = None
        self._channel: SupervisorChannel | None = None
        self._proc: subprocess.Popen[bytes] | None = None  # runsc's foreground `run`
        self._pid = 0
        self._pidfd: int | None = None  # of the process at ``_pid``, opened while it is known to be ours
        self._disk_mounted = False
        self._rootfs_mounted = False
        self._netns_pinned = False
        self._userns_pinned = False
        self._own_pid_namespace = False  # the bundle gives the container a new pid namespace
        self._ns_helper: NamespaceHelper | None = None  # runc: started in step 1, pinned in step 5
        self._created = False
        self._closed = False
        self._limits_before: tuple[int, int] | None = None  # OOM kills, refused forks when the command began
        self._ended_by: str | None = None  # a limit that ended the whole container (runsc)

    # -- paths

    @property
    def state_dir(self) -> str:
        return str(self.dir / "state")

    @property
    def log_file(self) -> str:
        return str(self.dir / "runtime.log")

    @property
    def disk_root(self) -> str:
        return str(self.dir / "disk")

    @property
    def userns_path(self) -> str:
        return str(self.dir / "userns")

    @property
    def oci_runtime(self) -> OciRuntimeView:
        """For outside judges (the probe's OC cases): the runtime binary, its state directory for
        this container, the container's name, the runtime's argv prefix and the root's host path.
        Values only: nothing here lets a caller reach the handle."""
        return plan_runtime_view(
            self._rt, state_dir=self.state_dir, log_file=self.log_file, name=self.name, rootfs=str(self.dir / "rootfs")
        )

    @property
    def host_pid(self) -> int:
        """runc: the supervisor's host pid; runsc: the sentry's (``runsc-sandbox``)."""
        return self._pid

    @property
    def netns_path(self) -> str:
        """The namespace this backend made and pinned; egress binds its listeners there."""
        return str(self.dir / "netns")

    @property
    def cgroup(self) -> SandboxCgroup | None:
        """The cgroup ``Sandbox`` made under ``contain-container``, which the runtime joined."""
        return self._cgroup

    # -- start

    def build_and_run(self) -> None:
        if self._rt.runtime == "runsc":
            self._plan = runsc_plan(self._plan)
            self._ids = self._plan.host_ids
        plan = self._plan
        root_ids = (0, 0)  # runsc: no user namespace (bundle.RUNTIME_DIFFERENCES), so no container root id
        # who may search the sandbox's directory besides root: runc's init resolves bind sources as
        # the container's root; under runsc file transfers go through the disk places as the
        # sandbox user (see the module docstring)
        traverse_gid = plan.host_ids[1]
        supervisor = ensure_supervisor_binary()
        if self._rt.runtime == "runc":
            self._root_lease = lease_host_ids()
            root_ids = (self._root_lease.uid, self._root_lease.gid)
            traverse_gid = root_ids[1]
            self._start_namespace_helper(str(supervisor))
        make_private_dir(CONTAINER_ROOT, 0o711, 0)
        os.mkdir(self.dir, 0o750)
        os.chown(self.dir, 0, traverse_gid)
        os.mkdir(self.state_dir, 0o700)
        self._mount_disk_budget()
        if self._image is not None:
            self._mount_image_root(self._image)
        etc = generated_etc_files(home=default_scratch_paths(plan.boundary)[0], resolv_conf=plan.resolv_conf)
        on_host = self._image is None  # the host's /usr and loader paths, or an image's own
        args = ["--control-fd", str(_CONTROL_FD[self._rt.runtime])]
        args += supervisor_difference_args(kernel=_WORKLOAD_KERNEL[self._rt.runtime])
        if plan.layers.landlock is not None:
            args += plan.layers.landlock.supervisor_args()
        inputs = BundleInputs(
            bundle_dir=str(self.dir),
            name=self.name,
            loader_links={p: os.readlink(p) for p in _LOADER_PATHS if on_host and os.path.islink(p)},
            loader_dirs=tuple(p for p in _LOADER_PATHS if on_host and os.path.isdir(p) and not os.path.islink(p)),
            etc_tree=ensure_etc_tree(supervisor.parent, etc, (e.path for e in ETC_PASSTHROUGH)) if on_host else "",
            supervisor_host_path=str(supervisor),
            supervisor_args=tuple(args),
            disk_root=self.disk_root,
            root_host_ids=root_ids,
            host_hard_limits={n: resource.getrlimit(getattr(resource, f"RLIMIT_{n}"))[1] for n in _RLIMIT_NAMES},
            netns_path=self.netns_path,
            userns_path=self.userns_path if self._rt.runtime == "runc" else "",
            runtime=self._rt.runtime,
            image_etc_files=None if on_host else etc,
            seccomp_probe=probe_program(plan.facts.arch) if self._rt.runtime == "runsc" else None,
        )
        bundle = plan_oci_bundle(plan, inputs)
        self._own_pid_namespace = {"type": "pid"} in bundle.config["linux"]["namespaces"]
        pids = bundle.config["linux"]["resources"].get("pids")
        if self._cgroup is not None and pids is not None:
            self._cgroup.set_pids_max(pids["limit"])  # the bundle's value, before the runtime starts in it
        write_bundle(bundle, self.dir, rootfs_mounted=not on_host)
        self._pin_namespaces(root_ids)
        self._start_runtime()
        assert self._channel is not None
        self._channel.read_ready(_STARTUP_TIMEOUT_S)
        self._pid = int((self.dir / "pid").read_text().strip())
        self._pidfd = os.pidfd_open(self._pid)  # before the check: what is checked is what close waits on
        if self._cgroup is not None:
            self._cgroup.check_member(self._pid)
        if self._rt.runtime == "runc":
            check_disk_mounts(
                Path(f"/proc/{self._pid}/mountinfo").read_text(),
                plan.boundary,
                page_bytes=os.sysconf("SC_PAGE_SIZE"),
                bind_paths=frozenset(b.rule.path for b in plan.paths.binds),
            )
        elif plan.layers.seccomp:
            self._check_seccomp_took()

    def _mount_disk_budget(self) -> None:
        """Step 2 (host_setup.mount_disk_budget)."""
        os.mkdir(self.disk_root, 0o755)
        self._disk_mounted = True  # from here on, close() unmounts whatever was mounted
        mount_disk_budget(self._plan.boundary, self.disk_root, self._ids)

    def _mount_image_root(self, image: str) -> None:
        """Step 3: the image unpacked into the cache and mounted at ``<dir>/rootfs`` under an
        overlay whose upper layer is on the disk budget (host_setup.mount_overlay_root says why).

        Raises:
            ImageError: the image is refused or cannot be unpacked (exit 125 in the CLI).
            SandboxStartError: the overlay cannot be mounted.
        """
        unpacked = unpack_image(image, cache_root=supervisor_cache_dir() / "images")
        log.debug("image %s: %s (reused: %s)", image, unpacked.digest, unpacked.reused)
        self._rootfs_mounted = True  # from here on, close() unmounts whatever was mounted
        mount_overlay_root(
            lower=str(unpacked.rootfs),
            layer_dir=os.path.join(self.disk_root, ".layer"),  # not a disk place: never bound in
            rootfs=str(self.dir / "rootfs"),
        )

    def _start_namespace_helper(self, launcher: str) -> None:
        """Step 1 (runc): start the helper whose namespaces step 5 pins (host_setup.NamespaceHelper)."""
        unshare = shutil.which("unshare", path="/usr/bin:/bin")
        if unshare is None:
            raise SandboxStartError("unshare (util-linux) is not installed", "apt-get install util-linux")
        self._ns_helper = NamespaceHelper(launcher=launcher, unshare=unshare, ids=self._ids)

    def _pin_namespaces(self, root_ids: tuple[int, int]) -> None:
        """Step 5: runc pins the helper's user namespace owned by the sandbox's uid and its netns
        (host_setup.NamespaceHelper); runsc (no user namespace of ours) a new netns."""
        if self._ns_helper is not None:
            self._userns_pinned = True  # from here on, close() unmounts whatever was pinned
            self._netns_pinned = True
            self._ns_helper.pin(root_ids=root_ids, user_path=self.userns_path, net_path=self.netns_path)
        else:
            self._netns_pinned = True
            pin_new_netns(self.netns_path)

    def _start_runtime(self) -> None:
        """Step 5: start the container with the supervisor's end of a socketpair as its control fd."""
        host, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = plan_start_argv(
            self._rt,
            state_dir=self.state_dir,
            bundle_dir=str(self.dir),
            name=self.name,
            pid_file=str(self.dir / "pid"),
            log_file=self.log_file,
        )
        log.debug("runtime argv: %s", argv)
        null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        try:
            self._created = True  # from here on, close() deletes the container
            if self._rt.runtime == "runc":
                # The container inherits runc's stdio (no terminal): /dev/null, never a pipe of ours.
                pid = os.posix_spawn(
                    argv[0],
                    argv,
                    {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                    file_actions=[
                        (os.POSIX_SPAWN_DUP2, null, 0),
                        (os.POSIX_SPAWN_DUP2, null, 1),
                        (os.POSIX_SPAWN_DUP2, null, 2),
                        (os.POSIX_SPAWN_DUP2, peer.fileno(), 3),
                    ],
                )
                status = wait_pid(pid, _STARTUP_TIMEOUT_S)
                if status != 0:
                    raise SandboxStartError(
                        f"runc run failed (status {status}): {self.runtime_log() or 'no message'}",
                        "run `contain doctor`; check the runtime log above",
                    )
            else:
                self._proc = subprocess.Popen(
                    argv,
                    stdin=peer.fileno(),
                    stdout=null,
                    stderr=null,
                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                    cwd="/",
                    close_fds=True,
                )
        except BaseException:
            host.close()
            raise
        finally:
            peer.close()
            os.close(null)
        self._channel = SupervisorChannel(host)

    def _check_seccomp_took(self) -> None:
        """runsc: the self-check program (seccomp_probe.py) must exit with EPERM: clone3 answered
        ENOSYS and ``ptrace(PTRACE_TRACEME)`` got EPERM from the profile (SECCOMP_RULES' row)."""
        status = self._run_quietly([PROBE_SANDBOX_PATH])
        if status != errno.EPERM:
            what = "clone3 did not answer ENOSYS" if status == CLONE3_NOT_ENOSYS else f"ptrace probe status {status}"
            raise UnsupportedHost(
                f"{self._rt.path} did not apply the bundle's seccomp profile as planned ({what}, expected EPERM "
                "from ptrace)",
                "use a runsc build that supports --oci-seccomp, or --backend container:runc",
            )

    def _run_quietly(self, argv: list[str]) -> int | None:
        null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        try:
            assert self._channel is not None
            reply = self._channel.start(argv, {"PATH": "/usr/bin:/bin"}, "/", (), (null, null, null))
        finally:
            os.close(null)
        if not isinstance(reply, Started):
            return None
        exited = self._channel.wait_exited(_STARTUP_TIMEOUT_S)
        if exited is None:
            self._channel.kill()
            self._channel.wait_exited(_STARTUP_TIMEOUT_S)
            return None
        return exited.exit_code

    def runtime_log(self) -> str:
        """The runtime's own log (the last 2 KiB), for start errors."""
        return tail_of(self.log_file, 2048)

    # -- running

    def _live_channel(self) -> SupervisorChannel:
        if self._channel is None or self._closed:
            raise SandboxLost("the container is not running", "start a new Sandbox")
        return self._channel

    def spawn(self, request: CommandRequest, fds: tuple[int, int, int]) -> Started | SpawnFailed:
        """Ask the supervisor to fork and exec one command."""
        if self._ended_by is not None:
            raise SandboxLost(f"the container was ended by {self._ended_by} in an earlier run", "start a new Sandbox")
        channel = self._live_channel()
        self._limits_before = self._limit_counts()
        # runsc: NPROC is pids_max itself, the sentry's limit (bundle.RUNTIME_DIFFERENCES)
        rlimits = plan_runtime_rlimits(
            request.rlimits, runtime=self._rt.runtime, pids_max=self._plan.boundary.resources.pids_max
        )
        return channel.start(list(request.argv), request.env, request.cwd, rlimits, fds)

    def wait_exited(self, timeout_s: float | None) -> Exited | None:
        """The supervisor's EXITED for the running command.

        Under runsc the sentry holds every byte and every host task of the workload, so the host
        cgroup's OOM killer or ``pids.max`` ends the whole sandbox, not one process. When the
        channel closes and the cgroup counted an OOM kill or a refused fork during this run, the
        run ends as killed by SIGKILL (what the process backend reports for an OOM kill; ``Sandbox``
        reads ``oom_killed`` and the ``pids`` violation from the same counters) and the sandbox
        refuses further runs (``SandboxLost`` names why).
        """
        try:
            return self._live_channel().wait_exited(timeout_s)
        except SandboxLost:
            after = self._limit_counts()
            if after is None or self._limits_before is None:
                raise
            (oom_before, pids_before), (oom_after, pids_after) = self._limits_before, after
            if oom_after > oom_before:
                self._ended_by = "the out-of-memory killer"
            elif pids_after > pids_before:
                self._ended_by = "the cgroup's pids.max (gVisor's own tasks count there)"
            else:
                raise
            return Exited(status=signal.SIGKILL, utime_us=0, stime_us=0, maxrss_kb=0)

    def _limit_counts(self) -> tuple[int, int] | None:
        if self._cgroup is None:
            return None
        usage = self._cgroup.usage()
        return usage.oom_kills, usage.pids_limit_hits

    def fileno(self) -> int:
        """The supervisor channel's socket."""
        return self._live_channel().fileno()

    def kill(self) -> None:
        """Ask the supervisor to kill every process but itself."""
        self._live_channel().kill()

    # -- files

    def _scratch_dir(self, scratch_root: str) -> str:
        if self._closed or not self._pid:
            raise FileTransferError("the sandbox is not running", "start the sandbox first")
        if self._rt.runtime == "runc":
            return f"/proc/{self._pid}/root{scratch_root}"
        place = next((p for p in plan_disk_places(self._plan.boundary) if p.sandbox_path == scratch_root), None)
        if place is None:
            raise FileTransferError(f"{scratch_root} is not a scratch path of this sandbox", "use a scratch path")
        return os.path.join(self.disk_root, place.name)

    def put_file(self, scratch_root: str, relative: str, data: bytes, *, mode: int, label: str) -> None:
        """Write as the sandbox user through descriptors (files.write_file_in)."""
        target = self._scratch_dir(scratch_root)
        sandbox_files.as_sandbox_user(
            *self._ids, lambda: sandbox_files.write_file_in(target, relative, data, mode=mode, label=label)
        )

    def get_file(self, scratch_root: str, relative: str, *, max_bytes: int, label: str) -> bytes:
        """Read as the sandbox user through descriptors (files.read_file_in)."""
        source = self._scratch_dir(scratch_root)
        return sandbox_files.as_sandbox_user(
            *self._ids, lambda: sandbox_files.read_file_in(source, relative, max_bytes=max_bytes, label=label)
        )

    def export(
        self, sandbox_path: str, destination: sandbox_files.ExportDestination, *, max_bytes: int
    ) -> sandbox_files.ExportReport:
        """Copy a scratch tree out (files.export_tree)."""
        return sandbox_files.export_tree(self._scratch_dir(sandbox_path), destination, max_bytes=max_bytes)

    # -- stop

    def destroy(self) -> None:
        """Kill every process of the container from outside (runtime kill, then the cgroup)."""
        if self._created:
            run_bounded(
                plan_kill_argv(self._rt, state_dir=self.state_dir, log_file=self.log_file, name=self.name), 10.0
            )
        if self._cgroup is not None:
            self._cgroup.kill_all(timeout_s=5.0)

    def close(self) -> None:
        """Stop and delete the container and remove every trace (module docstring, "Close").

        Never raises: ``Sandbox`` still has its own teardown to do (egress, cgroup, write-bind
        audit, the host-id lease). A step that fails is logged, the cgroup's ``kill_all`` ends any
        process the runtime left, and what stays on disk is removed by the next start's sweep once
        this process is gone.
        """
        if self._closed:
            return
        self._closed = True
        asked_to_exit = False
        if self._channel is not None:
            with contextlib.suppress(ContainError):
                self._channel.exit()
                asked_to_exit = True
        try:
            if self._created:
                self._delete_container(asked_to_exit=asked_to_exit)
        except (OSError, subprocess.SubprocessError, ContainError) as exc:
            log.warning("container %s: delete failed (%s); killing its cgroup", self.name, exc)
            if self._cgroup is not None:
                with contextlib.suppress(ContainError):
                    self._cgroup.kill_all(timeout_s=5.0)
        finally:
            if self._channel is not None:
                self._channel.close()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            if self._ns_helper is not None:
                self._ns_helper.abandon()
            try:
                self._remove_host_traces()
            except (OSError, ContainError) as exc:
                log.warning("container %s: traces left for the next sweep: %s", self.name, exc)

    def _delete_container(self, *, asked_to_exit: bool) -> None:
        """``delete --force`` the container, once its pid 1 is gone when it was asked to exit.

        Why wait first: ``runc delete --force`` of a container whose init still runs sends SIGKILL
        and then checks in 100 ms sleeps (runc 1.1 ``killContainer``), so deleting right after
        EXIT cost a tenth of a second per close; a stopped container is destroyed at once.

        runc, once the supervisor is gone and its pid namespace with it: runc_state.py's plan of
        what ``delete`` would remove is carried out here, falling back to ``delete --force``
        whenever the state is not fully understood or a removal fails.

        runsc's foreground ``run`` deletes its container itself when the sandbox ends; ``delete``
        is then skipped, but only when that ``run`` exited and nothing at all is left in the
        state root (any entry, whatever its name, and ``delete --force`` runs as before).
        """
        stopped = self._proc is None and asked_to_exit and self._wait_supervisor_gone(_EXIT_WAIT_S)
        if stopped and self._own_pid_namespace and self._remove_stopped_runc_container():
            return  # what `runc delete` of a stopped container does, done without starting runc
        ran_to_end = self._proc is not None and wait_popen(self._proc, 2.0)
        if self._proc is not None and not ran_to_end:
            run_bounded(
                plan_kill_argv(self._rt, state_dir=self.state_dir, log_file=self.log_file, name=self.name), 10.0
            )
        done: int | None = 0
        if not (ran_to_end and self._state_is_empty()):
            done = run_bounded(
                plan_delete_argv(self._rt, state_dir=self.state_dir, log_file=self.log_file, name=self.name),
                _DELETE_TIMEOUT_S,
            )
        if self._proc is not None and not wait_popen(self._proc, 5.0):
            self._proc.kill()
            self._proc.wait(timeout=5.0)
        self._wait_supervisor_gone(5.0)  # runc: the supervisor was reparented to init
        if done is not None and done != 0 and os.path.exists(os.path.join(self.state_dir, self.name)):
            raise SandboxStartError(
                f"{self._rt.runtime} delete --force {self.name} failed (status {done}): {self.runtime_log()}",
                f"run `{self._rt.path} --root {self.state_dir} delete --force {self.name}` as root",
            )

    def _remove_stopped_runc_container(self) -> bool:
        """runc's own ``delete`` of a stopped container, done here (runc_state.py says why and
        when); False, with nothing assumed, when runc must do it."""
        try:
            dir_fd = os.open(
                os.path.join(self.state_dir, self.name), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
            try:
                fd = os.open("state.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
                with os.fdopen(fd, "rb") as handle:
                    state = json.loads(handle.read())
            finally:
                os.close(dir_fd)
        except (OSError, ValueError) as exc:
            log.debug("container %s: runc state unreadable (%s); runc deletes it", self.name, exc)
            return False
        cgroup_dirs = plan_stopped_removal(state, name=self.name) if isinstance(state, dict) else None
        if cgroup_dirs is None:
            return False
        for path in cgroup_dirs:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.debug("container %s: cannot remove %s (%s); runc deletes it", self.name, path, exc)
                return False
        shutil.rmtree(os.path.join(self.state_dir, self.name))
        return True

    def _state_is_empty(self) -> bool:
        """Nothing at all in the runtime's state root (``--root``, ours alone)."""
        try:
            return not os.listdir(self.state_dir)
        except FileNotFoundError:
            return True

    def _wait_supervisor_gone(self, timeout_s: float) -> bool:
        """Wait (bounded) until the process at ``host_pid`` has exited; True when it has."""
        if self._pidfd is None:
            return True
        return bool(select.select([self._pidfd], [], [], timeout_s)[0])

    def _remove_host_traces(self) -> None:
        if self._rootfs_mounted:  # before the tmpfs that holds its upper layer
            umount(str(self.dir / "rootfs"))
            self._rootfs_mounted = False
        if self._disk_mounted:
            umount(self.disk_root)
            self._disk_mounted = False
        if self._netns_pinned:
            umount(self.netns_path)
            self._netns_pinned = False
        if self._userns_pinned:
            umount(self.userns_path)
            self._userns_pinned = False
        if self.dir.exists():
            shutil.rmtree(self.dir)
        if self._cgroup is not None:
            # runc removes the leaves it joined; runsc removes only those it made, so the leaves
            # Sandbox made would keep the parent busy. Removing them here is idempotent with
            # Sandbox's own remove() after us.
            self._cgroup.remove(timeout_s=5.0)
        remove_empty_parents(self._plan.facts)
        if self._root_lease is not None:
            self._root_lease.release()
            self._root_lease = None
