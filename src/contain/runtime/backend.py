"""The runtime's backend seam: what ``Sandbox`` asks of a backend, and a recording fake.

``Sandbox`` (sandbox.py) orchestrates: host facts, the layer decision, host ids and idmapped
staging, path facts and write binds, the cgroup, egress, results. A backend turns the resulting
``BackendPlan`` into a running sandbox (``SandboxBackend.start``) and returns a ``RunningSandbox``
handle. The handle is the only way ``Sandbox`` reaches the running sandbox:

- ``spawn`` asks the sandbox's init to start one command with descriptors the host made;
  ``wait_exited``, ``fileno`` and ``kill`` follow that command (``run_loop.py`` waits on them),
  ``destroy`` kills the whole sandbox from outside;
- ``put_file``, ``get_file`` and ``export`` move files under a scratch path that ``Sandbox`` has
  already checked against the boundary;
- ``host_pid``, ``netns_path`` and ``cgroup`` are what outside judges (the probe) and egress need:
  nobody outside a backend assumes ``/proc/<pid>`` of anything;
- ``close`` stops the sandbox; once it returns no process of it is left.

Warm start (optional; ``WarmStartCapable``): a backend that can start many sandboxes of one boundary
faster than one by one (the microVM: boot once, snapshot, restore per sandbox) offers
``open_warm_start()``; a pool (pool.py) calls it once and then starts each of its sandboxes through
the returned ``WarmStart`` instead of ``start``. A backend without it is started fresh per
sandbox, exactly as a one-shot ``Sandbox`` does; that is the default.

Backends: ``process`` (process_backend.py: bubblewrap with the in-sandbox supervisor as pid 1) and
``RecordingBackend`` below, which records the plans and calls it was given and answers from a
script, so orchestration is tested without a kernel.

Does not decide policy: a backend enforces the plan it is given and refuses (``UnsupportedHost``,
``SandboxStartError``) what it cannot enforce. It never weakens a plan. Scratch-path checks
(``files.scratch_relative``) and the disk budget of a single transfer stay in ``Sandbox``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from contain.boundary.plain import PlainBoundary
from contain.errors import FileTransferError, SandboxLost
from contain.host.facts import HostFacts
from contain.runtime.attachments import Attachment
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.files import ExportDestination, ExportReport
from contain.runtime.paths import PathFacts
from contain.runtime.plan import LayerPlan
from contain.runtime.supervisor_channel import Exited, Rlimit, SpawnFailed, Started

__all__ = [
    "BackendPlan",
    "CommandControl",
    "CommandRequest",
    "RecordingBackend",
    "RecordingRunning",
    "RunningSandbox",
    "SandboxBackend",
    "WarmStart",
    "WarmStartCapable",
]


class BackendPlan(NamedTuple):
    """Everything a backend needs to start one sandbox, decided by ``Sandbox`` before the start.

    Attributes:
        boundary: the validated boundary.
        facts: the host facts the layers were planned from.
        layers: the layer decision (``plan_layers``) the backend must apply, all of it.
        host_ids: host uid and gid the sandbox runs as.
        paths: the bound host paths' facts (masks, blocks, hidden sockets), gathered before start.
        bind_sources: real host path -> the idmapped view to bind instead (empty: bind as is).
        attachments: files and sockets handed in under /.contain.
        resolv_conf: the sandbox's /etc/resolv.conf text.
        cgroup: the sandbox's cgroup, created and limited by ``Sandbox``; the backend puts the
            sandbox's init in it before any workload exists. None when cgroups are off.
    """

    boundary: PlainBoundary
    facts: HostFacts
    layers: LayerPlan
    host_ids: tuple[int, int]
    paths: PathFacts
    bind_sources: Mapping[str, str]
    attachments: tuple[Attachment, ...]
    resolv_conf: str
    cgroup: SandboxCgroup | None


class CommandRequest(NamedTuple):
    """One command for the sandbox's init to start; ``fds`` are the command's stdin, stdout, stderr.

    ``deadline`` (``time.monotonic()`` seconds, None: none) is when the run ends; a backend whose
    start request can wait on a remote side (the microVM's agent) stops waiting then and raises
    ``DeadlinePassed`` instead of waiting out its own reply timeout.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    rlimits: tuple[Rlimit, ...]
    deadline: float | None = None


class CommandControl(Protocol):
    """Following the one command that runs: what the wait loop and ``SandboxProcess`` need."""

    def wait_exited(self, timeout_s: float | None) -> Exited | None:
        """The command's exit report, or None when ``timeout_s`` passed first.

        Raises:
            SandboxLost: the sandbox's init is gone or answered out of step.
        """
        ...

    def fileno(self) -> int:
        """A descriptor that turns readable when a report may be waiting."""
        ...

    def kill(self) -> None:
        """Kill the command and every process it started; ``wait_exited`` then reports.

        Raises:
            SandboxLost: the sandbox's init is gone.
        """
        ...


class RunningSandbox(CommandControl, Protocol):
    """A started sandbox, as its backend runs it. One command at a time."""

    @property
    def host_pid(self) -> int:
        """A host pid inside the sandbox's namespaces (its init), for outside judges."""
        ...

    @property
    def netns_path(self) -> str:
        """Where egress attaches: a path to the sandbox's network namespace."""
        ...

    @property
    def cgroup(self) -> SandboxCgroup | None:
        """The cgroup every process of the sandbox is counted in (None when cgroups are off)."""
        ...

    def spawn(self, request: CommandRequest, fds: tuple[int, int, int]) -> Started | SpawnFailed:
        """Start one command; the caller keeps and closes its copies of ``fds``.

        Raises:
            SandboxLost: the sandbox no longer answers.
        """
        ...

    def put_file(self, scratch_root: str, relative: str, data: bytes, *, mode: int, label: str) -> None:
        """Write a file under ``scratch_root`` as the sandbox user, never through a symlink.

        Raises:
            FileTransferError: the file cannot be written.
        """
        ...

    def get_file(self, scratch_root: str, relative: str, *, max_bytes: int, label: str) -> bytes:
        """Read a regular file under ``scratch_root`` as the sandbox user, never through a symlink.

        Raises:
            FileTransferError: missing, not a regular file, or larger than ``max_bytes``.
        """
        ...

    def export(self, sandbox_path: str, destination: ExportDestination, *, max_bytes: int) -> ExportReport:
        """Copy the tree at ``sandbox_path`` to ``destination``, bounded.

        Raises:
            FileTransferError, OSError: the export could not start.
        """
        ...

    def destroy(self) -> None:
        """Kill every process of the sandbox from outside (used when it stops answering)."""
        ...

    def close(self) -> None:
        """Stop the sandbox and wait for its processes; idempotent."""
        ...


class SandboxBackend(Protocol):
    """Starts sandboxes from plans. ``name`` is what ``RunResult.backend`` reports."""

    name: str

    def cgroup_joined_at_exec(self, facts: HostFacts) -> bool:
        """Whether this backend's launcher joins the cgroup itself before exec (``SandboxCgroup.create``'s
        ``launcher_joins``)."""
        ...

    def start(self, plan: BackendPlan) -> RunningSandbox:
        """Start the sandbox and return once its init is ready for a first command.

        On failure the backend removes what it built (``Sandbox`` removes the rest).

        Raises:
            UnsupportedHost: a layer of the plan cannot be applied here.
            SandboxStartError: anything else.
        """
        ...


class WarmStart(Protocol):
    """A backend's faster start for the sandboxes of one pool (one boundary).

    The contract (what a pool and its tasks rely on; a backend that cannot keep it does not offer
    a warm start):

    - ``start(plan)`` gets each sandbox's own ``BackendPlan``, planned by ``Sandbox`` exactly as
      for a one-shot sandbox (its own host ids, cgroup, idmapped sources, attachments) from the
      pool's one boundary, and must apply all of it, as ``SandboxBackend.start`` would;
    - the sandbox it returns holds nothing written by another sandbox, and gets a fresh identity
      a one-shot sandbox would get: its own namespaces or VM, hostname, ids and, for a restored
      VM, a guest RNG reseeded from the host after the restore;
    - ``start`` is called from one thread at a time (the pool's refill thread); the handles it
      returns are used from any thread, each by one task;
    - ``close()`` (once, when the pool closes, after every sandbox it started was closed) removes
      whatever the warm start kept for the pool (open snapshots, a template VM); content-addressed
      cache artefacts (a microVM template file, like the guest images) stay in the cache.
    """

    def start(self, plan: BackendPlan) -> RunningSandbox:
        """Start one sandbox from ``plan``; raises as ``SandboxBackend.start`` does."""
        ...

    def close(self) -> None:
        """Remove everything the warm start kept; idempotent."""
        ...


@runtime_checkable
class WarmStartCapable(Protocol):
    """A ``SandboxBackend`` that also offers a warm start (the capability is this one method)."""

    def open_warm_start(self) -> WarmStart:
        """A warm start for the sandboxes of one pool; it may do its expensive preparation (boot,
        snapshot) lazily, on its first ``start``, which then gets that sandbox's plan."""
        ...


# -- the recording fake ---------------------------------------------------------------------------


class RecordingRunning:
    """A fake running sandbox: records every call in its backend's ``calls`` and answers from its
    backend's script. No process, namespace or file exists behind it."""

    def __init__(self, backend: RecordingBackend, *, cgroup: SandboxCgroup | None = None) -> None:
        self.backend = backend
        self.host_pid = 4242
        self.netns_path = "/fake/netns"
        self.cgroup = cgroup
        self.files: dict[str, bytes] = {}
        self._exited: Exited | None = None

    def _record(self, *call: object) -> None:
        self.backend.calls.append(call)

    def spawn(self, request: CommandRequest, fds: tuple[int, int, int]) -> Started | SpawnFailed:
        self._record("spawn", request)
        if not self.backend.replies:
            raise SandboxLost("the recording backend has no scripted reply left", "script one more reply")
        reply = self.backend.replies.pop(0)
        if isinstance(reply, SpawnFailed):
            return reply
        self._exited = reply
        return Started(pid=self.host_pid + 1)

    def wait_exited(self, timeout_s: float | None) -> Exited | None:
        exited, self._exited = self._exited, None
        return exited

    def fileno(self) -> int:
        return self.backend.wakeup_fd

    def kill(self) -> None:
        self._record("kill")

    def put_file(self, scratch_root: str, relative: str, data: bytes, *, mode: int, label: str) -> None:
        self._record("put_file", scratch_root, relative, mode)
        self.files[f"{scratch_root}/{relative}"] = data

    def get_file(self, scratch_root: str, relative: str, *, max_bytes: int, label: str) -> bytes:
        self._record("get_file", scratch_root, relative, max_bytes)
        try:
            data = self.files[f"{scratch_root}/{relative}"]
        except KeyError:
            raise FileTransferError(f"{label} does not exist in the sandbox", "write it first") from None
        if len(data) > max_bytes:
            raise FileTransferError(f"{label} is larger than {max_bytes} bytes", "raise max_bytes")
        return data

    def export(self, sandbox_path: str, destination: ExportDestination, *, max_bytes: int) -> ExportReport:
        self._record("export", sandbox_path, max_bytes)
        return ExportReport()

    def destroy(self) -> None:
        self._record("destroy")

    def close(self) -> None:
        self._record("close")


class RecordingBackend:
    """A backend for tests: stores each ``BackendPlan`` in ``plans`` and every call in ``calls``.

    ``replies`` scripts what successive ``spawn`` calls answer: an ``Exited`` (the command starts
    and then reports it) or a ``SpawnFailed``. ``start_error`` makes ``start`` raise it (after
    recording the plan). ``wakeup_fd`` must be a readable descriptor (``fileno`` returns it for the
    wait loop's select); a socketpair end with one byte written is enough.
    """

    def __init__(
        self,
        *,
        wakeup_fd: int,
        replies: list[Exited | SpawnFailed] | None = None,
        start_error: BaseException | None = None,
        name: str = "process",
    ) -> None:
        self.wakeup_fd = wakeup_fd
        self.replies: list[Exited | SpawnFailed] = list(replies or [])
        self.start_error = start_error
        self.name = name
        self.plans: list[BackendPlan] = []
        self.calls: list[tuple[object, ...]] = []

    def cgroup_joined_at_exec(self, facts: HostFacts) -> bool:
        return False

    def start(self, plan: BackendPlan) -> RecordingRunning:
        self.plans.append(plan)
        self.calls.append(("start",))
        if self.start_error is not None:
            raise self.start_error
        return RecordingRunning(self, cgroup=plan.cgroup)


if TYPE_CHECKING:  # mypy checks that the fake keeps up with the Protocol (the process backend is
    # checked where sandbox.py registers it in _BACKEND_FACTORIES)
    _FAKE_CONFORMS: type[SandboxBackend] = RecordingBackend
    _FAKE_HANDLE_CONFORMS: type[RunningSandbox] = RecordingRunning
