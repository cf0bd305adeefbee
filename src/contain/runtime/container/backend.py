"""The container backend: the OCI bundle of the same plan, run by runc or runsc, with contain's
supervisor as the container's pid 1.

``ContainerBackend.start(plan)``, in order (each step undone by ``ContainerSandbox.close``):
  1. lease a second host id for the container's root (bundle.py explains why runc needs one) and
     make the sandbox's directory ``<CONTAINER_ROOT>/<name>`` (below);
  2. mount the one disk budget tmpfs (``size=disk_bytes``, ``nr_inodes``) on the host at
     ``<dir>/disk`` and create its places as the sandbox user (disk_budget.py) — before the
     runtime exists, so its binds resolve to that one superblock;
  3. make the container's own network namespace (a thread unshares, brings ``lo`` up and pins the
     namespace with a bind mount at ``<dir>/netns``): egress attaches there (``netns_path``) before
     any workload exists, and the bundle names it (runsc: ``--network=host`` uses it);
  4. plan the bundle (``plan_oci_bundle``) and write it: rootfs skeleton, data files, config.json;
  5. start the runtime (oci_runtime.py plans the argv): runc ``run --detach --preserve-fds 1`` with
     the control socket as fd 3; runsc ``run`` in the foreground with it as stdin;
  6. wait for the supervisor's READY, read the runtime's pid file, confirm that pid is in the
     sandbox cgroup (runc joins the cgroup ``Sandbox`` made under ``contain-container``);
  7. runc: check the disk budget from the supervisor's mountinfo (check_disk_mounts);
     runsc: check that the OCI seccomp profile took (a ``ptrace`` probe must get EPERM; runsc
     without ``--oci-seccomp`` ignores the section silently), else refuse the sandbox.

Where things live: ``CONTAINER_ROOT`` (``/run/contain/container``, 0711 root: search but no
listing) holds one directory per sandbox, named by its cgroup leaf. That directory is 0750
root:<container root's host gid>: runc's init resolves bind sources as the container's root
(a non-root host id), which needs search permission on every parent; nobody else may enter. Inside:
``state/`` (0700, ``--root`` of the runtime), ``rootfs/``, ``data/``, ``config.json``, ``disk/``
(the budget tmpfs), ``netns`` (the namespace pin), ``runtime.log`` and ``pid``.

Files in and out: runc through ``/proc/<supervisor pid>/root`` exactly as the process backend
(files.py: as the sandbox user, through descriptors, never following a symlink). runsc: the
sentry's host pid has no view of the container's files, so scratch files move through the host
directory of the disk budget place that backs the scratch path (the same files.py calls); a bind
mounted *below* a scratch path is not visible that way (the transfer sees the tmpfs under it).

Close (idempotent): EXIT to the supervisor; ``runc|runsc delete --force`` (kills what is left,
removes the state and the cgroup leaves); runsc's foreground process reaped; unmount the disk
tmpfs and the netns pin (``MNT_DETACH``); remove the sandbox's directory (``shutil.rmtree``, which
walks by descriptors without following symlinks; nothing in it was writable by the workload once
the tmpfs is gone); remove the empty ``contain-container`` parents runc leaves in every v1
hierarchy (``rmdir`` only succeeds on an empty directory, so a parent another sandbox uses stays);
release the container root's host id.

Does NOT: decide layers (plan_layers), create the cgroup or write its limits (``Sandbox`` does,
under the ``contain-container`` parent; runc joins it and writes the same limits), start egress,
or unpack images (an image rootfs is not wired yet: ``image`` is refused with cause and fix).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import resource
import select
import shutil
import signal
import socket
import stat
import subprocess
import threading
from pathlib import Path

from contain._log import LazyLogger
from contain.errors import ContainError, FileTransferError, SandboxLost, SandboxStartError, UnsupportedHost
from contain.host.facts import HostFacts
from contain.runtime import files as sandbox_files
from contain.runtime.backend import BackendPlan, CommandRequest
from contain.runtime.backend_names import BACKEND_KINDS, RuntimeFacts
from contain.runtime.bwrap import ETC_PASSTHROUGH, default_scratch_paths, generated_etc_files
from contain.runtime.cgroup_plan import plan_base_dir
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.container.bundle import BundleInputs, BundlePlan, plan_oci_bundle
from contain.runtime.container.oci_runtime import (
    plan_delete_argv,
    plan_kill_argv,
    plan_start_argv,
    probe_runtime,
)
from contain.runtime.disk_budget import check_disk_mounts, inode_budget, plan_disk_places
from contain.runtime.etc_tree import ensure_etc_tree
from contain.runtime.host_ids import HostIdLease, lease_host_ids
from contain.runtime.supervisor_build import ensure_supervisor_binary
from contain.runtime.supervisor_channel import Exited, SpawnFailed, Started, SupervisorChannel

__all__ = ["CONTAINER_ROOT", "ContainerBackend", "ContainerSandbox", "write_bundle"]

log = LazyLogger(__name__)

CONTAINER_ROOT = Path("/run/contain/container")
CGROUP_PARENT = next(k.cgroup_parent for k in BACKEND_KINDS if k.kind == "container")
_LOADER_PATHS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_RLIMIT_NAMES = ("CPU", "NPROC", "FSIZE", "NOFILE", "CORE", "DATA")
_STARTUP_TIMEOUT_S = 30.0  # runsc on ptrace takes ~0.2 s; runc ~0.1 s; bounded either way
_DELETE_TIMEOUT_S = 20.0
_CLONE_NEWNET = 0x40000000
_MS_BIND = 4096
_MNT_DETACH = 2
_IFF_UP = 0x1
_SIOCGIFFLAGS, _SIOCSIFFLAGS = 0x8913, 0x8914
_CONTROL_FD = {"runc": 3, "runsc": 0}  # runc: --preserve-fds 1 gives fd 3; runsc: its stdin

# exits with ptrace(PTRACE_TRACEME)'s errno (0 when it succeeded); SECCOMP_RULES makes it EPERM
_PTRACE_PROBE = (
    "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
    "sys.exit(ctypes.get_errno() if libc.ptrace(0, 0, 0, 0) else 0)"
)

_libc = ctypes.CDLL(None, use_errno=True)


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
            UnsupportedHost: an image was asked for (not wired yet), or seccomp did not take.
        """
        if self.image is not None:
            raise UnsupportedHost(
                f"runtime.container.image {self.image!r}: image roots are not wired into the container backend yet",
                "set runtime.container.image: null (the host's /usr read-only)",
            )
        name = plan.cgroup.leaf if plan.cgroup is not None else f"contain-{os.getpid()}-{os.urandom(6).hex()}"
        sandbox = ContainerSandbox(self.runtime_facts, plan, name)
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

    def __init__(self, runtime: RuntimeFacts, plan: BackendPlan, name: str) -> None:
        self._rt = runtime
        self._plan = plan
        self.name = name
        self.dir = CONTAINER_ROOT / name
        self._cgroup = plan.cgroup
        self._ids = plan.host_ids
        self._root_lease: HostIdLease | None = None
        self._channel: SupervisorChannel | None = None
        self._proc: subprocess.Popen[bytes] | None = None  # runsc's foreground `run`
        self._pid = 0
        self._disk_mounted = False
        self._netns_pinned = False
        self._created = False
        self._closed = False

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
        plan = self._plan
        self._root_lease = lease_host_ids()
        root_ids = (self._root_lease.uid, self._root_lease.gid)
        _make_private_dir(CONTAINER_ROOT, 0o711, 0)
        os.mkdir(self.dir, 0o750)
        os.chown(self.dir, 0, root_ids[1])
        os.mkdir(self.state_dir, 0o700)
        self._mount_disk_budget()
        self._pin_new_netns()
        supervisor = ensure_supervisor_binary()
        etc = generated_etc_files(home=default_scratch_paths(plan.boundary)[0], resolv_conf=plan.resolv_conf)
        args = ["--control-fd", str(_CONTROL_FD[self._rt.runtime])]
        if plan.layers.landlock is not None:
            args += plan.layers.landlock.supervisor_args()
        inputs = BundleInputs(
            bundle_dir=str(self.dir),
            name=self.name,
            loader_links={p: os.readlink(p) for p in _LOADER_PATHS if os.path.islink(p)},
            loader_dirs=tuple(p for p in _LOADER_PATHS if os.path.isdir(p) and not os.path.islink(p)),
            etc_tree=ensure_etc_tree(supervisor.parent, etc, (e.path for e in ETC_PASSTHROUGH)),
            supervisor_host_path=str(supervisor),
            supervisor_args=tuple(args),
            disk_root=self.disk_root,
            root_host_ids=root_ids,
            host_hard_limits={n: resource.getrlimit(getattr(resource, f"RLIMIT_{n}"))[1] for n in _RLIMIT_NAMES},
            netns_path=self.netns_path,
        )
        write_bundle(plan_oci_bundle(plan, inputs), self.dir)
        self._start_runtime()
        assert self._channel is not None
        self._channel.read_ready(_STARTUP_TIMEOUT_S)
        self._pid = int((self.dir / "pid").read_text().strip())
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
        """Step 2: the one tmpfs of ``disk_bytes`` with an inode cap, its places as the sandbox user."""
        disk = self._plan.boundary.resources.disk_bytes
        os.mkdir(self.disk_root, 0o755)
        options = f"size={disk},nr_inodes={inode_budget(disk)},mode=755"
        _mount(b"tmpfs", self.disk_root.encode(), b"tmpfs", 0x2 | 0x4, options.encode())  # MS_NOSUID | MS_NODEV
        self._disk_mounted = True
        for place in plan_disk_places(self._plan.boundary):
            path = os.path.join(self.disk_root, place.name)
            os.mkdir(path)
            os.chown(path, *self._ids)
            os.chmod(path, int(place.mode, 8))

    def _pin_new_netns(self) -> None:
        """Step 3: a fresh network namespace with ``lo`` up, pinned by a bind mount on a file."""
        fd = os.open(self.netns_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o400)
        os.close(fd)
        failure: list[BaseException] = []

        def work() -> None:
            # unshare(CLONE_NEWNET) moves only this thread; it exits right after, the mount keeps
            # the namespace alive.
            try:
                if _libc.unshare(_CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
                _bring_lo_up()
                _mount(b"/proc/thread-self/ns/net", self.netns_path.encode(), b"none", _MS_BIND, None)
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=work, name="contain-netns")
        thread.start()
        thread.join()
        if failure:
            raise SandboxStartError(
                f"cannot make the container's network namespace: {failure[0]}", "run contain as root"
            ) from failure[0]
        self._netns_pinned = True

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
                status = _wait_pid(pid, _STARTUP_TIMEOUT_S)
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
        """runsc: a ``ptrace(PTRACE_TRACEME)`` must get EPERM from the profile (SECCOMP_RULES' row)."""
        status = self._run_quietly(["/usr/bin/python3", "-c", _PTRACE_PROBE])
        if status != errno.EPERM:
            raise UnsupportedHost(
                f"{self._rt.path} did not apply the bundle's seccomp profile (ptrace probe status {status}, "
                "expected EPERM)",
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
        try:
            with open(self.log_file, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - 2048))
                return handle.read().decode(errors="replace").strip()
        except OSError:
            return ""

    # -- running

    def _live_channel(self) -> SupervisorChannel:
        if self._channel is None or self._closed:
            raise SandboxLost("the container is not running", "start a new Sandbox")
        return self._channel

    def spawn(self, request: CommandRequest, fds: tuple[int, int, int]) -> Started | SpawnFailed:
        """Ask the supervisor to fork and exec one command."""
        return self._live_channel().start(list(request.argv), request.env, request.cwd, request.rlimits, fds)

    def wait_exited(self, timeout_s: float | None) -> Exited | None:
        """The supervisor's EXITED for the running command."""
        return self._live_channel().wait_exited(timeout_s)

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
            _run_bounded(
                plan_kill_argv(self._rt, state_dir=self.state_dir, log_file=self.log_file, name=self.name), 10.0
            )
        if self._cgroup is not None:
            self._cgroup.kill_all(timeout_s=5.0)

    def close(self) -> None:
        """Stop and delete the container and remove every trace (module docstring, "Close")."""
        if self._closed:
            return
        self._closed = True
        if self._channel is not None:
            with contextlib.suppress(ContainError):
                self._channel.exit()
        try:
            if self._created:
                self._delete_container()
        finally:
            if self._channel is not None:
                self._channel.close()
            self._remove_host_traces()

    def _delete_container(self) -> None:
        if self._proc is not None and not _wait_popen(self._proc, 2.0):
            _run_bounded(
                plan_kill_argv(self._rt, state_dir=self.state_dir, log_file=self.log_file, name=self.name), 10.0
            )
        done = _run_bounded(
            plan_delete_argv(self._rt, state_dir=self.state_dir, log_file=self.log_file, name=self.name),
            _DELETE_TIMEOUT_S,
        )
        if self._proc is not None and not _wait_popen(self._proc, 5.0):
            self._proc.kill()
            self._proc.wait(timeout=5.0)
        if self._pid:  # runc: the supervisor was reparented to init; wait until it is gone
            _wait_gone(self._pid, 5.0)
        if done is not None and done != 0 and os.path.exists(os.path.join(self.state_dir, self.name)):
            raise SandboxStartError(
                f"{self._rt.runtime} delete --force {self.name} failed (status {done}): {self.runtime_log()}",
                f"run `{self._rt.path} --root {self.state_dir} delete --force {self.name}` as root",
            )

    def _remove_host_traces(self) -> None:
        if self._disk_mounted:
            _umount(self.disk_root)
            self._disk_mounted = False
        if self._netns_pinned:
            _umount(self.netns_path)
            self._netns_pinned = False
        if self.dir.exists():
            shutil.rmtree(self.dir)
        _remove_empty_parents(self._plan.facts)
        if self._root_lease is not None:
            self._root_lease.release()
            self._root_lease = None


