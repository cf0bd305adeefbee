"""Where attack code runs: contain's own backend, a wrapped third-party sandbox, or the bare host.

- ``ContainTarget(spec)`` runs each attack in a fresh ``Sandbox(boundary, backend=spec)`` (spec:
  ``process``, ``container:runc``, ``container:runsc``, ``microvm``; the spec is also the target's
  kind) whose boundary is the probe's default (scratch only, no network, modest budgets, with the
  kind's ``KIND_BOUNDARY_OVERRIDES`` row) deep-merged with the case's ``boundary`` mapping; with
  ``warm_pool=True`` runs of the base boundary come from a ``SandboxPool`` instead.
  It fills ``AttackRun.run_result`` (contain's RunResult),
  ``egress_events`` and ``host_pid`` (the sandbox's pid 1 as seen from the host).
  ``run_observed`` also lets a judge look at the running sandbox before and after the attack.
- ``WrapTarget`` runs ``prefix + argv`` as a host subprocess, e.g. ``bwrap --unshare-all ...
  python3 -c CODE``: it has no contain hooks, so the case's ``boundary`` is ignored. The
  subprocess starts in its own session under bounded rlimits (address space, CPU, file size,
  processes) and its process group is killed when the run ends.
- ``HostControlTarget`` is the same bounded runner with no sandbox at all. It exists for positive
  controls, which must show that a judge sees the breach when no layer stops it. Controls are
  safe for the host by construction: every attack stops at a fixed bound (a count, a size, a
  time), and attacks whose control would be unsafe unsandboxed use a relaxed ``ContainTarget``.

What is NOT enforced here: the bounded runner's rlimits are a backstop, not a sandbox (root
ignores RLIMIT_NPROC); the attacks themselves carry the bounds that keep a breach harmless.
"""

from __future__ import annotations

import contextlib
import copy
import os
import resource
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contain.probe.case import AttackRun

__all__ = [
    "DEFAULT_PROBE_BOUNDARY",
    "KIND_BOUNDARY_OVERRIDES",
    "KIND_WARM_UP",
    "RELAXED_CONTROL_BOUNDARY",
    "ContainTarget",
    "HostControlTarget",
    "Observer",
    "WrapTarget",
    "deep_merge",
    "is_restorable_override",
    "kind_keys",
    "probe_boundary_for",
    "target_kind",
]

# The boundary every attack starts from: scratch only, no network, budgets small enough that the
# resource cases hit them quickly and large enough that python3 starts comfortably.
DEFAULT_PROBE_BOUNDARY: dict[str, Any] = {
    "task": "contain-probe",
    "resources": {
        "wall_s": 30,
        "cpu_s": 20,
        "memory_bytes": 128 * 1024**2,
        "pids_max": 32,
        "disk_bytes": 32 * 1024**2,
        "output_bytes": 1024**2,
        "open_files_max": 256,
    },
}

# What the base boundary changes per backend kind (looked up with ``kind_keys``), each with why.
# The cases' own overrides still merge over the result.
KIND_BOUNDARY_OVERRIDES: dict[str, tuple[dict[str, Any], str]] = {
    "microvm": (
        {"resources": {"memory_bytes": 320 * 1024**2, "wall_s": 90, "cpu_s": 60}},
        "the budget holds the guest's RAM (at least 128 MiB) and the VMM's own memory (192 MiB) in one "
        "cgroup; the microvm backend refuses less (backend.plan_microvm_refusals). Wall and CPU: under "
        "TCG (no KVM) a guest runs the workload several times slower; LF-09's 2000 forks took 39 s",
    ),
}

# For positive controls that would be unsafe on the bare host (fork bomb, memory fill): still a
# sandbox, still bounded, just with limits above what the attack reaches before its own bound.
RELAXED_CONTROL_BOUNDARY: dict[str, Any] = {
    "resources": {
        "memory_bytes": 1024 * 1024**2,
        "pids_max": 1024,
        "disk_bytes": 256 * 1024**2,
        "open_files_max": 16384,
        "output_bytes": 64 * 1024**2,
    },
}

