"""The warm pool on the real process backend: acquire, run, close; close while refilling leaves
nothing; a boundary that cannot start is reported with its cause; two pooled sandboxes share no
scratch, /tmp, hostname (UTS namespace) or host uid. Judged from outside the sandboxes."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.errors import PoolUnavailable
from contain.runtime import Sandbox
from contain.runtime.backend import BackendPlan, RunningSandbox
from contain.runtime.container.backend import CONTAINER_ROOT
from contain.runtime.host_ids import LEASE_DIR
from contain.runtime.pool import SandboxPool
from contain.runtime.process_backend import ProcessBackend

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

PY = "/usr/bin/python3"
WAIT = 30.0


class ObservedBackend:
    """The process backend, recording what each start made so the test can look for leftovers."""

    name = "process"

    def __init__(self) -> None:
        self.inner = ProcessBackend()
        self.made: list[tuple[int, tuple[str, ...], int]] = []  # host pid, cgroup dirs, host uid

    def cgroup_joined_at_exec(self, facts):  # type: ignore[no-untyped-def]
        return self.inner.cgroup_joined_at_exec(facts)

    def start(self, plan: BackendPlan) -> RunningSandbox:
        handle = self.inner.start(plan)
        self.made.append((handle.host_pid, plan.cgroup.paths if plan.cgroup else (), plan.host_ids[0]))
        return handle


def host_uid_of(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def assert_nothing_left(backend: ObservedBackend) -> None:
    assert backend.made, "the pool started no sandbox"
    for pid, cgroup_dirs, uid in backend.made:
        assert host_uid_of(pid) != uid, f"sandbox init {pid} (uid {uid}) survived"
        assert [d for d in cgroup_dirs if os.path.exists(d)] == []
        assert not (LEASE_DIR / str(uid)).exists(), f"host uid {uid} is still leased"


def test_a_pooled_sandbox_runs_a_command_and_closing_the_pool_leaves_no_process_cgroup_or_lease() -> None:
    backend = ObservedBackend()
    with SandboxPool(Boundary(), backend=backend, size=2) as pool:
        assert pool.wait_ready(timeout_s=WAIT)
        with pool.acquire(timeout_s=WAIT) as sandbox:
            result = sandbox.run([PY, "-c", "print('hi from the pool')"])
        assert (result.exit_code, result.stdout.data, result.backend) == (0, b"hi from the pool\n", "process")
        assert pool.wait_ready(timeout_s=WAIT)
        alive = [pid for pid, _, uid in backend.made if host_uid_of(pid) == uid]
        assert len(alive) == 2  # positive control: the idle ones do run until close
    assert len(backend.made) == 3
    assert_nothing_left(backend)


class HeldObservedBackend(ObservedBackend):
    """Holds every start after the first at a gate, so a test can close the pool mid-start."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.calls = 0

    def start(self, plan: BackendPlan) -> RunningSandbox:
        self.calls += 1
        if self.calls > 1:
            self.entered.set()
            assert self.gate.wait(WAIT)
        return super().start(plan)


def test_closing_the_pool_while_it_refills_and_a_task_runs_leaves_nothing() -> None:
    backend = HeldObservedBackend()
    pool = SandboxPool(Boundary(), backend=backend, size=1)
    lease = pool.acquire(timeout_s=WAIT)  # the refill thread now starts the replacement ...
    assert backend.entered.wait(WAIT)  # ... and is inside that start, held
    spawned = lease.sandbox.spawn(["/bin/sh", "-c", "sleep 600"])
    closer = threading.Thread(target=pool.close)
    closer.start()  # kills the running task, then waits for the start in progress
    with pool._cond:
        assert pool._cond.wait_for(lambda: pool._closed, WAIT)
    backend.gate.set()  # the held start now completes, after close began
    closer.join(WAIT)
    assert not closer.is_alive()
    spawned.wait(timeout=WAIT)
    lease.close()
    assert len(backend.made) == 2  # the task's sandbox and the one started during close
    assert_nothing_left(backend)
    assert pool.stats().handed_out == 0 and not pool._thread.is_alive()


def test_a_pool_whose_boundary_cannot_start_reports_the_cause_on_acquire(tmp_path: Path) -> None:
    missing = tmp_path / "not-there"
    boundary = Boundary.model_validate({"files": [{"path": "/data", "host": str(missing), "access": "read"}]})
    with SandboxPool(boundary, size=1) as pool, pytest.raises(PoolUnavailable) as caught:
        pool.acquire(timeout_s=WAIT)
    assert str(missing) in caught.value.cause and "does not exist" in caught.value.cause
    assert "required: false" in caught.value.fix


