"""The process backend: bubblewrap with contain's supervisor as the sandbox's pid 1.

``ProcessBackend.start(plan)``, in order:
  1. make sure the supervisor binary is built and compile (or reuse) the seccomp filter;
  2. plan the bubblewrap argv (``plan_bwrap_argv``) from the plan's path facts, with the idmapped
     views as bind sources, and data pipes for attachments, empty masks and the filter;
  3. spawn bubblewrap as the sandbox user through the supervisor's launcher mode, which first
     mounts the sandbox's one disk budget (disk_budget.py) and, on a v1 host as root, joins the
     cgroup before exec;
  4. read the supervisor's host pid from ``--info-fd`` and put it in the cgroup (or confirm that the
     launcher did) — before any workload exists, so everything the workload forks is counted;
  5. wait for the supervisor's READY (bubblewrap has then brought the sandbox's lo up);
  6. check from the supervisor's mountinfo that the disk budget is mounted as planned.
A failure kills what was started and raises ``SandboxStartError`` quoting bubblewrap's stderr.

The running handle reaches the sandbox's files through ``/proc/<supervisor pid>/root`` (as the
sandbox user, through descriptors: files.py), its network namespace through
``/proc/<supervisor pid>/ns/net``, and stops it by asking the supervisor to exit, then SIGKILL of
the supervisor and bubblewrap (the pid namespace dies with its pid 1) and the cgroup.

Does not decide which layers apply (plan_layers), create the cgroup or write its limits (Sandbox,
cgroups.py), or start egress (Sandbox, egress/).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
from pathlib import Path

from contain._log import LazyLogger
from contain.errors import ContainError, FileTransferError, SandboxLost, SandboxStartError
from contain.host.facts import HostFacts
from contain.runtime import files as sandbox_files
from contain.runtime.backend import BackendPlan, CommandRequest
from contain.runtime.bwrap import (
    ETC_PASSTHROUGH,
    BwrapInputs,
    default_scratch_paths,
    generated_etc_files,
    plan_bwrap_argv,
)
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.disk_budget import check_disk_mounts, ensure_disk_mountpoint, plan_launcher_disk_args
from contain.runtime.etc_tree import ensure_etc_tree
from contain.runtime.filter_cache import filter_for
from contain.runtime.paths import bind_source, with_bind_sources
from contain.runtime.supervisor_build import ensure_supervisor_binary
from contain.runtime.supervisor_channel import Exited, SpawnFailed, Started, SupervisorChannel

__all__ = ["ProcessBackend", "ProcessSandbox"]

log = LazyLogger(__name__)

_LOADER_PATHS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_STARTUP_TIMEOUT_S = 10.0
_PIPE_BUFFER_BYTES = 65536  # data handed to bwrap is written to a pipe before the spawn
# How long destroy() lets bubblewrap reap its killed pid 1 before killing bubblewrap too: it
# exits about 1 ms after its child here (kill-to-return median 1.1 ms, max 2.0 ms over 10 kills);
# the bound only matters for a stuck bwrap.
_DESTROY_REAP_WAIT_S = 1.0


class ProcessBackend:
    """Starts process sandboxes (bubblewrap + supervisor); see the module docstring."""

    name = "process"

    def cgroup_joined_at_exec(self, facts: HostFacts) -> bool:
        """As root the launcher joins a v1 cgroup itself before it execs bwrap (``join_files``)."""
        return facts.is_root

    def start(self, plan: BackendPlan) -> ProcessSandbox:
        """Start bubblewrap with the supervisor as pid 1 and wait for READY.

        Raises:
            SandboxStartError: bubblewrap or the supervisor failed; nothing of it is left running.
            UnsupportedHost: the supervisor refused a layer of the plan.
        """
        supervisor = str(ensure_supervisor_binary())
        bpf = filter_for(
            arch=plan.facts.arch, libseccomp_path=plan.facts.libseccomp_path, cache_dir=Path(supervisor).parent
        )
        proc, channel, pid = _spawn(plan, supervisor, bpf)
        sandbox = ProcessSandbox(proc, channel, pid, plan)
        try:
            # READY first: bubblewrap writes the supervisor's pid before it brings the sandbox's lo up,
            # and egress binds its listeners on lo. No workload exists until the first RUN.
            channel.read_ready(_STARTUP_TIMEOUT_S)
            check_disk_mounts(
                Path(f"/proc/{pid}/mountinfo").read_text(),
                plan.boundary,
                page_bytes=os.sysconf("SC_PAGE_SIZE"),
                bind_paths=frozenset(b.rule.path for b in plan.paths.binds),
            )
        except BaseException as exc:
            stderr = sandbox.bwrap_stderr()
            sandbox.close()
            if isinstance(exc, ContainError) and not (stderr and isinstance(exc, SandboxLost)):
                raise
            raise SandboxStartError(
                f"the sandbox failed to start: {stderr or exc}", "run `contain doctor` to see what this host lacks"
            ) from exc
        return sandbox


class ProcessSandbox:
    """A running process sandbox: bubblewrap's process, the supervisor's channel and host pid."""

    def __init__(self, proc: subprocess.Popen[bytes], channel: SupervisorChannel, pid: int, plan: BackendPlan) -> None:
        self.proc = proc
        self._channel = channel
        self._pid = pid
        self._cgroup = plan.cgroup
        self._ids = plan.host_ids
        self._closed = False

    @property
    def host_pid(self) -> int:
        """The supervisor's host pid (the sandbox's pid 1)."""
        return self._pid

    @property
    def netns_path(self) -> str:
        """The supervisor's network namespace."""
        return f"/proc/{self._pid}/ns/net"

    @property
    def cgroup(self) -> SandboxCgroup | None:
        """The cgroup the supervisor (and bwrap's monitor, when the launcher joined) is in."""
        return self._cgroup

    def _root(self) -> str:
        if self._closed:
            raise FileTransferError("the sandbox is not running", "start the sandbox first")
        return f"/proc/{self._pid}/root"

    def spawn(self, request: CommandRequest, fds: tuple[int, int, int]) -> Started | SpawnFailed:
        """Ask the supervisor to fork and exec one command (``SupervisorChannel.start``)."""
        return self._channel.start(list(request.argv), request.env, request.cwd, request.rlimits, fds)

    def wait_exited(self, timeout_s: float | None) -> Exited | None:
        """The supervisor's EXITED for the running command (``SupervisorChannel.wait_exited``)."""
        return self._channel.wait_exited(timeout_s)

    def fileno(self) -> int:
        """The supervisor channel's socket."""
        return self._channel.fileno()

    def kill(self) -> None:
        """Ask the supervisor to kill every process but itself."""
        self._channel.kill()

    def put_file(self, scratch_root: str, relative: str, data: bytes, *, mode: int, label: str) -> None:
        """Write through ``/proc/<pid>/root`` as the sandbox user (files.write_file_in)."""
        target = self._root() + scratch_root
        sandbox_files.as_sandbox_user(
            *self._ids, lambda: sandbox_files.write_file_in(target, relative, data, mode=mode, label=label)
        )

    def get_file(self, scratch_root: str, relative: str, *, max_bytes: int, label: str) -> bytes:
        """Read through ``/proc/<pid>/root`` as the sandbox user (files.read_file_in)."""
        source = self._root() + scratch_root
        return sandbox_files.as_sandbox_user(
            *self._ids, lambda: sandbox_files.read_file_in(source, relative, max_bytes=max_bytes, label=label)
        )

    def export(
        self, sandbox_path: str, destination: sandbox_files.ExportDestination, *, max_bytes: int
    ) -> sandbox_files.ExportReport:
        """Copy ``sandbox_path`` out through ``/proc/<pid>/root`` (files.export_tree)."""
        return sandbox_files.export_tree(self._root() + sandbox_path, destination, max_bytes=max_bytes)

    def bwrap_stderr(self) -> str:
        """What bubblewrap printed, once it has exited (empty while it runs)."""
        proc = self.proc
        if proc.stderr is None or proc.stderr.closed:
            return ""
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return ""
        return proc.stderr.read(4096).decode(errors="replace").strip()

    def destroy(self) -> None:
        """Kill the whole sandbox from the host: the pid namespace dies with its pid 1.

        The supervisor first, then a short wait for bubblewrap, its parent, to reap it and exit;
        only then bubblewrap and the cgroup's leftovers. Killing bubblewrap at the same time
        orphaned the dying supervisor to the host's init, where it stayed a zombie until that
        init got round to reaping it.
        """
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)
        _wait_for_exit(self.proc, _DESTROY_REAP_WAIT_S)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        if self._cgroup is not None:
            self._cgroup.kill_all(timeout_s=5.0)

    def close(self) -> None:
        """Ask the supervisor to exit, wait for bubblewrap (killing it after 2 s), close the channel."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ContainError):
            self._channel.exit()
        if not _wait_for_exit(self.proc, 2.0):
            self.destroy()
            self.proc.wait(timeout=5.0)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self._channel.close()


def _spawn(plan: BackendPlan, supervisor: str, bpf: bytes) -> tuple[subprocess.Popen[bytes], SupervisorChannel, int]:
    """Steps 2-4 of ``ProcessBackend.start``; on failure nothing of bubblewrap is left running."""
    boundary, paths = plan.boundary, plan.paths
    disk_root = ensure_disk_mountpoint(Path(supervisor).parent)  # before any descriptor exists
    owned: list[int] = []  # fds to close in the host after the spawn

    def data_fd(content: bytes) -> int:
        read_end, write_end = os.pipe()
        # Content is small (< pipe buffer), so the write never blocks.
        os.write(write_end, content)
        os.close(write_end)
        owned.append(read_end)
        return read_end

    if len(bpf) >= _PIPE_BUFFER_BYTES:  # checked before any descriptor exists, so none leaks
        raise SandboxStartError(f"seccomp filter of {len(bpf)} bytes exceeds the pipe buffer", "report this bug")

    host_sock, supervisor_sock = _socketpair()
    info_r, info_w = os.pipe()
    owned += [supervisor_sock, info_w]
    etc = generated_etc_files(home=default_scratch_paths(boundary)[0], resolv_conf=plan.resolv_conf)
    etc_tree = ensure_etc_tree(Path(supervisor).parent, etc, (e.path for e in ETC_PASSTHROUGH))
    data_fds = {a.sandbox_path: data_fd(a.data) for a in plan.attachments if a.data is not None}
    socket_binds = tuple(
        (bind_source(plan.bind_sources, a.host_path), a.sandbox_path)
        for a in plan.attachments
        if a.host_path is not None
    )
    empties = {m.sandbox_path: data_fd(b"") for b in paths.binds for m in b.masks if not m.exists and m.kind == "file"}
    empties.update({p: data_fd(b"") for p, kind in paths.blocks.items() if kind == "file"})
    empties.update({p: data_fd(b"") for p in paths.hidden_sockets})
    seccomp_fd = data_fd(bpf)
    supervisor_args = ["--control-fd", str(supervisor_sock)]
    if plan.layers.landlock is not None:
        supervisor_args += plan.layers.landlock.supervisor_args()
    inputs = BwrapInputs(
        # bubblewrap binds the idmapped views; host-side work keeps the real paths
        paths=with_bind_sources(paths, plan.bind_sources) if plan.bind_sources else paths,
        loader_links={p: os.readlink(p) for p in _LOADER_PATHS if os.path.islink(p)},
        loader_dirs=tuple(p for p in _LOADER_PATHS if os.path.isdir(p) and not os.path.islink(p)),
        etc_tree=etc_tree,
        supervisor_host_path=supervisor,
        supervisor_args=tuple(supervisor_args),
        data_fds=data_fds,
        socket_binds=socket_binds,
        empty_file_fd_for=empties,
        seccomp_fd=seccomp_fd,
        info_fd=info_w,
        disk_root=disk_root,
    )
    argv = plan_bwrap_argv(boundary, inputs, bwrap=plan.facts.bwrap_path or "bwrap")
    log.debug("bwrap argv: %s", argv)
    cgroup = plan.cgroup
    joins = cgroup.join_files() if cgroup is not None else ()
    uid, gid = plan.host_ids
    # Drop to the sandbox user in a tiny exec (the supervisor's launcher mode) rather than with
    # subprocess's user=, which forces a full fork of this process instead of vfork. On v1
    # the launcher also joins the cgroup first (see SandboxCgroup.join_files); it always
    # mounts the one disk budget that bwrap binds from (disk_budget.py).
    launcher = [supervisor, "--exec-as", str(uid), str(gid)]
    for tasks_file in joins:
        launcher += ["--join-cgroup", tasks_file]
    launcher += plan_launcher_disk_args(boundary, mountpoint=disk_root)
    argv = [*launcher, "--", *argv]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=owned,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            close_fds=True,
        )
    except OSError as exc:
        os.close(info_r)
        host_sock.close()
        raise SandboxStartError(
            f"cannot start bubblewrap: {exc.strerror}", "check that bwrap is installed and executable"
        ) from exc
    finally:
        for fd in owned:
            os.close(fd)
    channel = SupervisorChannel(host_sock)
    pid: int | None = None
    try:
        pid = _read_child_pid(info_r, proc)
        if cgroup is not None:
            if joins:  # inherited from the launcher before bwrap ran; confirm rather than assume
                cgroup.check_member(pid)
            else:
                cgroup.attach(pid)
    except BaseException as exc:
        stderr = ""
        if not isinstance(exc, SandboxStartError):  # _read_child_pid already quoted bwrap's stderr
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
            if proc.returncode is not None and proc.stderr is not None:
                stderr = proc.stderr.read(4096).decode(errors="replace").strip()
        _kill_spawned(proc, pid, cgroup)
        channel.close()
        if proc.stderr is not None:
            proc.stderr.close()
        if isinstance(exc, ContainError):
            raise
        raise SandboxStartError(
            f"the sandbox failed to start: {stderr or exc}", "run `contain doctor` to see what this host lacks"
        ) from exc
    assert pid is not None
    return proc, channel, pid


def _kill_spawned(proc: subprocess.Popen[bytes], pid: int | None, cgroup: SandboxCgroup | None) -> None:
    for target in (pid, proc.pid):
        if target is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all(timeout_s=5.0)
    with contextlib.suppress(subprocess.TimeoutExpired):  # the start error is what the caller needs
        proc.wait(timeout=5.0)


def _socketpair() -> tuple[socket.socket, int]:
    host, supervisor = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    supervisor_fd = supervisor.detach()
    os.set_inheritable(supervisor_fd, True)
    return host, supervisor_fd


def _read_child_pid(info_fd: int, proc: subprocess.Popen[bytes]) -> int:
    """Read bwrap's --info-fd JSON (written once the sandbox's pid 1 exists)."""
    chunks = []
    try:
        while chunk := os.read(info_fd, 4096):
            chunks.append(chunk)
            try:
                return int(json.loads(b"".join(chunks))["child-pid"])
            except (ValueError, KeyError):
                continue
    finally:
        os.close(info_fd)
    stderr = proc.stderr.read(4096).decode(errors="replace").strip() if proc.stderr else ""
    raise SandboxStartError(
        f"bubblewrap exited before the sandbox started: {stderr or 'no message'}", "run `contain doctor`"
    )


def _wait_for_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for ``proc`` with a pidfd, which wakes on exit instead of polling with sleeps."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:  # already reaped, or a kernel without pidfd (< 5.3)
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(timeout_s * 1000):
            return False
    finally:
        os.close(pidfd)
    proc.wait()
    return True
