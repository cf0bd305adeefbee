"""Live cgroup tests: real processes against the limits SandboxCgroup writes on this host.

Each workload is a ``python3 -c`` child that blocks on stdin until the test has attached it, so it
is inside the cgroup before it allocates, forks or spins. Needs root (or a delegated cgroup) and
the controllers in ``CONTROLLER_ROWS``; a missing controller skips, naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contain.boundary.model import Resources
from contain.errors import UnsupportedHost
from contain.host.facts import HostFacts, detect_host
from contain.runtime.cgroup_plan import CONTROLLER_ROWS, plan_cgroup_hierarchies
from contain.runtime.cgroups import SandboxCgroup

pytestmark = pytest.mark.needs_root

MiB = 1024**2
LIMITS = Resources(memory_bytes=64 * MiB, pids_max=16, cpu_cores=1.0)
WAIT_FOR_GO = "import sys; sys.stdin.read(1)\n"
FORK_UNTIL_REFUSED = """
import os, signal
children = []
while len(children) < 64:
    try:
        pid = os.fork()
    except BlockingIOError:
        break
    if pid == 0:
        signal.pause()
    children.append(pid)
print(len(children))
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"""
MakeCgroup = Callable[..., SandboxCgroup]


@pytest.fixture(scope="module")
def facts() -> HostFacts:
    facts = detect_host()
    if not facts.is_root and facts.cgroup_root is None:
        pytest.skip("creating cgroups needs root or a delegated CONTAIN_CGROUP_ROOT")
    try:
        plan_cgroup_hierarchies(facts)
    except UnsupportedHost:
        rows = CONTROLLER_ROWS
        missing = [row.controller for row in rows if facts.cgroup_for(row.controller) is None]
        if missing:
            pytest.skip(f"cgroup controllers missing on this host: {', '.join(missing)}")
        raise
    return facts


@pytest.fixture
def make_cgroup(facts: HostFacts) -> Iterator[MakeCgroup]:
    made: list[SandboxCgroup] = []

    def make(resources: Resources = LIMITS) -> SandboxCgroup:
        cgroup = SandboxCgroup.create("itest", resources, facts)
        made.append(cgroup)
        return cgroup

    yield make
    for cgroup in made:
        cgroup.remove(timeout_s=5.0)
        assert not any(os.path.exists(path) for path in cgroup.paths)


def start_attached(cgroup: SandboxCgroup, body: str) -> subprocess.Popen[bytes]:
    """Start ``python3 -c body``, attach it, then let it run (pipe handshake)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WAIT_FOR_GO + body],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        cgroup.attach(proc.pid)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    assert proc.stdin is not None
    proc.stdin.write(b"g")
    proc.stdin.close()
    proc.stdin = None  # so communicate() does not flush the closed pipe
    return proc


def test_memory_hog_is_oom_killed_and_peak_stays_under_the_limit(make_cgroup: MakeCgroup) -> None:
    cgroup = make_cgroup()
    proc = start_attached(cgroup, "x = b'x' * (200 * 1024 * 1024)\nprint('survived')\n")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -9, out
    usage = cgroup.usage()
    assert usage.oom_kills >= 1
    assert usage.memory_peak_bytes is not None
    assert usage.memory_peak_bytes <= LIMITS.memory_bytes + 1 * MiB