def test_two_pooled_sandboxes_share_no_scratch_tmp_hostname_or_host_uid() -> None:
    write = (
        "import os, socket\n"
        "open('/tmp/left-by-a', 'w').write('a'); open('/work/left-by-a', 'w').write('a')\n"
        "try:\n    socket.sethostname('renamed-by-a')\nexcept OSError:\n    pass\n"
        "print(os.readlink('/proc/self/ns/uts'))\n"
    )
    look = (
        "import os, socket\n"
        "print(os.path.exists('/tmp/left-by-a'), os.path.exists('/work/left-by-a'), socket.gethostname())\n"
        "print(os.readlink('/proc/self/ns/uts'))\n"
    )
    with SandboxPool(Boundary(), size=2) as pool:
        assert pool.wait_ready(timeout_s=WAIT)
        with pool.acquire(timeout_s=WAIT) as a, pool.acquire(timeout_s=WAIT) as b:
            wrote = a.run([PY, "-c", write])
            looked = b.run([PY, "-c", look])
            again = a.run([PY, "-c", look])  # positive control: A sees what A wrote
            uid_a, uid_b = host_uid_of(a.supervisor_pid or 0), host_uid_of(b.supervisor_pid or 0)
    with Sandbox(Boundary()) as one_shot:
        fresh = one_shot.run([PY, "-c", look])
    uts_a = wrote.stdout.data.decode().split()[-1]
    seen_b, uts_b = looked.stdout.data.decode().splitlines()
    assert seen_b == "False False sandbox"
    assert again.stdout.data.decode().splitlines()[0].startswith("True True ")
    assert uts_a != uts_b and uts_a.startswith("uts:[")
    assert fresh.stdout.data.decode().splitlines()[0] == "False False sandbox"  # as a fresh one
    assert uid_a is not None and uid_b is not None and uid_a != uid_b


def test_a_sandbox_destroyed_from_outside_leaves_no_zombie_init_behind() -> None:
    """Sandbox.destroy (what the pool's close uses on a running task) must let bubblewrap reap the
    supervisor: killed together, the supervisor was orphaned to the host's init as a zombie."""
    sandbox = Sandbox(Boundary())
    sandbox.start()
    pid, uid = sandbox.supervisor_pid or 0, host_uid_of(sandbox.supervisor_pid or 0)
    assert uid is not None and uid != 0  # positive control: it runs as its leased uid
    sandbox.destroy()
    assert host_uid_of(pid) != uid, "the killed supervisor is still in the process table"
    sandbox.close()


# -- the pool belongs to the seam: the container backends too --------------------------------------

RUNC_MISSING = shutil.which("runc") is None and not os.path.exists("/usr/sbin/runc")
RUNSC_MISSING = shutil.which("runsc") is None
CONTAINERS = [
    pytest.param("container:runc", marks=pytest.mark.skipif(RUNC_MISSING, reason="runc is not installed")),
    pytest.param("container:runsc", marks=pytest.mark.skipif(RUNSC_MISSING, reason="runsc is not installed")),
]


def container_name(pid: int) -> str:
    """The sandbox's cgroup leaf, which is also its container id and directory name."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path.rstrip("/").rsplit("/", 1)[-1]
    raise AssertionError(f"pid {pid} has no memory cgroup")


def container_leftovers(name: str) -> list[str]:
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if name.encode() in Path(cmdline).read_bytes():
                found.append(f"process {cmdline}")
    found += [f"mount {line}" for line in Path("/proc/self/mountinfo").read_text().splitlines() if name in line]
    found += [f"cgroup {path}" for path in glob.glob(f"/sys/fs/cgroup/**/{name}", recursive=True)]
    if (CONTAINER_ROOT / name).exists():
        found.append(f"directory {CONTAINER_ROOT / name}")
    return found


@pytest.mark.parametrize("backend", CONTAINERS)
def test_a_container_pool_serves_a_task_and_close_with_one_running_leaves_nothing(backend: str) -> None:
    pool = SandboxPool(Boundary(), backend=backend, size=2)
    try:
        assert pool.wait_ready(timeout_s=WAIT), pool.stats().last_error
        with pool.acquire(timeout_s=WAIT) as sandbox:
            result = sandbox.run(["/bin/echo", "pooled"])
        assert (result.exit_code, result.stdout.data, result.backend) == (0, b"pooled\n", backend)
        assert pool.wait_ready(timeout_s=WAIT), pool.stats().last_error
        lease = pool.acquire(timeout_s=WAIT)
        running = lease.sandbox.spawn(["/bin/sleep", "600"])
        names = [container_name(lease.sandbox.supervisor_pid or 0)]
        names += [container_name(s.supervisor_pid or 0) for _, s in pool._ready]
        assert all(container_leftovers(name) for name in names)  # positive control: the listing sees them
    finally:
        pool.close()
    running.wait(timeout=WAIT)
    lease.close()
    assert {name: container_leftovers(name) for name in names} == {name: [] for name in names}


def test_a_pool_nobody_closed_is_closed_cleanly_when_its_interpreter_exits() -> None:
    script = (
        "import sys\n"
        "from contain.boundary import Boundary\n"
        "from contain.runtime.pool import SandboxPool\n"
        "pool = SandboxPool(Boundary(), size=2)\n"
        "assert pool.wait_ready(timeout_s=60)\n"
        "lease = pool.acquire(timeout_s=60)\n"
        "assert pool.wait_ready(timeout_s=60)\n"
        "for s in [lease.sandbox] + [s for _, s in pool._ready]:\n"
        "    print(s.supervisor_pid, ' '.join(s._cgroup.paths if s._cgroup else ()))\n"
        "sys.stdout.flush()\n"  # and exit without closing the lease or the pool
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, check=True)
    made = [line.split() for line in done.stdout.decode().splitlines()]
    assert len(made) == 3
    for pid, *cgroup_dirs in made:
        status = Path(f"/proc/{pid}/status")
        assert not status.exists() or "supervisor" not in status.read_text(), f"supervisor {pid} survived"
        assert [d for d in cgroup_dirs if os.path.exists(d)] == []
