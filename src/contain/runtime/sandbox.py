"""The Sandbox: one disposable environment that serves one or several runs.

``Sandbox.start()`` is the orchestrator, an ordered checklist:
  1. detect host facts and decide the layers (fail closed: ``plan_layers``);
  2. choose the host ids (as root: a leased uid, and the binds staged as idmapped views); gather
     facts about the bound host paths, then create the write binds' placeholders and record,
     through descriptors, what the audit at close compares against
     (``write_binds.prepare_write_binds``) — before any workload exists;
  3. create the cgroup and write its limits;
  4. hand the resulting ``BackendPlan`` to the backend (backend.py), which starts the sandbox, puts
     its init in the cgroup before any workload exists and returns once the init is ready
     (process_backend.py; container/backend.py for runc and runsc, whose cgroup is made under
     the container backend's own parent, ``backend_names.BACKEND_KINDS``);
  5. start egress listeners in the sandbox's network namespace (``netns_path`` of the running
     handle) when the boundary allows hosts, before any workload exists.
Any failure tears down what was built and raises ``SandboxStartError`` (or ``UnsupportedHost``).

``run()`` asks the backend to start one command with pipes the host made; the host caps the
output while streaming, enforces the wall clock and the cgroup CPU budget (run_loop.py), and after
the command ends the sandbox's init kills every process left in the sandbox. ``close()`` exports
scratch (bounded in bytes, entries and depth), stops the sandbox, removes the cgroup, and only then
audits the write binds through descriptors opened before the workload ran (git metadata the run
made, protected names it created, the placeholders); what it undid is in ``teardown_findings``.

Does not decide policy (that is the boundary), does not talk HTTP (that is egress), and knows no
backend's mechanism: bubblewrap, ``/proc/<pid>`` paths and the supervisor's protocol are the
process backend's.

Why one file past 600 lines: it is the orchestrator and nothing else (backend details are in
``process_backend``, the wait loop in ``run_loop``); the checklist above and the teardown that
undoes it are read together.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING

from contain._log import LazyLogger
from contain.boundary.kinds import FileAccess
from contain.boundary.plain import PlainBoundary, plain_boundary
from contain.errors import (
    ContainError,
    DeadlinePassed,
    FileTransferError,
    SandboxLost,
    SandboxStartError,
    UnsupportedHost,
)
from contain.host.facts import HostFacts, detect_host
from contain.runtime import files as sandbox_files
from contain.runtime.attachments import Attachment
from contain.runtime.backend import BackendPlan, CommandRequest, RunningSandbox, SandboxBackend
from contain.runtime.backend_names import BACKEND_KINDS, BackendSpec, RuntimeFacts, parse_backend_spec
from contain.runtime.cgroups import CgroupUsage, SandboxCgroup
from contain.runtime.disk_budget import default_scratch_paths
from contain.runtime.host_ids import HostIdLease, lease_host_ids
from contain.runtime.idmap import IdmapUnsupported, StagedBinds, sweep_stale_staging
from contain.runtime.paths import PathFacts, gather_path_facts
from contain.runtime.plan import (
    LayerPlan,
    has_write_binds,
    plan_base_env,
    plan_layers,
    plan_rlimits,
    sandbox_host_ids,
    should_lease_host_ids,
)
from contain.runtime.process import SandboxProcess
from contain.runtime.process_backend import ProcessBackend
from contain.runtime.result import Captured, RunResult, Timings, Usage, Violation
from contain.runtime.run_loop import wait_for_command
from contain.runtime.streams import CappedReader, StdinFeeder
from contain.runtime.supervisor_channel import SpawnFailed
from contain.runtime.write_binds import WriteBindGuard, prepare_write_binds

if TYPE_CHECKING:
    from contain.boundary.model import Boundary
    from contain.egress import EgressSession
    from contain.runtime.container.oci_runtime import OciRuntimeView

__all__ = ["BACKENDS", "Attachment", "Sandbox"]

log = LazyLogger(__name__)



def _process_backend(spec: BackendSpec, boundary: PlainBoundary) -> SandboxBackend:
    return ProcessBackend()


def _container_backend(spec: BackendSpec, boundary: PlainBoundary) -> SandboxBackend:
    from contain.runtime.container.backend import ContainerBackend  # only containers pay for the import

    assert spec.variant is not None  # parse_backend_spec sets it for every container spec
    return ContainerBackend(runtime=spec.variant, image=boundary.runtime.container.image)


def _microvm_backend(spec: BackendSpec, boundary: PlainBoundary) -> SandboxBackend:
    from contain.runtime.microvm.backend import MicroVMBackend  # only microVMs pay for the import

    return MicroVMBackend(accel=boundary.runtime.microvm.accel)


# backend kind (backend_names.BACKEND_KINDS) -> the backend that starts sandboxes of that kind
_BACKEND_FACTORIES: dict[str, Callable[[BackendSpec, PlainBoundary], SandboxBackend]] = {
    "process": _process_backend,
    "container": _container_backend,
    "microvm": _microvm_backend,
}
# every spec string Sandbox(backend=...) and --backend accept in this version
BACKENDS = tuple(
    name
    for kind in BACKEND_KINDS
    if kind.kind in _BACKEND_FACTORIES
    for name in (kind.kind, *(f"{kind.kind}:{v}" for v in kind.variants))
)
# Without egress nothing listens on 127.0.0.1:53, so lookups fail at once instead of timing out.
_DEFAULT_RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"


def _egress_module() -> ModuleType | None:
    try:
        from contain import egress
    except ImportError:
        return None
    return egress


def _plain(boundary: Boundary | PlainBoundary | None) -> PlainBoundary:
    if isinstance(boundary, PlainBoundary):
        return boundary
    if boundary is None:
        from contain.boundary.model import Boundary

        boundary = Boundary()
    return plain_boundary(boundary)


class Sandbox:
    """A disposable sandbox for one boundary, on the backend its spec names (process or container).

    Use as a context manager::

        with Sandbox(boundary) as sb:
            result = sb.run(["python3", "task.py"], timeout=30)

    Args:
        boundary: what the sandbox may touch, validated: a ``Boundary`` or its ``PlainBoundary``
            (what ``contain run`` passes, to skip pydantic); none is ``Boundary()``, scratch only
            with no network.
        backend: a spec of ``BACKENDS`` (``process``, ``container``, ``container:runc``,
            ``container:runsc``; backend_names.py), or a ``SandboxBackend`` object (tests pass
            ``RecordingBackend``); default: the boundary's ``runtime.backend`` (a bare
            ``container`` takes ``runtime.container.runtime``). ``RunResult.backend`` reports the
            full spec. Unknown names raise ``UnknownBackend``; a missing runtime binary
            ``UnsupportedHost``.
        facts: host facts (detected when omitted); tests pass constructed ones.
        host_environ: where ``via: env`` credentials are read from (default ``os.environ``).
    """

    def __init__(
        self,
        boundary: Boundary | PlainBoundary | None = None,
        *,
        backend: str | SandboxBackend | None = None,
        facts: HostFacts | None = None,
        host_environ: Mapping[str, str] | None = None,
        attachments: Sequence[Attachment] = (),
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.boundary = _plain(boundary)
        if backend is None or isinstance(backend, str):
            name = backend or self.boundary.runtime.backend.value
            if name == "none":
                raise UnsupportedHost(
                    "the boundary declares runtime.backend: none (its code runs without a contain runtime)",
                    "set runtime.backend: process to run it in a sandbox",
                )
            spec = parse_backend_spec(name, default_container_runtime=self.boundary.runtime.container.runtime)
            if spec.kind not in _BACKEND_FACTORIES:
                raise UnsupportedHost(
                    f"backend {spec} is not available in this version",
                    f"use one of: {', '.join(BACKENDS)}",
                )
            self._backend: SandboxBackend = _BACKEND_FACTORIES[spec.kind](spec, self.boundary)
        else:
            self._backend = backend
        self.backend = self._backend.name
        # each backend kind keeps its cgroups under a parent of its own (backend_names.BACKEND_KINDS)
        self._cgroup_parent = parse_backend_spec(self.backend).row.cgroup_parent
        facts_of_runtime = getattr(self._backend, "runtime_facts", None)  # container backends probe their binary
        self._runtime_facts = facts_of_runtime if isinstance(facts_of_runtime, RuntimeFacts) else None
        self._attachments = tuple(attachments)
        self._extra_env = dict(extra_env or {})
        for attachment in self._attachments:
            attachment.validate()
        self._facts = facts
        self._host_environ = host_environ if host_environ is not None else os.environ
        self._lock = threading.Lock()
        self._destroy_lock = threading.Lock()  # destroy() never reaches a handle close() has begun to stop
        self._started = False  # set once the backend was asked to start (a workload may exist after)
        self._handle: RunningSandbox | None = None
        self._cgroup: SandboxCgroup | None = None
        self._egress: EgressSession | None = None
        self._paths: PathFacts | None = None
        self._write_binds: WriteBindGuard | None = None
        self._export_destinations: dict[str, sandbox_files.ExportDestination] = {}
        self._lease: HostIdLease | None = None
        self._staged: StagedBinds | None = None
        self._ids: tuple[int, int] | None = None
        self._ids_report = ""
        self._layers: LayerPlan | None = None
        self._base_env: dict[str, str] = {}
        self._setup_s = 0.0
        self._setup_reported = False
        self._closed = False
        self._lost: str | None = None
        self.scratch_paths = default_scratch_paths(self.boundary)
        self.export_reports: dict[str, sandbox_files.ExportReport] = {}
        self.teardown_findings: list[str] = []  # what close() had to undo, one line each

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def layers(self) -> dict[str, str]:
        """One line per isolation layer, as applied (empty before start)."""
        return dict(self._layers.report) if self._layers else {}

    @property
    def sandbox_backend(self) -> SandboxBackend:
        """The backend object that starts this sandbox (a pool asks it for a warm start)."""
        return self._backend

    @property
    def oci_runtime(self) -> OciRuntimeView | None:
        """For outside judges: the OCI runtime of a running container sandbox (binary, state
        directory, container name, argv prefix; ``oci_runtime.OciRuntimeView``). None on other
        backends, before start and after close."""
        # imported here: a process sandbox's start must not pay for the container package
        from contain.runtime.container.oci_runtime import OciRuntimeView

        view = getattr(self._handle, "oci_runtime", None)
        return view if isinstance(view, OciRuntimeView) else None

    @property
    def supervisor_pid(self) -> int | None:
        """Host pid of the sandbox's init, for outside judges (the running handle's ``host_pid``)."""
        return self._handle.host_pid if self._handle is not None else None

    def start(self) -> None:
        """Build the sandbox; see the module docstring for the steps.

        Raises:
            UnsupportedHost: a layer the boundary needs is missing.
            SandboxStartError: anything else went wrong; nothing is left behind.
        """
        if self._started or self._closed:
            raise SandboxStartError("this sandbox was already started", "create a new Sandbox for a new task")
        began = time.perf_counter()
        facts = self._facts or detect_host()
        egress = _egress_module() if self.boundary.allows_network else None
        layers = plan_layers(
            self.boundary,
            facts,
            egress_available=egress is not None,
            backend=self._backend.name,
            runtime=self._runtime_facts,
        )
        try:
            uid, gid = self._choose_host_ids(facts)
            self._layers = layers = replace(layers, report={**layers.report, "host uid": self._ids_report})
            facts_before = gather_path_facts(
                self.boundary, sandbox_host_uid=uid, sandbox_host_gid=gid, idmapped=self._staged is not None
            )
            self._paths, self._write_binds = prepare_write_binds(facts_before)
            if self._paths.hidden_sockets:
                self._layers = layers = replace(
                    layers, report={**layers.report, "unix sockets": _hidden_sockets_line(self._paths.hidden_sockets)}
                )
            self._export_destinations = {
                r.path: sandbox_files.anchor_export_destination(r.export)
                for r in self.boundary.files
                if r.access is FileAccess.SCRATCH and r.export
            }
            if layers.cgroups:
                self._cgroup = SandboxCgroup.create(
                    f"{os.getpid()}-{os.urandom(5).hex()}",
                    self.boundary.resources,
                    facts,
                    launcher_joins=self._backend.cgroup_joined_at_exec(facts),
                    parent_name=self._cgroup_parent,
                )
            plan = BackendPlan(
                boundary=self.boundary,
                facts=facts,
                layers=layers,
                host_ids=(uid, gid),
                paths=self._paths,
                bind_sources=dict(self._staged.staged) if self._staged is not None else {},
                attachments=self._attachments,
                resolv_conf=egress.RESOLV_CONF_TEXT if egress is not None else _DEFAULT_RESOLV_CONF,
                cgroup=self._cgroup,
            )
            self._started = True
            self._handle = self._backend.start(plan)
            started = getattr(self._backend, "layer_report", None)  # lines known only once started (microvm)
            if isinstance(started, dict) and started:
                self._layers = layers = replace(layers, report={**layers.report, **started})
            if egress is not None:
                self._egress = egress.start_egress(self.boundary, netns_path=self._handle.netns_path)
        except BaseException as exc:
            self._teardown()
            if isinstance(exc, ContainError):
                raise
            raise SandboxStartError(
                f"the sandbox failed to start: {exc}", "run `contain doctor` to see what this host lacks"
            ) from exc
        egress_env = self._egress.sandbox_env() if self._egress is not None else {}
        self._base_env = plan_base_env(self.boundary, host_environ=self._host_environ, egress_env=egress_env)
        self._base_env.update(self._extra_env)
        self._setup_s = time.perf_counter() - began

    def _choose_host_ids(self, facts: HostFacts) -> tuple[int, int]:
        """The host ids the sandbox runs as; as root, also stages its binds (``self._staged``).

        As root: a uid leased for this sandbox alone (RE-09: per-user kernel limits are not
        shared), with every bind staged as an idmapped mount that shows the bind's owner as that
        uid (``runtime.idmap``). Where idmapping is refused, read binds stay as they are (the
        leased uid reads what "other" may read) and a boundary with write binds falls back to the
        shared uid nobody; the layers report says which and why.
        """
        if not should_lease_host_ids(facts):
            self._ids = sandbox_host_ids(facts)
            self._ids_report = f"{self._ids[0]} (the caller's)"
            return self._ids
        sweep_stale_staging()
        self._lease = lease_host_ids()
        self._ids = (self._lease.uid, self._lease.gid)
        try:
            self._stage_idmapped_binds()
        except IdmapUnsupported as exc:
            if self._staged is not None:
                self._staged.close()
                self._staged = None
            if has_write_binds(self.boundary):
                self._lease.release()
                self._lease = None
                self._ids = sandbox_host_ids(facts)
                self._ids_report = (
                    f"{self._ids[0]} (nobody, shared with other sandboxes: write binds need idmapped mounts; {exc})"
                )
            else:
                self._ids_report = f"{self._ids[0]} (leased for this sandbox alone; binds not idmapped: {exc})"
            return self._ids
        idmapped = " and owns its binds through idmapped mounts" if self._staged is not None else ""
        self._ids_report = f"{self._ids[0]} (leased for this sandbox alone{idmapped})"
        return self._ids

    def _stage_idmapped_binds(self) -> None:
        """Stage each present read/write bind, and each attached host socket, as an idmapped view
        (``self._staged.staged``): the broker's socket can then be 0600 to its owner and still be
        connectable by this sandbox, and by no other local user."""
        sources = [
            (rule.host, rule.access is FileAccess.READ)
            for rule in self.boundary.files
            if rule.access in (FileAccess.READ, FileAccess.WRITE) and rule.host is not None
        ]
        sources += [(a.host_path, True) for a in self._attachments if a.host_path is not None]
        for host, read_only in sources:
            try:
                real = os.path.realpath(host, strict=True)
            except OSError:  # missing: gather_path_facts skips it or names it in the error
                continue
            if self._staged is None:
                assert self._lease is not None
                self._staged = StagedBinds.create(leased_uid=self._lease.uid, leased_gid=self._lease.gid)
            self._staged.stage(real, read_only=read_only)

    # -- runs ------------------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> RunResult:
        """Run one command to completion inside the sandbox.

        Args:
            argv: the command; a bare name is looked up on the sandbox's PATH.
            stdin: bytes fed to the command (default: /dev/null).
            timeout: wall-clock seconds (default and maximum: the boundary's ``wall_s``).
            env: variables added to this run's environment (nothing of the caller's is inherited).
            cwd: working directory inside the sandbox (default: the first scratch path).

        Returns:
            The RunResult; a command that could not be executed has exit code 126 or 127.

        Raises:
            SandboxLost: the sandbox died or stopped answering; it cannot be used again.
        """
        if not argv:
            raise ValueError("argv cannot be empty")
        with self._lock:
            if not self._started:
                self.start()
            return self._run_locked(self._running(), list(argv), stdin, timeout, env, cwd)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        keep_stderr: bool = True,
    ) -> SandboxProcess:
        """Start a long-lived command with live pipes (for stdio servers); see ``SandboxProcess``.

        The sandbox runs nothing else until the process ends. ``timeout`` (default and maximum:
        the boundary's ``wall_s``) kills it; output is not captured or capped here.

        Raises:
            SandboxStartError: the command could not be executed (the stage and errno are named).
            SandboxLost: the sandbox is no longer usable.
        """
        if not argv:
            raise ValueError("argv cannot be empty")
        self._lock.acquire()
        try:
            if not self._started:
                self.start()
            handle = self._running()
            assert self._layers is not None
            resources = self.boundary.resources
            wall = min(timeout, resources.wall_s) if timeout is not None else resources.wall_s
            run_env = {**self._base_env, **(env or {})}
            in_child, in_host = os.pipe2(os.O_CLOEXEC)
            out_host, out_child = os.pipe2(os.O_CLOEXEC)
            if keep_stderr:
                err_host, err_child = os.pipe2(os.O_CLOEXEC)
            else:
                err_host, err_child = None, os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC)
            try:
                request = CommandRequest(
                    tuple(argv),
                    run_env,
                    cwd or self.scratch_paths[0],
                    tuple(plan_rlimits(resources, cgroups=self._layers.cgroups)),
                    deadline=time.monotonic() + wall,
                )
                try:
                    reply = handle.spawn(request, (in_child, out_child, err_child))
                except SandboxLost as exc:
                    self._mark_lost(exc.cause)
                    raise
            finally:
                for fd in (in_child, out_child, err_child):
                    os.close(fd)
            if isinstance(reply, SpawnFailed):
                for host_fd in (in_host, out_host, err_host):
                    if host_fd is not None:
                        os.close(host_fd)
                raise SandboxStartError(
                    f"cannot run {argv[0]!r} in the sandbox ({reply.stage}): {os.strerror(reply.errno)}",
                    "check the command's path inside the sandbox",
                )
        except BaseException:
            self._lock.release()
            raise
        return SandboxProcess(
            handle,
            stdin=in_host,
            stdout=out_host,
            stderr=err_host,
            deadline=time.monotonic() + wall,
            on_lost=self._mark_lost,
            on_done=self._lock.release,
        )

    def _running(self) -> RunningSandbox:
        """The running handle, or SandboxLost when the sandbox cannot serve another command."""
        if self._lost:
            raise SandboxLost(f"this sandbox is no longer usable: {self._lost}", "start a new Sandbox")
        if self._handle is None:
            raise SandboxLost("this sandbox is not running (its start failed or it was closed)", "start a new Sandbox")
        return self._handle

    def _mark_lost(self, reason: str) -> None:
        self._lost = reason
        self._destroy()

    def _run_locked(
        self,
        handle: RunningSandbox,
        argv: list[str],
        stdin: bytes | None,
        timeout: float | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
    ) -> RunResult:
        assert self._layers is not None
        resources = self.boundary.resources
        wall = min(timeout, resources.wall_s) if timeout is not None else resources.wall_s
        run_env = dict(self._base_env)
        if env:
            run_env.update(env)
        workdir = cwd or self.scratch_paths[0]
        if self._egress is not None:
            self._egress.drain_events()
        before = self._cgroup.usage() if self._cgroup else None
        if self._cgroup:
            self._cgroup.reset_peak()

        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        if stdin is None:
            in_child = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
            in_host = None
        else:
            in_child, in_host = os.pipe2(os.O_CLOEXEC)
        began = time.perf_counter()
        try:
            request = CommandRequest(
                tuple(argv),
                run_env,
                workdir,
                tuple(plan_rlimits(resources, cgroups=self._layers.cgroups)),
                deadline=time.monotonic() + wall,
            )
            reply = handle.spawn(request, (in_child, out_w, err_w))
        except SandboxLost as exc:
            for fd in (out_r, out_w, err_r, err_w, in_child, in_host):
                if fd is not None:
                    os.close(fd)
            if isinstance(exc, DeadlinePassed):  # the run's wall clock ran out before the command started
                self._mark_lost(exc.cause)
                return self._deadline_result(wall, exc.cause, time.perf_counter() - began)
            self._lost = exc.cause
            raise
        for fd in (in_child, out_w, err_w):
            os.close(fd)
        if isinstance(reply, SpawnFailed):
            for fd in (out_r, err_r, in_host):
                if fd is not None:
                    os.close(fd)
            return self._spawn_failed_result(argv, reply, time.perf_counter() - began)

        stdout = CappedReader(out_r, resources.output_bytes)
        stderr = CappedReader(err_r, resources.output_bytes)
        feeder = StdinFeeder(in_host, stdin or b"") if in_host is not None else None
        violations: list[Violation] = []
        outcome = wait_for_command(
            handle,
            stdout,
            stderr,
            feeder,
            deadline=began + wall,
            cpu_budget_s=resources.cpu_s,
            cpu_used=_cpu_used_since(self._cgroup, before),
            on_lost=self._mark_lost,
        )
        exited, timed_out, cpu_killed = outcome.exited, outcome.timed_out, outcome.cpu_killed
        run_s = time.perf_counter() - began
        after = self._cgroup.usage() if self._cgroup else None

        # A guest kernel's cgroup is invisible to the host's: the exit report carries its counts.
        oom = bool(after and before and after.oom_kills > before.oom_kills) or bool(exited and exited.oom_kills)
        if after is not None and before is not None:
            usage = Usage(max(0.0, after.cpu_s - before.cpu_s), after.memory_peak_bytes, "cgroup")
        else:
            usage = Usage(
                (exited.utime_us + exited.stime_us) / 1e6 if exited else 0.0,
                (exited.maxrss_kb * 1024) if exited else None,
                "supervisor rusage",
            )
        exit_code, sig = _decode_status(exited.status) if exited else (None, signal.SIGKILL)
        if timed_out:
            violations.append(
                Violation("timeout", f"the command ran past the {wall:g}s wall-clock limit and was killed")
            )
        if cpu_killed or sig in (signal.SIGXCPU,):
            violations.append(Violation("cpu", f"the command used its {resources.cpu_s:g}s CPU budget and was killed"))
        if oom:
            violations.append(
                Violation(
                    "memory",
                    f"the sandbox exceeded its {resources.memory_bytes} byte memory limit; "
                    "the kernel killed the largest process",
                )
            )
        pids_hit = after is not None and before is not None and after.pids_limit_hits > before.pids_limit_hits
        if pids_hit or (exited is not None and exited.pids_limit_hits > 0):
            violations.append(
                Violation("pids", f"process creation was refused at the {resources.pids_max}-process limit")
            )
        for name, cap in (("stdout", stdout), ("stderr", stderr)):
            if cap.truncated:
                violations.append(
                    Violation("output", f"{name} exceeded {resources.output_bytes} bytes; it was truncated and closed")
                )
        egress_events: list[dict[str, object]] = []
        egress_dropped: dict[str, object] = {}
        if self._egress is not None:
            self._egress.settle()
            batch = self._egress.drain_events()
            for event in batch.events:
                egress_events.append(event.to_dict())
                message = event.violation_message()
                if message:
                    violations.append(
                        Violation("egress", message, event.rule_id, {"host": event.host, "port": event.port})
                    )
            if batch.truncated:
                egress_dropped = batch.dropped.to_dict()
                dropped_message = batch.dropped.violation_message()
                if dropped_message:
                    violations.append(Violation("egress", dropped_message, "egress.log_bounded", egress_dropped))
        setup = self._take_setup_s()
        return RunResult(
            exit_code=exit_code,
            signal=sig,
            timed_out=timed_out,
            oom_killed=oom,
            stdout=stdout.result(),
            stderr=stderr.result(),
            timings=Timings(setup_s=setup, run_s=run_s, teardown_s=0.0),
            usage=usage,
            violations=tuple(violations),
            backend=self.backend,
            egress=tuple(egress_events),
            layers=self.layers,
            egress_dropped=egress_dropped,
        )

    def _take_setup_s(self) -> float:
        """The sandbox's start-up time for the first result that reports it; 0.0 for every later one."""
        setup = 0.0 if self._setup_reported else self._setup_s
        self._setup_reported = True
        return setup

    def _deadline_result(self, wall: float, cause: str, elapsed: float) -> RunResult:
        """A run whose deadline passed before the sandbox answered its start: timed out, as a kill at
        the wall-clock limit would report it (the sandbox is lost; ``cause`` says why)."""
        setup = self._take_setup_s()
        violation = Violation(
            "timeout", f"the command ran past the {wall:g}s wall-clock limit before it started ({cause[:300]})"
        )
        return RunResult(
            exit_code=None,
            signal=signal.SIGKILL,
            timed_out=True,
            oom_killed=False,
            stdout=Captured(b"", False, 0),
            stderr=Captured(b"", False, 0),
            timings=Timings(setup, elapsed, 0.0),
            usage=Usage(0.0, None, "none"),
            violations=(violation,),
            backend=self.backend,
            layers=self.layers,
        )

    def _spawn_failed_result(self, argv: list[str], reply: SpawnFailed, elapsed: float) -> RunResult:
        reason = os.strerror(reply.errno)
        code = 127 if reply.errno == errno.ENOENT else 126
        message = f"contain: cannot run {argv[0]!r} ({reply.stage}): {reason}\n".encode()
        setup = self._take_setup_s()
        return RunResult(
            exit_code=code,
            signal=None,
            timed_out=False,
            oom_killed=False,
            stdout=Captured(b"", False, 0),
            stderr=Captured(message, False, len(message)),
            timings=Timings(setup, elapsed, 0.0),
            usage=Usage(0.0, None, "none"),
            violations=(),
            backend=self.backend,
            layers=self.layers,
        )

    # -- files -----------------------------------------------------------------------------------

    def _live(self) -> RunningSandbox:
        if self._handle is None or self._lost:
            raise FileTransferError("the sandbox is not running", "start the sandbox first")
        return self._handle

    def put_file(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` under a scratch path, owned by the sandbox user.

        Raises:
            FileTransferError: outside scratch, through a symlink, or over the disk budget.
        """
        if len(data) > self.boundary.resources.disk_bytes:
            raise FileTransferError(f"{len(data)} bytes exceed the disk budget", "raise resources.disk_bytes")
        if not self._started:
            self.start()
        root, relative = sandbox_files.scratch_relative(path, self.scratch_paths)
        self._live().put_file(root, relative, data, mode=mode & 0o777, label=path)

    def get_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read a regular file under a scratch path (symlinks are refused, never followed).

        Raises:
            FileTransferError: outside scratch, missing, a symlink, or larger than ``max_bytes``.
        """
        root, relative = sandbox_files.scratch_relative(path, self.scratch_paths)
        limit = max_bytes if max_bytes is not None else self.boundary.resources.disk_bytes
        return self._live().get_file(root, relative, max_bytes=limit, label=path)

    def close(self) -> float:
        """Export scratch, stop everything, and remove every trace. Idempotent.

        What the export skipped and what the teardown undid are in ``export_reports`` and
        ``teardown_findings``; neither raises.

        Returns:
            Seconds the teardown took.

        Raises:
            SandboxLost: a sandbox process survived teardown (never expected; reported loudly).
        """
        if self._closed:
            return 0.0
        began = time.perf_counter()
        with self._lock:
            with self._destroy_lock:
                self._closed = True
            try:
                if self._handle is not None and not self._lost:
                    self._export_scratch()
            finally:
                self._teardown()
        return time.perf_counter() - began

    def _export_scratch(self) -> None:
        """Copy each exported scratch path to the host; bounded, and never fatal to the run's result.

        A failure is recorded in that path's report (``stopped``) and in ``teardown_findings``
        instead of raised: the run already happened, and its result must reach the caller.
        """
        budget = self.boundary.resources.disk_bytes
        for rule in self.boundary.files:
            destination = self._export_destinations.get(rule.path)
            if destination is not None:
                try:
                    report = self._live().export(rule.path, destination, max_bytes=budget)
                except (OSError, FileTransferError) as exc:
                    log.warning("export of %s to %s failed: %s", rule.path, rule.export, exc)
                    report = sandbox_files.ExportReport(stopped=f"the export failed: {exc}")
                self.export_reports[rule.path] = report
                self.teardown_findings += [f"export of {rule.path}: {line}" for line in report.lines()]

    def _teardown(self) -> None:
        """Stop the sandbox (its backend), kill leftovers through the cgroup, remove host traces."""
        if self._handle is not None:
            self._handle.close()
        if self._egress is not None:
            self._egress.close()
            self._egress = None
        if self._cgroup is not None:
            self._cgroup.remove(timeout_s=5.0)
            self._cgroup = None
        for destination in self._export_destinations.values():
            destination.close()
        self._export_destinations = {}
        if self._write_binds is not None:
            # Only once every sandbox process is gone; through descriptors opened before it ran.
            self.teardown_findings += self._write_binds.close(workload_ran=self._started)
            self._write_binds = None
        if self._staged is not None:  # after the clean-up above, which works through the staged binds
            self._staged.close()
            self._staged = None
        if self._lease is not None:
            self._lease.release()  # only once nothing of the sandbox runs as this uid any more
            self._lease = None
        self._handle = None

    def destroy(self) -> None:
        """Kill every process of the sandbox from outside now, from any thread, without waiting
        for a command in progress (that command then ends killed, or raises ``SandboxLost``).

        The sandbox cannot run again; ``close()`` must still be called to remove its host traces.
        Does nothing once ``close()`` has begun (close stops every process itself).
        """
        with self._destroy_lock:
            if self._closed:
                return
            self._lost = self._lost or "it was destroyed from outside (Sandbox.destroy)"
            handle = self._handle
            if handle is not None:
                handle.destroy()

    def _destroy(self) -> None:
        """Kill the whole sandbox from the host, through its backend."""
        if self._handle is not None:
            self._handle.destroy()


def _cpu_used_since(cgroup: SandboxCgroup | None, before: CgroupUsage | None) -> Callable[[], float] | None:
    """CPU seconds the cgroup used since ``before`` was read; None without a cgroup."""
    if cgroup is None or before is None:
        return None
    return lambda: cgroup.usage().cpu_s - before.cpu_s


def _hidden_sockets_line(paths: tuple[str, ...]) -> str:
    shown = ", ".join(paths[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")
    return f"{len(paths)} found in binds and hidden (name them in allow_sockets to keep them): {shown}"


def _decode_status(status: int) -> tuple[int | None, int | None]:
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return None, None