def test_fork_bomb_is_held_at_pids_max(make_cgroup: MakeCgroup) -> None:
    cgroup = make_cgroup()
    bomb = (
        "import os, time\n"
        "forks = 0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except BlockingIOError:\n"
        "        continue\n"
        "    if pid == 0:\n"
        "        time.sleep(120)\n"
        "        os._exit(0)\n"
        "    forks += 1\n"
        "print(forks, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = start_attached(cgroup, bomb)
    assert proc.stdout is not None
    forks = int(proc.stdout.readline())
    assert 1 <= forks < LIMITS.pids_max
    assert cgroup.usage().pids_current <= LIMITS.pids_max
    assert len(cgroup.pids()) == forks + 1
    cgroup.kill_all(timeout_s=5.0)
    assert cgroup.pids() == []
    proc.wait(timeout=5)
    proc.stdout.close()
    assert proc.stderr is not None
    proc.stderr.close()


def test_kill_all_wins_against_a_churning_fork_bomb(make_cgroup: MakeCgroup) -> None:
    cgroup = make_cgroup()
    # Every process forks forever; one that hits pids.max exits, freeing a slot for the others.
    churn = (
        "import os, signal\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "print('go', flush=True)\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except BlockingIOError:\n"
        "        os._exit(0)\n"
    )
    proc = start_attached(cgroup, churn)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"go\n"
    # Processes at the limit exit and are replaced, so the count churns just below pids.max:
    # wait until the limit has been reached at least once.
    deadline = time.monotonic() + 10
    highest = 0
    while highest < LIMITS.pids_max and time.monotonic() < deadline:
        highest = max(highest, cgroup.usage().pids_current)
        time.sleep(0.002)
    assert highest == LIMITS.pids_max
    cgroup.kill_all(timeout_s=5.0)
    assert cgroup.pids() == []
    proc.wait(timeout=5)
    proc.stdout.close()


def test_cpu_quota_of_a_fifth_core_yields_about_a_fifth_cpu_second_per_wall_second(
    make_cgroup: MakeCgroup,
) -> None:
    cgroup = make_cgroup(Resources(memory_bytes=64 * MiB, pids_max=16, cpu_cores=0.2))
    spin = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5:\n    pass\n"
    started = time.monotonic()
    proc = start_attached(cgroup, spin)
    proc.communicate(timeout=30)
    wall = time.monotonic() - started
    cpu = cgroup.usage().cpu_s
    assert proc.returncode == 0
    assert 0.08 * wall <= cpu <= 0.35 * wall, (cpu, wall)


def test_kill_all_kills_a_double_forked_daemon_that_left_its_session(
    make_cgroup: MakeCgroup,
) -> None:
    cgroup = make_cgroup()
    daemonize = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        print(os.getpid(), flush=True)\n"
        "        time.sleep(120)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    )
    proc = start_attached(cgroup, daemonize)
    assert proc.stdout is not None
    daemon = int(proc.stdout.readline())
    proc.wait(timeout=10)
    assert cgroup.pids() == [daemon]  # its parents are gone; only the cgroup still knows it
    cgroup.kill_all(timeout_s=5.0)
    assert cgroup.pids() == []
    with open(f"/proc/{daemon}/stat", encoding="ascii") as stat:
        state = stat.read().rsplit(")", 1)[1].split()[0]
    assert state in ("Z", "X")


def test_reset_peak_restarts_the_peak_from_current_usage(make_cgroup: MakeCgroup) -> None:
    cgroup = make_cgroup()
    body = "x = b'x' * (32 * 1024 * 1024)\ndel x\nprint('freed', flush=True)\nsys.stdout.close()\n"
    proc = start_attached(cgroup, body + "import time; time.sleep(60)\n")
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"freed\n"
    assert (cgroup.usage().memory_peak_bytes or 0) >= 32 * MiB
    assert cgroup.reset_peak() is True
    assert (cgroup.usage().memory_peak_bytes or 0) < 32 * MiB
    cgroup.remove(timeout_s=5.0)
    proc.wait(timeout=5)
    proc.stdout.close()


def test_remove_leaves_no_directory_and_is_idempotent(make_cgroup: MakeCgroup) -> None:
    cgroup = make_cgroup()
    proc = start_attached(cgroup, "import time; time.sleep(60)\n")
    cgroup.remove(timeout_s=5.0)
    assert not any(os.path.exists(path) for path in cgroup.paths)
    cgroup.remove(timeout_s=5.0)
    assert proc.wait(timeout=5) == -9


# -- the root launcher joins a v1 cgroup itself before it execs bwrap --------------------------------


def _supervisor() -> str:
    from contain.runtime.supervisor_build import ensure_supervisor_binary

    return str(ensure_supervisor_binary())


def test_the_launcher_joins_every_hierarchy_before_it_execs(facts: HostFacts) -> None:
    cgroup = SandboxCgroup.create("join", LIMITS, facts, launcher_joins=True)
    try:
        if not cgroup.joined_by_launcher:
            pytest.skip("cgroup v2 host: the launcher joins only v1 hierarchies (tasks files)")
        joins = [arg for path in cgroup.join_files() for arg in ("--join-cgroup", path)]
        done = subprocess.run(
            [_supervisor(), "--exec-as", "65534", "65534", *joins, "--", "/bin/cat", "/proc/self/cgroup"],
            capture_output=True, text=True, timeout=10, check=True,
        )
        lines = {line.split(":")[1]: line.split(":", 2)[2] for line in done.stdout.splitlines()}
        for controller in cgroup.dirs:
            assert lines[controller].endswith("/" + cgroup.leaf), (controller, done.stdout)
    finally:
        cgroup.remove(timeout_s=5.0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--join-cgroup", "/sys/fs/cgroup/pids/cgroup.procs"], "wants an absolute .../tasks path"),
        (["--join-cgroup", "relative/tasks"], "wants an absolute .../tasks path"),
        (["--join-cgroup", "/nonexistent/contain/tasks"], "cannot join cgroup /nonexistent/contain/tasks"),
        (["--join-cgroup"], "usage"),
        (["--join-cgroup", "/x/tasks", "/bin/true"], "usage"),
        (["--join-cgroup", "/x/tasks"] * 17, "usage"),  # at most 16 hierarchies
    ],
    ids=["cgroup.procs", "relative", "missing", "no-path", "no-separator", "too-many"],
)
def test_the_launcher_refuses_before_exec_when_it_cannot_join(extra: list[str], message: str) -> None:
    argv = [_supervisor(), "--exec-as", "65534", "65534", *extra]
    if extra[-1] != "/bin/true" and extra != ["--join-cgroup"]:
        argv += ["--", "/bin/echo", "ran"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 125 and message in done.stderr and "ran" not in done.stdout


def test_a_sandbox_started_as_root_is_inside_its_cgroup_from_bwrap_down(facts: HostFacts) -> None:
    from contain.boundary import Boundary
    from contain.runtime import Sandbox
    from contain.runtime.process_backend import ProcessSandbox

    with Sandbox(Boundary.model_validate({"resources": {"pids_max": 16}})) as sandbox:
        cgroup = sandbox._cgroup
        handle = sandbox._handle
        assert cgroup is not None and isinstance(handle, ProcessSandbox) and sandbox.supervisor_pid is not None
        assert handle.cgroup is cgroup
        members = set(cgroup.pids())
        if cgroup.joined_by_launcher:
            assert {handle.proc.pid, sandbox.supervisor_pid} <= members  # bwrap's monitor and the supervisor
            assert Path(cgroup.dirs["pids"], "pids.max").read_text().strip() == "17"
        else:
            assert sandbox.supervisor_pid in members
        # The workload's budget is what it was before bwrap joined: pids_max minus the supervisor, so
        # python3 and 14 children fit and the 15th fork is refused (13 if the cgroup had no room
        # for bwrap's monitor, 15 if it made room for a monitor outside it).
        result = sandbox.run(["python3", "-c", FORK_UNTIL_REFUSED])
        assert result.stdout.data.split() == [b"14"], result
