r"""The container backend's host-side apply steps: the bundle on disk, the disk budget and image
overlay mounts, the pinned namespaces, bounded waits for runtime processes, and the cgroup parents
runc leaves.

Each function performs one kind of syscall the backend's plan asks for (container/backend.py is
the orchestrator; bundle.py and oci_runtime.py are the plans). What they enforce:

- ``write_bundle`` creates every file and directory exclusively and through directory
  descriptors opened with ``O_NOFOLLOW``, one component at a time. On an image root, an entry the
  image has at a skeleton path with the wrong kind (a symlink, a file where a directory goes) is
  *replaced* in the sandbox's own overlay layer, never followed: an image's ``/tmp -> /etc`` must
  not lead the host's mkdir into the host's /etc;
- ``make_private_dir`` refuses a path that is not a real directory owned by the expected uid;
- ``NamespaceHelper`` / ``pin_owned_namespaces`` (runc) makes the user namespace as the sandbox's leased uid, so the
  kernel charges per-user counts made inside to that uid and not to host root, with a network
  namespace it owns; ``pin_new_netns`` (runsc) makes a network namespace in a throwaway thread
  (``unshare(CLONE_NEWNET)`` moves only the calling thread); both bring ``lo`` up and pin with
  bind mounts on files;
- ``mount_disk_budget`` and ``mount_overlay_root`` mount the one budget tmpfs and an image's
  overlay (its upper layer on that budget); ``disk_budget_mounted`` is the same budget as a
  context manager (made, yielded, detached) for callers that own no backend: the raw OCI bench
  baseline and the bundle tests;
- ``runsc_plan`` reads the write binds' owners (a fact, before any workload) for
  ``bundle.plan_runsc_ids``, which decides;
- ``remove_empty_parents`` only ``rmdir``\ s, which the kernel refuses for a cgroup that has
  children, so a parent another sandbox is using stays.

Does NOT decide anything: paths, modes, ids and options come from the backend and the plans.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from contain._log import LazyLogger
from contain.boundary.kinds import FileAccess
from contain.boundary.plain import PlainBoundary
from contain.errors import SandboxStartError
from contain.host.facts import HostFacts
from contain.runtime.backend import BackendPlan
from contain.runtime.backend_names import BACKEND_KINDS
from contain.runtime.cgroup_plan import plan_base_dir
from contain.runtime.container.bundle import BundlePlan, RootfsEntry, plan_runsc_ids
from contain.runtime.disk_budget import inode_budget, plan_disk_places

__all__ = [
    "CGROUP_PARENT",
    "MS_NODEV",
    "MS_NOSUID",
    "NamespaceHelper",
    "disk_budget_mounted",
    "make_private_dir",
    "mount",
    "mount_disk_budget",
    "mount_overlay_root",
    "pin_new_netns",
    "pin_owned_namespaces",
    "remove_empty_parents",
    "run_bounded",
    "runsc_plan",
    "tail_of",
    "umount",
    "wait_gone",
    "wait_pid",
    "wait_popen",
    "write_bundle",
]

log = LazyLogger(__name__)

CGROUP_PARENT = next(k.cgroup_parent for k in BACKEND_KINDS if k.kind == "container")
MS_NOSUID, MS_NODEV = 0x2, 0x4  # <sys/mount.h>
_MS_BIND = 4096
_MNT_DETACH = 2
_CLONE_NEWNET = 0x40000000  # <linux/sched.h>
_IFF_UP = 0x1
_SIOCGIFFLAGS, _SIOCSIFFLAGS = 0x8913, 0x8914  # <linux/sockios.h>

_SANDBOX_ID = 1000  # bwrap.SANDBOX_UID / SANDBOX_GID, the workload's ids inside

_libc = ctypes.CDLL(None, use_errno=True)


def pin_owned_namespaces(
    *,
    launcher: str,
    unshare: str,
    ids: tuple[int, int],
    root_ids: tuple[int, int],
    user_path: str,
    net_path: str,
    timeout_s: float = 10.0,
) -> None:
    """``NamespaceHelper`` started and pinned in one call (see there).

    Raises:
        SandboxStartError: the helper failed, or a map, pin or ``lo`` could not be made.
    """
    helper = NamespaceHelper(launcher=launcher, unshare=unshare, ids=ids)
    try:
        helper.pin(root_ids=root_ids, user_path=user_path, net_path=net_path, timeout_s=timeout_s)
    finally:
        helper.abandon()


class NamespaceHelper:
    """runc: a user namespace *owned by the sandbox's host uid* (container 0 -> ``root_ids``, 1000
    -> ``ids``) and a network namespace owned by it, with ``lo`` up, pinned at two paths.

    Why not let runc make the user namespace: runc runs as host root, so a namespace it makes is
    owned by root, and the kernel charges every per-user count made inside it (inotify instances
    and watches, user namespaces, ...) to host root, shared with every other such sandbox and with
    contain itself (RE-09 escaped that way). A namespace unshared by a process running as the
    leased uid is charged to that uid alone, as for the process backend. The helper is contain's
    launcher (``--exec-as``) exec'ing ``unshare --user --net`` and a shell that says ``ready`` and
    waits; the host (root in the parent namespace) writes the id maps, pins both namespaces with
    bind mounts and lets the helper exit.

    Two halves so that the helper's three execs run while the backend writes the bundle: the
    constructor only starts the helper (nothing exists yet that a workload could use); ``pin``
    waits for it and makes the maps and pins; ``abandon`` kills and reaps a helper that was not
    pinned (idempotent, for every error path).

    Raises:
        SandboxStartError: (``pin``) the helper failed, or a map, pin or ``lo`` could not be made.
    """

    def __init__(self, *, launcher: str, unshare: str, ids: tuple[int, int]) -> None:
        self.ids = ids
        self.unshare = unshare
        argv = [launcher, "--exec-as", str(ids[0]), str(ids[1]), "--", unshare, "--user", "--net", "--"]
        argv += ["/bin/sh", "-c", "echo ready; read line"]
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            close_fds=True,
        )

    def pin(self, *, root_ids: tuple[int, int], user_path: str, net_path: str, timeout_s: float = 10.0) -> None:
        """Wait for the helper's ``ready``, write its id maps, pin both namespaces, bring ``lo`` up."""
        helper = self._proc
        if helper is None:
            raise SandboxStartError("the namespace helper was already used", "this is a bug in the backend")
        assert helper.stdin is not None and helper.stdout is not None and helper.stderr is not None
        for path in (user_path, net_path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o400))
        try:
            ready = select.select([helper.stdout], [], [], timeout_s)[0]
            if not ready or helper.stdout.readline() != b"ready\n":
                helper.kill()
                helper.wait(timeout=timeout_s)
                raise SandboxStartError(
                    f"the namespace helper did not start: {helper.stderr.read(2048).decode(errors='replace').strip()}",
                    f"check that {self.unshare} (util-linux) works as root",
                )
            maps = {"uid_map": (root_ids[0], self.ids[0]), "gid_map": (root_ids[1], self.ids[1])}
            for name, (root, sandbox) in maps.items():
                with open(f"/proc/{helper.pid}/{name}", "w") as handle:  # 0 -> root, 1000 -> the sandbox's
                    handle.write(f"0 {root} 1\n{_SANDBOX_ID} {sandbox} 1\n")
            mount(f"/proc/{helper.pid}/ns/user".encode(), user_path.encode(), b"none", _MS_BIND, None)
            mount(f"/proc/{helper.pid}/ns/net".encode(), net_path.encode(), b"none", _MS_BIND, None)
        finally:
            helper.stdin.close()  # the helper's `read` ends; it exits while lo comes up
        _in_netns(net_path, _bring_lo_up)
        self._reap(timeout_s)

    def abandon(self) -> None:
        """Kill and reap the helper unless ``pin`` already did; never raises."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self._reap(10.0)

    def _reap(self, timeout_s: float) -> None:
        helper, self._proc = self._proc, None
        if helper is None:
            return
        if not wait_popen(helper, timeout_s):
            helper.kill()
            helper.wait()
        for stream in (helper.stdin, helper.stdout, helper.stderr):
            if stream is not None:
                stream.close()


def _in_throwaway_thread(work: Callable[[], None], *, failing: str) -> None:
    """Run ``work`` in a thread of its own and wait for it: ``setns``/``unshare(CLONE_NEWNET)`` move
    only the calling thread, so the namespace change ends with that thread and never reaches ours.

    Raises:
        SandboxStartError: ``work`` raised; the cause is ``failing``, then what it raised.
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="contain-netns")
    thread.start()
    thread.join()
    if failure:
        raise SandboxStartError(f"{failing}: {failure[0]}", "run contain as root") from failure[0]