def write_bundle(bundle: BundlePlan, bundle_dir: Path) -> None:
    """Step 4's apply: the rootfs skeleton, the data files and ``config.json`` under ``bundle_dir``."""
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
        path = bundle_dir / file.name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, file.mode | 0o200)
        try:
            os.write(fd, file.content)
            os.fchmod(fd, file.mode)
        finally:
            os.close(fd)
    config = bundle_dir / "config.json"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(bundle.config, handle)


# -- small host helpers ------------------------------------------------------------------------------


def _make_private_dir(path: Path, mode: int, uid: int) -> None:
    """Create ``path`` (parents 0755) or check that it is a real directory owned by ``uid`` with ``mode``."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise SandboxStartError(f"{path} is not a directory owned by uid {uid}", f"remove {path}; contain recreates it")
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)


def _mount(source: bytes, target: bytes, fstype: bytes, flags: int, data: bytes | None) -> None:
    if _libc.mount(source, target, fstype, flags, data) != 0:
        code = ctypes.get_errno()
        raise SandboxStartError(
            f"cannot mount {fstype.decode()} at {target.decode()}: {os.strerror(code)}", "run contain as root"
        )


def _umount(target: str) -> None:
    if _libc.umount2(target.encode(), _MNT_DETACH) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        log.warning("cannot unmount %s: %s", target, os.strerror(ctypes.get_errno()))


def _bring_lo_up() -> None:
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP))


def _wait_pid(pid: int, timeout_s: float) -> int | None:
    """Wait for a child we spawned; its exit status, or None after killing it at the bound."""
    pidfd = os.pidfd_open(pid)
    try:
        if not select.select([pidfd], [], [], timeout_s)[0]:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _wait_popen(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    try:
        proc.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def _wait_gone(pid: int, timeout_s: float) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)


def _run_bounded(argv: list[str], timeout_s: float) -> int | None:
    """Run a runtime subcommand with stdio on /dev/null; its status, or None when it hung (killed)."""
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        log.warning("%s did not finish within %ss", argv[:4], timeout_s)
        return None
    return done.returncode


def _remove_empty_parents(facts: HostFacts) -> None:
    """rmdir the ``contain-container`` parent in every hierarchy; only an empty one goes."""
    for mount in facts.cgroups:
        parent = os.path.join(plan_base_dir(facts, mount), CGROUP_PARENT)
        with contextlib.suppress(OSError):
            os.rmdir(parent)