# Backstop rlimits of the bounded host runner (wrap and control targets). The attacks' own bounds
# are far below these.
_HOST_RLIMITS: tuple[tuple[int, int], ...] = (
    (resource.RLIMIT_AS, 2 * 1024**3),  # 2 GiB of address space per process
    (resource.RLIMIT_CPU, 60),  # seconds of CPU per process
    (resource.RLIMIT_FSIZE, 512 * 1024**2),  # largest file a process may write
    (resource.RLIMIT_NPROC, 4096),  # ignored for root; attacks bound their own forks
)
_OUTPUT_CAP_BYTES = 64 * 1024**2  # attacks bound their own output well below this
_DRAIN_S = 0.3  # how long output is still read after the command exited
_POOL_ACQUIRE_S = 300.0  # a first acquire waits for a cold start (and, on microvm, a snapshot build)
# What a warm target's pool runs in each restored sandbox before handing it out, per kind (the
# backend's own warm-up is /bin/true): every attack is `python3 -c`, and a restored QEMU starts with
# an empty TCG translation cache and a guest page cache without Python, so the first Python of a
# VM paid ~0.9 s more (measured, quiet host: the attack prelude's run 2.17 s median after the
# /bin/true warm-up, 1.30 s after this one, which costs 2.4 s in the pool's refill thread, off the
# case's path). It is contain's own command, never a task's: no input, output to /dev/null, and it
# writes nothing (/usr is read-only in the guest).
KIND_WARM_UP: dict[str, tuple[tuple[str, ...], str]] = {
    "microvm": (("python3", "-c", "import ctypes, errno, json"), "the attack prelude's imports"),
}
# Sandboxes a warm target keeps ready: two, so a case that runs the base boundary twice in a row
# (task N, then task N+1) finds the second ready instead of waiting for a refill (a microVM
# restore plus its warm-up: 1-3 s under TCG here). Each idle microVM holds ~190 MiB of host memory.
_POOL_SIZE = 2


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge ``override`` into a copy of ``base``: mappings merge recursively, anything else
    (lists included) replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def probe_boundary_for(kind: str) -> dict[str, Any]:
    """``DEFAULT_PROBE_BOUNDARY`` with the ``KIND_BOUNDARY_OVERRIDES`` row of ``kind`` merged in
    (the most specific key of ``kind_keys`` that has a row)."""
    row = next((KIND_BOUNDARY_OVERRIDES[k] for k in kind_keys(kind) if k in KIND_BOUNDARY_OVERRIDES), None)
    return deep_merge(DEFAULT_PROBE_BOUNDARY, row[0] if row is not None else None)


def target_kind(target: object) -> str:
    """The key a case's ``not_applicable`` mapping is looked up with: ``process``, ``wrap``,
    ``host``, or a backend spec such as ``container:runsc`` (see ``kind_keys``)."""
    kind = getattr(target, "kind", None)
    if isinstance(kind, str):
        return kind
    return "contain" if getattr(target, "has_contain_hooks", False) else "wrap"


def kind_keys(kind: str) -> tuple[str, ...]:
    """The ``not_applicable`` keys that apply to a target kind, most specific first.

    A backend spec ``container:runsc`` is looked up as itself, then as its kind ``container``, so
    a case can say "not on any container backend" once, or single out one runtime.
    """
    base = kind.split(":", 1)[0]
    return (kind,) if base == kind else (kind, base)


# File rules whose access binds a host path, which makes a run boot cold even on a warm target: a
# bound host directory is imaged by content, so a case's planted tree (fresh canaries every run)
# would key a template of its own, built once and never restored again, and push useful templates
# out of the backend's cache. Scratch paths (and their exports, copied out at close) bind nothing.
_BINDING_ACCESS = frozenset({"read", "write", "block"})


def is_restorable_override(boundary: Mapping[str, Any] | None) -> bool:
    """Whether a run with these case overrides may start through the backend's warm start: a
    non-empty override none of whose ``files`` rules binds a host path (``_BINDING_ACCESS``; a
    rule without an access is counted as binding)."""
    if not boundary:
        return False
    rules = boundary.get("files") or []
    return not any(not isinstance(r, Mapping) or str(r.get("access", "read")) in _BINDING_ACCESS for r in rules)