def _in_netns(path: str, work: Callable[[], None]) -> None:
    """Run ``work`` in a throwaway thread that joined the network namespace at ``path``."""

    def joined() -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc.setns(fd, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET)")
        finally:
            os.close(fd)
        work()

    _in_throwaway_thread(joined, failing="cannot bring lo up in the container's network namespace")


def pin_new_netns(path: str) -> None:
    """A fresh network namespace with ``lo`` up, pinned by a bind mount on a new file at ``path``.

    Raises:
        SandboxStartError: the namespace, ``lo`` or the pin could not be made.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o400)
    os.close(fd)

    def work() -> None:
        # unshare(CLONE_NEWNET) moves only this thread; it exits right after, the mount keeps
        # the namespace alive.
        if _libc.unshare(_CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
        _bring_lo_up()
        mount(b"/proc/thread-self/ns/net", path.encode(), b"none", _MS_BIND, None)

    _in_throwaway_thread(work, failing="cannot make the container's network namespace")


def write_bundle(bundle: BundlePlan, bundle_dir: Path, *, rootfs_mounted: bool = False) -> None:
    """Step 4's apply: the rootfs skeleton, the data files and ``config.json`` under ``bundle_dir``.

    Everything is created exclusively and through directory descriptors without following a
    link. ``rootfs_mounted``: ``rootfs`` is an image the backend mounted; what the image has at a
    skeleton path that is not of the planned kind (a symlink, a file where a directory goes) is
    replaced in the sandbox's own layer, never followed (an image's ``/tmp -> /etc`` must not
    lead the host's mkdir into the host's /etc).
    """
    rootfs = bundle_dir / "rootfs"
    if not rootfs_mounted:
        rootfs.mkdir(mode=0o755)
    root_fd = os.open(rootfs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for entry in bundle.rootfs:
            _apply_entry(root_fd, entry)
    finally:
        os.close(root_fd)
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
    text = json.dumps(bundle.config).encode()  # json.dump to a file uses the pure-Python encoder
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, text)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _apply_entry(root_fd: int, entry: RootfsEntry) -> None:
    """Create one skeleton entry below ``root_fd``, one component at a time, never through a link."""
    *parents, leaf = entry.path.strip("/").split("/")
    fd = os.dup(root_fd)
    try:
        for name in parents:
            fd = _enter_dir(fd, name)
        _place(fd, leaf, entry)
    finally:
        os.close(fd)


def _enter_dir(parent_fd: int, name: str) -> int:
    """Open directory ``name`` of ``parent_fd`` (made, or replacing a non-directory); closes ``parent_fd``."""
    try:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            os.mkdir(name, 0o755, dir_fd=parent_fd)
            child = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            os.unlink(name, dir_fd=parent_fd)  # a link or a file where a directory goes: replaced
            os.mkdir(name, 0o755, dir_fd=parent_fd)
            child = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)
    return child


def _place(dir_fd: int, name: str, entry: RootfsEntry) -> None:
    try:
        info: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    wanted = {"dir": stat.S_ISDIR, "file": stat.S_ISREG}.get(entry.kind)
    if info is not None and entry.kind != "symlink" and wanted is not None and wanted(info.st_mode):
        return  # the image already has it, of the right kind
    if info is not None:
        try:
            if stat.S_ISDIR(info.st_mode):
                os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except OSError as exc:
            raise SandboxStartError(
                f"the image has a non-empty directory at {entry.path}, where contain mounts a {entry.kind}",
                "use an image without that directory, or move the bind elsewhere",
            ) from exc
    if entry.kind == "symlink":
        os.symlink(entry.target, name, dir_fd=dir_fd)
    elif entry.kind == "dir":
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    else:
        os.close(
            os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444, dir_fd=dir_fd)
        )


def make_private_dir(path: Path, mode: int, uid: int) -> None:
    """Create ``path`` (parents 0755) or check that it is a real directory owned by ``uid`` with ``mode``."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise SandboxStartError(f"{path} is not a directory owned by uid {uid}", f"remove {path}; contain recreates it")
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)