class _PythonRunner:
    """``run_python`` for every target: python3 -c CODE through the target's own ``run_argv``."""

    def run_argv(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        raise NotImplementedError

    def run_python(
        self,
        code: str,
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        return self.run_argv(["python3", "-c", code], timeout_s=timeout_s, boundary=boundary, env=env)


Observer = Callable[[Any], Callable[[], None]]
"""A judge that looks at a running sandbox from outside: called with the started ``Sandbox``
before the attack runs, it returns what to call after the attack, before the sandbox closes."""


class ContainTarget(_PythonRunner):
    """Attacks run in a fresh contain ``Sandbox`` per run.

    Args:
        backend: the backend spec, e.g. ``"process"``, ``"container:runc"``, ``"container:runsc"``
            (what ``Sandbox(boundary, backend=...)`` accepts); also the target's ``kind``.
        base_boundary: the boundary every run starts from (default ``DEFAULT_PROBE_BOUNDARY``).
        label: appended to the name, e.g. ``"relaxed"`` for a control target.
    """

    has_contain_hooks = True

    def __init__(
        self,
        backend: str = "process",
        *,
        base_boundary: Mapping[str, Any] | None = None,
        label: str = "",
        warm_pool: bool = False,
    ) -> None:
        self.backend = backend
        self.kind = backend
        self.base_boundary = dict(base_boundary) if base_boundary is not None else probe_boundary_for(backend)
        self.name = f"contain:{backend}" + (f" ({label})" if label else "")
        # warm_pool: runs with the base boundary (no case overrides) take a sandbox from a
        # SandboxPool of that boundary (for microvm: restored from a snapshot) instead of starting
        # one; a pooled sandbox is a fresh Sandbox all the same (runtime/pool.py). Runs with
        # overrides start their own: through the backend's warm start when it has one and the
        # override binds no host path (``is_restorable_override``), else cold. ``close()`` closes both.
        self.warm_pool = warm_pool
        # sandboxes this target started (any whose backend got past its refusals): the runner's
        # by-construction rule reads it (runner.BY_CONSTRUCTION)
        self.sandboxes_started = 0
        self._pool: Any = None
        self._warm: Any = None  # (the backend object, its WarmStart) for restorable overrides
        self._pool_lock = threading.Lock()

    def boundary_for(self, boundary: Mapping[str, Any] | None) -> dict[str, Any]:
        """The manifest mapping one run gets: the base with the case's overrides merged in."""
        return deep_merge(self.base_boundary, boundary)

    def run_argv(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        return self.run_observed(argv, observer=None, timeout_s=timeout_s, boundary=boundary, env=env)

    def run_observed(
        self,
        argv: Sequence[str],
        *,
        observer: Observer | None,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        """``run_argv`` with an outside judge: ``observer(sandbox)`` runs once the sandbox has
        started and before the attack; what it returns runs after the attack and before the
        sandbox closes (while the backend's runtime state, cgroup and processes still exist)."""
        from contain.boundary import Boundary
        from contain.errors import BackendRefusal
        from contain.runtime import Sandbox

        manifest = Boundary.model_validate(self.boundary_for(boundary))
        began = time.perf_counter()
        opened = self._pooled(manifest) if self.warm_pool and not boundary else None
        backend = self._warm_backend(manifest) if self.warm_pool and is_restorable_override(boundary) else None
        with opened if opened is not None else Sandbox(manifest, backend=backend or self.backend) as sandbox:
            try:
                host_pid = sandbox.supervisor_pid
                after = observer(sandbox) if observer is not None else None
                result = sandbox.run(list(argv), timeout=timeout_s, env=dict(env or {}))
                if after is not None:
                    after()
            except BackendRefusal:
                raise  # refused before anything started: not counted
            finally:
                if sandbox.supervisor_pid is not None or opened is not None:
                    self.sandboxes_started += 1
        return AttackRun(
            exit_code=result.exit_code,
            signal=result.signal,
            stdout=result.stdout.data,
            stderr=result.stderr.data,
            timed_out=result.timed_out,
            duration_s=time.perf_counter() - began,
            run_result=result,
            egress_events=tuple(result.egress),
            host_pid=host_pid,
        )


    def _pooled(self, manifest: Any) -> Any:
        """A lease on a sandbox of the base boundary's pool (opened on first use)."""
        from contain.runtime.pool import SandboxPool

        with self._pool_lock:
            if self._pool is None:
                backend = _with_warm_up(self.backend, manifest)
                self._pool = SandboxPool(manifest, backend=backend or self.backend, size=_POOL_SIZE)
            pool = self._pool
        return pool.acquire(timeout_s=_POOL_ACQUIRE_S)

    def _warm_backend(self, manifest: Any) -> Any:
        """A ``WarmBackend`` over one warm start of this target's backend (opened on first use),
        or None when the backend has none (every start is then cold). Each start through it is a
        fresh sandbox restored from the template of *its own* plan (for microvm: keyed by the
        planned VM, so another memory or disk budget or a NIC gets another template)."""
        from contain.runtime.backend import WarmStartCapable
        from contain.runtime.pool import WarmBackend
        from contain.runtime.sandbox import Sandbox

        with self._pool_lock:
            if self._warm is None:
                backend = Sandbox(manifest, backend=self.backend).sandbox_backend
                warm = backend.open_warm_start() if isinstance(backend, WarmStartCapable) else None
                self._warm = (backend, warm)
            backend, warm = self._warm
        return WarmBackend(backend, warm) if warm is not None else None

    def close(self) -> None:
        """Close the warm pool and the warm start, if opened (pooled sandboxes are killed and
        removed; a warm start's templates stay in the backend's cache)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
            warm, self._warm = self._warm, None
        if pool is not None:
            pool.close()
        if warm is not None and warm[1] is not None:
            warm[1].close()


class _WarmedUpBackend:
    """A backend whose warm start runs ``KIND_WARM_UP``'s command as its warm-up (microvm only:
    ``MicroVMWarmStart(warm_up=...)``); every other call is the backend's own."""

    def __init__(self, backend: Any, argv: tuple[str, ...]) -> None:
        self._backend = backend
        self._argv = argv
        self.name = backend.name

    def cgroup_joined_at_exec(self, facts: Any) -> bool:
        return bool(self._backend.cgroup_joined_at_exec(facts))

    def start(self, plan: Any) -> Any:
        return self._backend.start(plan)

    def open_warm_start(self) -> Any:
        from contain.runtime.backend import CommandRequest
        from contain.runtime.microvm.warm_start import MicroVMWarmStart

        return MicroVMWarmStart(self._backend, warm_up=CommandRequest(argv=self._argv, env={}, cwd="/", rlimits=()))


def _with_warm_up(spec: str, manifest: Any) -> _WarmedUpBackend | None:
    """The pool's backend for ``spec`` with the kind's ``KIND_WARM_UP`` row, or None (no row)."""
    row = next((KIND_WARM_UP[k] for k in kind_keys(spec) if k in KIND_WARM_UP), None)
    if row is None:
        return None
    from contain.runtime.sandbox import Sandbox

    return _WarmedUpBackend(Sandbox(manifest, backend=spec).sandbox_backend, row[0])


class _BoundedHostRunner(_PythonRunner):
    """Runs ``prefix + argv`` on the host in its own session, bounded and killed at the end."""

    has_contain_hooks = False
    kind = "host"
    name = "host"

    def __init__(self, prefix: Sequence[str]) -> None:
        self.prefix = list(prefix)

    def run_argv(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 20.0,
        boundary: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AttackRun:
        del boundary  # no contain hooks: a third-party sandbox decides its own boundary
        run_env = dict(os.environ)
        run_env.update(env or {})
        began = time.perf_counter()
        proc = subprocess.Popen(
            [*self.prefix, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=run_env,
            cwd="/",
            start_new_session=True,
            preexec_fn=_apply_host_rlimits,
        )
        assert proc.stdout is not None and proc.stderr is not None
        stdout, stderr, timed_out = _collect(proc, began + timeout_s)
        _kill_group(proc.pid)
        code = proc.wait()
        return AttackRun(
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            duration_s=time.perf_counter() - began,
            host_pid=proc.pid,
        )


def _collect(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes, bool]:
    """Read both pipes until the command exits (plus a short drain), or the deadline passes.

    Processes the command left behind may hold the pipes open forever; we stop reading once the
    command itself is gone, so a detached child cannot stall the probe.
    """
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    buffers: dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray()}
    selector = selectors.DefaultSelector()
    for fd in buffers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    timed_out = False
    exited_at: float | None = None
    try:
        while selector.get_map():
            now = time.perf_counter()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _DRAIN_S:
                break
            if exited_at is None and now >= deadline:
                timed_out = True
                _kill_group(proc.pid)
                proc.wait()
                exited_at = time.perf_counter()
            for key, _ in selector.select(0.05):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                room = _OUTPUT_CAP_BYTES - len(buffers[key.fd])
                buffers[key.fd] += chunk[: max(room, 0)]
    finally:
        selector.close()
        proc.stdout.close()
        proc.stderr.close()
    return bytes(buffers[out_fd]), bytes(buffers[err_fd]), timed_out


class WrapTarget(_BoundedHostRunner):
    """A third-party sandbox given as a command prefix, e.g. ``["bwrap", "--unshare-all", ...]``."""

    kind = "wrap"

    def __init__(self, prefix: Sequence[str]) -> None:
        if not prefix:
            raise ValueError("a wrap target needs a command prefix, e.g. ['bwrap', '--unshare-all', ...]")
        super().__init__(prefix)
        self.name = "wrap:" + " ".join(prefix)


class HostControlTarget(_BoundedHostRunner):
    """No sandbox: the positive-control target. Only bounded attacks may run here."""

    kind = "host"

    def __init__(self) -> None:
        super().__init__(())
        self.name = "host-control (no sandbox)"


def _apply_host_rlimits() -> None:
    for limit, value in _HOST_RLIMITS:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(limit, (value, value))


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