def mount(source: bytes, target: bytes, fstype: bytes, flags: int, data: bytes | None) -> None:
    """mount(2).

    Raises:
        SandboxStartError: naming the file system type, the target and the errno.
    """
    if _libc.mount(source, target, fstype, flags, data) != 0:
        code = ctypes.get_errno()
        raise SandboxStartError(
            f"cannot mount {fstype.decode()} at {target.decode()}: {os.strerror(code)}", "run contain as root"
        )


def umount(target: str) -> None:
    """Detach the mount at ``target`` (``MNT_DETACH``); a path that is not mounted is fine."""
    if _libc.umount2(target.encode(), _MNT_DETACH) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        log.warning("cannot unmount %s: %s", target, os.strerror(ctypes.get_errno()))


def _bring_lo_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP))


def wait_pid(pid: int, timeout_s: float) -> int | None:
    """Wait for a child we spawned; its exit status (that of the kill after the bound)."""
    return _wait_bounded(pid, timeout_s)[0]


def wait_popen(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait (bounded) for a child started with Popen; True once it exited (and is reaped).

    On a pidfd, as ``run_bounded``: ``Popen.wait(timeout=)`` polls with sleeps up to 50 ms.
    """
    if proc.poll() is not None:
        return True
    pidfd = os.pidfd_open(proc.pid)
    try:
        if not select.select([pidfd], [], [], timeout_s)[0]:
            return False
    finally:
        os.close(pidfd)
    proc.wait()
    return True


def wait_gone(pid: int, timeout_s: float) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)


def run_bounded(argv: list[str], timeout_s: float) -> int | None:
    """Run a runtime subcommand with stdio on /dev/null; its status, or None when it hung (killed).

    Started with ``posix_spawn`` and waited for on a pidfd, so the call returns as soon as the
    command exits: ``subprocess.run(timeout=)`` polls with sleeps that grow to 50 ms, which was
    half of a ``runc delete`` on every close.
    """
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        pid = os.posix_spawn(
            argv[0],
            argv,
            {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            file_actions=[(os.POSIX_SPAWN_DUP2, null, fd) for fd in (0, 1, 2)],
        )
    finally:
        os.close(null)
    status, hung = _wait_bounded(pid, timeout_s)
    if hung:
        log.warning("%s did not finish within %ss", argv[:4], timeout_s)
        return None
    return status


def _wait_bounded(pid: int, timeout_s: float) -> tuple[int, bool]:
    """Reap our child ``pid``: (its exit status, whether it was killed at the bound)."""
    pidfd = os.pidfd_open(pid)
    try:
        hung = not select.select([pidfd], [], [], timeout_s)[0]
        if hung:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), hung


def remove_empty_parents(facts: HostFacts) -> None:
    """rmdir the ``contain-container`` parent in every hierarchy; only an empty one goes."""
    for mount in facts.cgroups:
        parent = os.path.join(plan_base_dir(facts, mount), CGROUP_PARENT)
        with contextlib.suppress(OSError):
            os.rmdir(parent)


def mount_overlay_root(*, lower: str, layer_dir: str, rootfs: str) -> None:
    """Mount ``lower`` (an image's read-only cached tree) at ``rootfs`` under an overlay whose upper
    and work directories are made in ``layer_dir`` (on the sandbox's disk budget tmpfs: counted in
    ``disk_bytes``, gone when it is unmounted).

    Why an overlay and not a copy: the mount points contain makes (and image entries it must
    replace at those paths: a symlink at /etc/resolv.conf) go into this sandbox's own layer, so the
    shared cache is never written and nothing is copied per start. The workload still gets the
    root read-only (``root.readonly``), as on every backend.

    Raises:
        SandboxStartError: a path holds a character of the overlay option syntax, or the mount failed.
    """
    upper, work = os.path.join(layer_dir, "upper"), os.path.join(layer_dir, "work")
    for path in (lower, upper, work):
        if any(c in path for c in ",:\\"):  # overlayfs option syntax; never escaped, refused
            raise SandboxStartError(f"overlay path {path!r} contains , : or \\", "move the cache directory")
    os.mkdir(layer_dir, 0o700)
    os.mkdir(upper, 0o755)
    os.mkdir(work, 0o700)
    os.mkdir(rootfs, 0o755)
    options = f"lowerdir={lower},upperdir={upper},workdir={work}"
    mount(b"overlay", rootfs.encode(), b"overlay", MS_NOSUID | MS_NODEV, options.encode())


def runsc_plan(plan: BackendPlan) -> BackendPlan:
    """The plan as runsc runs it (bundle.RUNTIME_DIFFERENCES ``write-binds-as-their-owner``): write
    binds bound as they are, and the workload as their owner. Read binds keep their idmapped view."""
    write_binds = [b for b in plan.paths.binds if b.rule.access is FileAccess.WRITE]
    owners = set()
    for bind in write_binds:
        info = os.stat(bind.host_realpath)  # a fact gathered before any workload exists
        owners.add((info.st_uid, info.st_gid))
    ids = plan_runsc_ids(owners, default=plan.host_ids)
    real = {b.host_realpath for b in write_binds}
    sources = {host: view for host, view in plan.bind_sources.items() if host not in real}
    return plan._replace(bind_sources=sources, host_ids=ids)


def mount_disk_budget(boundary: PlainBoundary, disk_root: str, ids: tuple[int, int]) -> None:
    """The sandbox's one disk budget at ``disk_root``: a tmpfs of ``disk_bytes`` with an inode cap
    (disk_budget.py), and each place's directory owned by ``ids`` with its mode.

    Raises:
        SandboxStartError: the tmpfs cannot be mounted.
    """
    disk = boundary.resources.disk_bytes
    options = f"size={disk},nr_inodes={inode_budget(disk)},mode=755"
    mount(b"tmpfs", disk_root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode())
    for place in plan_disk_places(boundary):
        path = os.path.join(disk_root, place.name)
        os.mkdir(path)
        os.chown(path, *ids)
        os.chmod(path, int(place.mode, 8))


@contextlib.contextmanager
def disk_budget_mounted(boundary: PlainBoundary, disk_root: Path, ids: tuple[int, int]) -> Iterator[str]:
    """``mount_disk_budget`` at a new directory ``disk_root`` (mode 0755), detached on exit.

    For callers that have no backend to unmount for them (the raw OCI bench baseline, the bundle
    tests); the container backend keeps its own mounted-state flag because its close() runs apart
    from its start. Does not remove ``disk_root``: the caller owns the directory around it.

    Yields:
        ``disk_root`` as a string, for ``BundleInputs.disk_root``.

    Raises:
        FileExistsError: ``disk_root`` already exists (it is never reused).
        SandboxStartError: the tmpfs cannot be mounted.
    """
    disk_root.mkdir(mode=0o755)
    try:
        mount_disk_budget(boundary, str(disk_root), ids)
        yield str(disk_root)
    finally:
        umount(str(disk_root))


def tail_of(path: str, size: int) -> str:
    """The last ``size`` bytes of the file at ``path`` as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - size))
            return handle.read().decode(errors="replace").strip()
    except OSError:
        return ""
