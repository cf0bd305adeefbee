"""The in-sandbox supervisor as pid 1 of a real bwrap sandbox, driven through SupervisorChannel.

Each test starts one minimal bwrap (not the product launcher: this tests the supervisor and its
channel alone) with the supervisor compiled by ``ensure_supervisor_binary`` into a temporary cache.
Process checks are made from the host, by pid namespace, never by asking the sandbox.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import stat
import statistics
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from contain.boundary import LayerRequirement
from contain.errors import SandboxLost, SandboxStartError, UnsupportedHost
from contain.host.facts import detect_host, detect_landlock_abi
from contain.runtime.kernel_differences import supervisor_difference_args
from contain.runtime.landlock import plan_landlock
from contain.runtime.seccomp import compile_filter
from contain.runtime.seccomp_rules import Action, ArgCondition, ArgOp, SyscallRule
from contain.runtime.supervisor_build import ensure_supervisor_binary, expected_supervisor_path
from contain.runtime.supervisor_channel import (
    Exited,
    Ready,
    Rlimit,
    SpawnFailed,
    Started,
    SupervisorChannel,
    SupervisorErrorReply,
    encode_run,
)

pytestmark = pytest.mark.needs_bwrap

BWRAP = shutil.which("bwrap")
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}
BASE_BWRAP = (
    "--unshare-all",
    "--as-pid-1",
    "--die-with-parent",
    "--new-session",
    "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/lib64", "/lib64",
    "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/bin", "/bin",
    "--proc", "/proc",
    "--dev", "/dev",
    "--tmpfs", "/tmp",
)  # fmt: skip


@pytest.fixture(scope="session")
def supervisor_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONTAIN_CACHE_DIR", str(tmp_path_factory.mktemp("supervisor-cache")))
        return ensure_supervisor_binary()


@dataclass
class RunOutcome:
    reply: Started | SpawnFailed
    exited: Exited | None
    stdout: bytes
    stderr: bytes


@dataclass
class SupervisorSandbox:
    proc: subprocess.Popen[bytes]
    channel: SupervisorChannel
    ready: Ready

    @property
    def supervisor_host_pid(self) -> int:
        """The supervisor's pid on the host: bwrap's only child (bwrap --as-pid-1 execs the supervisor)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        pids = [int(p) for p in children.split()]
        assert len(pids) == 1, pids
        return pids[0]

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] = ENV,
        cwd: str = "/",
        rlimits: Sequence[Rlimit] = (),
        stdin: bytes = b"",
        timeout_s: float = 30.0,
    ) -> RunOutcome:
        pipes = [os.pipe() for _ in range(3)]
        os.write(pipes[0][1], stdin)
        os.close(pipes[0][1])
        child_ends = (pipes[0][0], pipes[1][1], pipes[2][1])
        try:
            reply = self.channel.start(argv, env, cwd, rlimits, child_ends)
        finally:
            for fd in child_ends:
                os.close(fd)
        exited = self.channel.wait_exited(timeout_s) if isinstance(reply, Started) else None
        outputs = [_read_all(pipes[i][0]) for i in (1, 2)]
        return RunOutcome(reply, exited, outputs[0], outputs[1])


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def start_supervisor(
    supervisor: Path,
    *,
    extra_bwrap: Sequence[str] = (),
    supervisor_args: Sequence[str] = (),
    user: int | None = None,
    pass_fds: Sequence[int] = (),
) -> SupervisorSandbox:
    assert BWRAP is not None
    host_end, supervisor_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    fd = supervisor_end.fileno()
    argv = [
        BWRAP, *BASE_BWRAP, *extra_bwrap, "--ro-bind", str(supervisor), "/.contain/supervisor",
        "--", "/.contain/supervisor", "--control-fd", str(fd), *supervisor_args,
    ]  # fmt: skip
    proc = subprocess.Popen(argv, pass_fds=[fd, *pass_fds], user=user)
    supervisor_end.close()
    channel = SupervisorChannel(host_end)
    return SupervisorSandbox(proc, channel, channel.read_ready(10))


@pytest.fixture
def sandbox(supervisor_binary: Path) -> Iterator[SupervisorSandbox]:
    sb = start_supervisor(supervisor_binary)
    yield sb
    _stop(sb)


def _stop(sb: SupervisorSandbox) -> None:
    sb.channel.close()
    try:
        sb.proc.wait(10)
    except subprocess.TimeoutExpired:
        sb.proc.kill()
        sb.proc.wait()
        raise


def pids_in_namespace_of(pid: int) -> list[int]:
    """Every host pid whose pid namespace is the one ``pid`` lives in."""
    target = os.readlink(f"/proc/{pid}/ns/pid")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") == target:
                found.append(int(entry))
        except OSError:
            continue  # exited meanwhile
    return sorted(found)


def _landlock_abi_or_skip(minimum: int) -> int:
    abi = detect_landlock_abi()
    if abi < minimum:
        pytest.skip(f"kernel Landlock ABI {abi} < {minimum} (CONFIG_SECURITY_LANDLOCK / lsm=)")
    return abi


# ---- basic runs --------------------------------------------------------------------------------


def test_supervisor_is_pid_1_and_echo_output_reaches_the_host(sandbox: SupervisorSandbox) -> None:
    assert sandbox.ready == Ready(pid=1, landlock="off", landlock_abi=0)
    out = sandbox.run(["/bin/echo", "hi"])
    assert isinstance(out.reply, Started)
    assert out.reply.pid > 1
    assert out.exited is not None and out.exited.exit_code == 0
    assert out.stdout == b"hi\n"
    assert out.stderr == b""


def test_stdin_env_and_cwd_are_exactly_what_the_request_gives(sandbox: SupervisorSandbox) -> None:
    out = sandbox.run(["cat"], stdin=b"from host")
    assert out.stdout == b"from host"
    out = sandbox.run(["env"], env={"PATH": "/usr/bin", "ONLY": "this"})
    assert out.stdout.decode().splitlines() == ["PATH=/usr/bin", "ONLY=this"]
    out = sandbox.run(["pwd"], cwd="/proc")
    assert out.stdout == b"/proc\n"


def test_workload_inherits_only_stdio_fds(sandbox: SupervisorSandbox) -> None:
    out = sandbox.run(["sh", "-c", "ls /proc/$$/fd"])
    assert out.stdout.split() == [b"0", b"1", b"2"]


def test_workload_holds_no_capabilities_even_when_the_supervisor_does(sandbox: SupervisorSandbox) -> None:
    out = sandbox.run(["grep", "^Cap", "/proc/self/status"])
    caps = dict(line.split(":\t") for line in out.stdout.decode().splitlines())
    assert caps == {name: "0000000000000000" for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    if os.geteuid() == 0:  # positive control: bwrap run by root leaves the supervisor every capability
        supervisor_status = Path(f"/proc/{sandbox.supervisor_host_pid}/status").read_text()
        assert "CapEff:\t0000000000000000" not in supervisor_status


def test_workload_cannot_reach_the_supervisors_proc_files(sandbox: SupervisorSandbox) -> None:
    for path in ("/proc/1/environ", "/proc/1/mem", "/proc/1/fd/3"):
        out = sandbox.run(["sh", "-c", f"cat {path} > /dev/null"])
        assert out.exited is not None and out.exited.exit_code != 0, path
        assert b"Permission denied" in out.stderr, path
    # The launcher's environment reached the supervisor through bwrap; the supervisor wiped it.
    environ = Path(f"/proc/{sandbox.supervisor_host_pid}/environ").read_bytes()
    assert len(environ) > 0  # positive control: there was an environment to wipe
    assert environ.strip(b"\0") == b""


def test_exit_code_and_signal_are_decoded(sandbox: SupervisorSandbox) -> None:
    out = sandbox.run(["sh", "-c", "exit 3"])
    assert out.exited is not None
    assert (out.exited.exit_code, out.exited.signal) == (3, None)
    out = sandbox.run(["sh", "-c", "kill -TERM $$"])
    assert out.exited is not None
    assert (out.exited.exit_code, out.exited.signal) == (None, signal.SIGTERM)


def test_second_run_reuses_the_same_sandbox(sandbox: SupervisorSandbox) -> None:
    first = sandbox.run(["sh", "-c", "echo kept > /tmp/state"])
    second = sandbox.run(["cat", "/tmp/state"])
    assert first.exited is not None and first.exited.exit_code == 0
    assert second.stdout == b"kept\n"


def test_a_second_run_while_one_is_active_gets_an_error_reply(sandbox: SupervisorSandbox) -> None:
    r, w = os.pipe()
    started = sandbox.channel.start(["sleep", "1000"], ENV, "/", (), (r, w, w))
    assert isinstance(started, Started)
    sandbox.channel.send_request(encode_run(["true"], ENV, "/", ()), fds=(r, w, w))
    os.close(r)
    os.close(w)
    reply = sandbox.channel.read_reply(10)
    assert isinstance(reply, SupervisorErrorReply)
    assert "already active" in reply.message
    sandbox.channel.kill()
    exited = sandbox.channel.wait_exited(10)
    assert exited is not None and exited.signal == signal.SIGKILL


def _frame(*items: str) -> bytes:
    payload = b"".join(item.encode() + b"\0" for item in items)
    return struct.pack("<I", len(payload)) + payload


@pytest.mark.parametrize(
    ("frame", "nfds", "message"),
    [
        (_frame("HELLO"), 0, "unknown request"),
        (struct.pack("<I", 3) + b"RUN", 0, "NUL-terminated"),
        (_frame("KILL"), 3, "carries no fds"),
        (_frame("RUN", "cwd=/", "arg=true"), 2, "exactly 3 fds"),
        (_frame("RUN", "cwd=/", "arg=true"), 4, "exactly 3 fds"),
        (_frame("RUN", "arg=true"), 3, "cwd"),
        (_frame("RUN", "cwd=relative", "arg=true"), 3, "absolute"),
        (_frame("RUN", "cwd=/"), 3, "at least one arg"),
        (_frame("RUN", "cwd=/", "arg=true", "env=NOEQUALS"), 3, "KEY=VALUE"),
        (_frame("RUN", "cwd=/", "arg=true", "rlimit=CPU:2:1"), 3, "soft limit above hard"),
        (_frame("RUN", "cwd=/", "arg=true", "rlimit=CPU:1"), 3, "NAME:SOFT:HARD"),
        (_frame("RUN", "cwd=/", "arg=true", "rlimit=BOGUS:1:1"), 3, "unknown rlimit"),
        (_frame("RUN", "cwd=/", "arg=true", "rlimit=CPU:-1:1"), 3, "decimal or inf"),
        (_frame("RUN", "cwd=/", "arg=true", "rlimit=CPU:1:1", "rlimit=CPU:1:1"), 3, "twice"),
        (_frame("RUN", "cwd=/", "arg=true", "color=red"), 3, "unknown RUN item"),
    ],
)
def test_bad_requests_get_an_error_and_the_supervisor_carries_on(
    sandbox: SupervisorSandbox, frame: bytes, nfds: int, message: str
) -> None:
    r, w = os.pipe()
    sandbox.channel.send_request(frame, fds=[w] * nfds)
    os.close(r)
    os.close(w)
    reply = sandbox.channel.read_reply(10)
    assert isinstance(reply, SupervisorErrorReply)
    assert message in reply.message
    after = sandbox.run(["/bin/echo", "still here"])
    assert after.stdout == b"still here\n"


def test_an_oversize_frame_ends_the_sandbox(sandbox: SupervisorSandbox) -> None:
    sandbox.channel.send_request(struct.pack("<I", (1 << 20) + 1))
    reply = sandbox.channel.read_reply(10)
    assert isinstance(reply, SupervisorErrorReply) and "exceeds" in reply.message
    with pytest.raises(SandboxLost):
        sandbox.channel.read_reply(10)
    assert sandbox.proc.wait(10) == 1


# ---- teardown ----------------------------------------------------------------------------------


def test_daemon_left_behind_is_killed_before_exited(sandbox: SupervisorSandbox) -> None:
    # setsid forks (the workload is already a session leader), so the daemon is an orphan in a
    # session of its own by the time the main process exits.
    script = (
        "setsid sh -c 'sleep 1000 & echo $! > /tmp/daemon'; while [ ! -s /tmp/daemon ]; do :; done; cat /tmp/daemon"
    )
    out = sandbox.run(["sh", "-c", script])
    assert out.exited is not None and out.exited.exit_code == 0
    assert int(out.stdout) > 1  # positive control: the daemon did start
    assert pids_in_namespace_of(sandbox.supervisor_host_pid) == [sandbox.supervisor_host_pid]


def test_kill_ends_a_long_sleep_promptly(sandbox: SupervisorSandbox) -> None:
    r, w = os.pipe()
    started = sandbox.channel.start(["sleep", "1000"], ENV, "/", (), (r, w, w))
    os.close(r)
    os.close(w)
    assert isinstance(started, Started)
    assert sandbox.channel.wait_exited(0.2) is None  # still running
    began = time.monotonic()
    sandbox.channel.kill()
    exited = sandbox.channel.wait_exited(10)
    assert exited is not None and exited.signal == signal.SIGKILL
    assert time.monotonic() - began < 2.0
    assert pids_in_namespace_of(sandbox.supervisor_host_pid) == [sandbox.supervisor_host_pid]


def test_closing_the_channel_kills_everything_and_ends_the_sandbox(supervisor_binary: Path) -> None:
    sb = start_supervisor(supervisor_binary)
    supervisor_pid = sb.supervisor_host_pid
    r, w = os.pipe()
    assert isinstance(sb.channel.start(["sleep", "1000"], ENV, "/", (), (r, w, w)), Started)
    os.close(r)
    os.close(w)
    assert len(pids_in_namespace_of(supervisor_pid)) == 2  # positive control: supervisor + sleep
    sb.channel.close()
    assert sb.proc.wait(10) == 0
    assert not os.path.exists(f"/proc/{supervisor_pid}")


def test_exit_request_ends_the_sandbox(supervisor_binary: Path) -> None:
    sb = start_supervisor(supervisor_binary)
    sb.channel.exit()
    assert sb.proc.wait(10) == 0
    sb.channel.close()


# ---- spawn failures ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["/no/such/program"], ENV),
        (["no-such-program"], ENV),
        (["true"], {"PATH": "/nonexistent"}),  # PATH comes from the request, not the supervisor
    ],
)
def test_missing_program_fails_at_exec_with_enoent(sandbox: SupervisorSandbox, argv: list[str], env: dict[str, str]) -> None:
    out = sandbox.run(argv, env=env)
    assert out.reply == SpawnFailed(stage="exec", errno=errno.ENOENT)
    assert out.exited is None


def test_missing_cwd_fails_at_chdir(sandbox: SupervisorSandbox) -> None:
    out = sandbox.run(["true"], cwd="/no/such/dir")
    assert out.reply == SpawnFailed(stage="chdir", errno=errno.ENOENT)
    after = sandbox.run(["true"])  # the supervisor carries on
    assert after.exited is not None and after.exited.exit_code == 0


# ---- rlimits -----------------------------------------------------------------------------------


def test_cpu_rlimit_stops_a_busy_loop(sandbox: SupervisorSandbox) -> None:
    out = sandbox.run(["sh", "-c", "while :; do :; done"], rlimits=[Rlimit("CPU", 1, 2)])
    assert out.exited is not None
    assert out.exited.signal in (signal.SIGXCPU, signal.SIGKILL)
    # the limit is checked against scheduler time at tick granularity, and rusage scales ticks:
    # under load the reported figure can trail the 1 s limit by a tick or more
    assert out.exited.utime_us + out.exited.stime_us >= 500_000


def test_nproc_rlimit_stops_forks_for_an_unprivileged_sandbox(supervisor_binary: Path) -> None:
    # RLIMIT_NPROC never applies to host uid 0, so this sandbox runs as nobody (65534), with a
    # copy of the supervisor where nobody can reach it (pytest's tmp dirs are 0700).
    with tempfile.TemporaryDirectory(prefix="contain-supervisor-nproc-") as shared:
        os.chmod(shared, 0o755)
        supervisor_copy = Path(shared) / "supervisor"
        shutil.copy(supervisor_binary, supervisor_copy)
        os.chmod(supervisor_copy, 0o755)
        sb = start_supervisor(supervisor_copy, user=65534)
    try:
        script = "for i in 1 2 3 4 5 6 7 8; do sleep 5 & done; echo forked"
        free = sb.run(["sh", "-c", script])
        assert free.stdout == b"forked\n"  # positive control: 8 forks work without the limit
        limited = sb.run(["sh", "-c", script], rlimits=[Rlimit("NPROC", 4, 4)])
    finally:
        _stop(sb)
    assert limited.exited is not None and limited.exited.exit_code != 0
    assert limited.stdout == b""
    assert b"Cannot fork" in limited.stderr  # dash's words for fork() failing with EAGAIN


# ---- Landlock ----------------------------------------------------------------------------------


def _landlock_sandbox(supervisor: Path, abi: int, *, landlock: bool) -> SupervisorSandbox:
    args: list[str] = []
    if landlock:
        plan = plan_landlock(abi=abi, write_paths=["/tmp"], requirement=LayerRequirement.REQUIRED)
        assert plan is not None
        args = plan.supervisor_args()
    return start_supervisor(supervisor, extra_bwrap=["--tmpfs", "/work"], supervisor_args=args)


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock", "control-without-landlock"])
def test_landlock_keeps_writes_to_the_write_paths(supervisor_binary: Path, landlock: bool) -> None:
    abi = _landlock_abi_or_skip(1)
    sb = _landlock_sandbox(supervisor_binary, abi, landlock=landlock)
    try:
        assert sb.ready.landlock == ("applied" if landlock else "off")
        in_tmp = sb.run(["sh", "-c", "echo x > /tmp/x && echo y > /dev/null"])
        in_work = sb.run(["sh", "-c", "echo y > /work/y"])
        read_back = sb.run(["cat", "/tmp/x"])
    finally:
        _stop(sb)
    assert in_tmp.exited is not None and in_tmp.exited.exit_code == 0
    assert read_back.stdout == b"x\n"
    assert in_work.exited is not None
    if landlock:
        assert in_work.exited.exit_code != 0
        assert b"Permission denied" in in_work.stderr  # EACCES, not EROFS: Landlock said no
    else:
        assert in_work.exited.exit_code == 0


@pytest.mark.parametrize("landlock", [True, False], ids=["landlock", "control-without-landlock"])
def test_landlock_scoping_keeps_the_workload_from_signalling_the_supervisor(supervisor_binary: Path, landlock: bool) -> None:
    abi = _landlock_abi_or_skip(6)
    sb = _landlock_sandbox(supervisor_binary, abi, landlock=landlock)
    try:
        out = sb.run(["sh", "-c", "kill -0 1"])
    finally:
        _stop(sb)
    assert out.exited is not None
    assert (out.exited.exit_code != 0) is landlock


def test_required_landlock_with_a_missing_path_refuses_to_start(supervisor_binary: Path) -> None:
    abi = _landlock_abi_or_skip(1)
    args = ["--landlock-abi", str(abi), "--landlock-required", "--landlock-read", "/",
            "--landlock-write", "/no/such/path"]  # fmt: skip
    with pytest.raises(SandboxStartError, match="/no/such/path"):
        start_supervisor(supervisor_binary, supervisor_args=args)


def test_auto_landlock_with_a_missing_path_reports_it_skipped(supervisor_binary: Path) -> None:
    abi = _landlock_abi_or_skip(1)
    args = ["--landlock-abi", str(abi), "--landlock-auto", "--landlock-read", "/",
            "--landlock-write", "/no/such/path"]  # fmt: skip
    sb = start_supervisor(supervisor_binary, supervisor_args=args)
    _stop(sb)
    assert sb.ready == Ready(pid=1, landlock="applied", landlock_abi=min(abi, 7), landlock_skipped=("/no/such/path",))


# ---- safety ------------------------------------------------------------------------------------


def test_supervisor_refuses_to_start_when_not_pid_1(supervisor_binary: Path) -> None:
    canary = subprocess.Popen(["sleep", "1000"])
    host_end, supervisor_end = socket.socketpair()
    try:
        done = subprocess.run(
            [str(supervisor_binary), "--control-fd", str(supervisor_end.fileno())],
            pass_fds=[supervisor_end.fileno()],
            capture_output=True,
            timeout=10,
            check=False,
        )
        assert done.returncode == 125
        assert b"not pid 1" in done.stderr
        assert canary.poll() is None  # nothing was killed
    finally:
        canary.kill()
        canary.wait()
        host_end.close()
        supervisor_end.close()


# ---- kernels that are not Linux (gVisor) -------------------------------------------------------
# gVisor's sentry (runsc 0.0~20221219.0) answers close_range(first, last > INT_MAX), PR_GET_SECUREBITS,
# PR_SET_SECUREBITS and PR_CAP_AMBIENT with EINVAL (docs/gvisor-notes.md). These rows make a Linux
# sandbox answer the same way, so the supervisor's handling is tested here on every run; the real
# runsc test is tests/integration/test_supervisor_runsc.py.

_PR_GET_SECUREBITS, _PR_SET_SECUREBITS, _PR_CAP_AMBIENT = 27, 28, 47
_INT_MAX = 2**31 - 1


def _kernel_rule(syscall: str, errno_value: int, *when: ArgCondition) -> SyscallRule:
    return SyscallRule(syscall=syscall, action=Action.ERRNO, errno_value=errno_value, when=when,
                       why="answer as the test's pretend kernel does", probe="n/a")  # fmt: skip


GVISOR_LIKE: tuple[SyscallRule, ...] = (
    _kernel_rule("close_range", errno.EINVAL, ArgCondition(index=1, op=ArgOp.GT, value=_INT_MAX)),
    *(
        _kernel_rule("prctl", errno.EINVAL, ArgCondition(index=0, op=ArgOp.EQ, value=option))
        for option in (_PR_GET_SECUREBITS, _PR_SET_SECUREBITS, _PR_CAP_AMBIENT)
    ),
)
WITHOUT_CLOSE_RANGE = (_kernel_rule("close_range", errno.ENOSYS),)  # Linux before 5.9
CLOSE_RANGE_EPERM = (_kernel_rule("close_range", errno.EPERM),)
ACCEPT_NO_SECUREBITS = supervisor_difference_args(kernel="gvisor")
LEAKED_FD = 700  # inherited without close-on-exec, as a careless launcher would leave one


def _on_kernel(supervisor: Path, rules: Sequence[SyscallRule], *, args: Sequence[str] = (),
               extra_bwrap: Sequence[str] = ()) -> SupervisorSandbox:  # fmt: skip
    """The supervisor under ``rules`` (bwrap installs them right before it execs the supervisor),
    holding an extra inherited fd ``LEAKED_FD``."""
    bpf = compile_filter(rules, arch=detect_host().arch)
    read_end, write_end = os.pipe()
    os.write(write_end, bpf)
    os.close(write_end)
    leak = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    os.dup2(leak, LEAKED_FD, inheritable=True)
    os.close(leak)
    try:
        return start_supervisor(
            supervisor, extra_bwrap=["--seccomp", str(read_end), *extra_bwrap], supervisor_args=args,
            pass_fds=(read_end, LEAKED_FD),
        )  # fmt: skip
    finally:
        os.close(read_end)
        os.close(LEAKED_FD)


def _workload_fds(sb: SupervisorSandbox) -> list[bytes]:
    out = sb.run(["sh", "-c", "ls /proc/$$/fd"])
    assert out.exited is not None and out.exited.exit_code == 0, (out.reply, out.stderr)
    return out.stdout.split()


def test_on_a_gvisor_like_kernel_the_supervisor_runs_commands_with_only_stdio_and_no_capabilities(
    supervisor_binary: Path,
) -> None:
    """Regression: close_range(first, ~0U) and PR_SET_SECUREBITS gave SPAWN_FAILED under gVisor."""
    sb = _on_kernel(supervisor_binary, GVISOR_LIKE, args=ACCEPT_NO_SECUREBITS)
    try:
        assert sb.ready == Ready(pid=1, landlock="off", landlock_abi=0, securebits="unsupported")
        leaked = Path(f"/proc/{sb.supervisor_host_pid}/fd/{LEAKED_FD}")
        assert leaked.exists()  # positive control: the supervisor does hold the leaked fd
        assert _workload_fds(sb) == [b"0", b"1", b"2"]
        out = sb.run(["grep", "^Cap", "/proc/self/status"])
        caps = dict(line.split(":\t") for line in out.stdout.decode().splitlines())
        assert caps == {name: "0000000000000000" for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
        assert sb.run(["/bin/echo", "hi"]).stdout == b"hi\n"
    finally:
        _stop(sb)


def test_a_kernel_without_securebits_is_refused_unless_the_host_accepts_the_difference(
    supervisor_binary: Path,
) -> None:
    with pytest.raises(SandboxStartError) as refused:
        _on_kernel(supervisor_binary, GVISOR_LIKE)
    assert "PR_GET_SECUREBITS" in str(refused.value) and "no-securebits" in str(refused.value)


def test_accepting_the_difference_on_linux_still_locks_securebits(supervisor_binary: Path) -> None:
    sb = start_supervisor(supervisor_binary, supervisor_args=ACCEPT_NO_SECUREBITS)
    try:
        assert sb.ready.securebits == "available"
        out = sb.run(["grep", "^CapBnd", "/proc/self/status"])
        assert out.stdout == b"CapBnd:\t0000000000000000\n"
    finally:
        _stop(sb)


def test_without_securebits_a_bounding_set_that_cannot_be_emptied_fails_the_run(supervisor_binary: Path) -> None:
    """The empty bounding set replaces securebits there: best effort on Linux, required without them."""
    no_setpcap = ("--cap-drop", "CAP_SETPCAP")  # root's bwrap then leaves a bounding set it cannot drop
    control = start_supervisor(supervisor_binary, extra_bwrap=no_setpcap)
    try:  # positive control: with securebits the run goes ahead (no_new_privs and capset(0) hold)
        assert isinstance(control.run(["/bin/true"]).reply, Started)
    finally:
        _stop(control)
    sb = _on_kernel(supervisor_binary, GVISOR_LIKE, args=ACCEPT_NO_SECUREBITS, extra_bwrap=no_setpcap)
    try:
        assert sb.run(["/bin/true"]).reply == SpawnFailed(stage="caps", errno=errno.EPERM)
    finally:
        _stop(sb)


def test_without_close_range_the_workload_still_inherits_only_stdio(supervisor_binary: Path) -> None:
    sb = _on_kernel(supervisor_binary, WITHOUT_CLOSE_RANGE)
    try:
        assert Path(f"/proc/{sb.supervisor_host_pid}/fd/{LEAKED_FD}").exists()  # positive control
        assert _workload_fds(sb) == [b"0", b"1", b"2"]
        assert _workload_fds(sb) == [b"0", b"1", b"2"]  # and again: the fallback is per run
    finally:
        _stop(sb)


def test_close_range_errors_other_than_unsupported_stay_fatal(supervisor_binary: Path) -> None:
    sb = _on_kernel(supervisor_binary, CLOSE_RANGE_EPERM)
    try:
        assert sb.run(["/bin/true"]).reply == SpawnFailed(stage="setup", errno=errno.EPERM)
    finally:
        _stop(sb)


# ---- measurement -------------------------------------------------------------------------------


def test_measure_run_round_trip_through_a_running_supervisor(sandbox: SupervisorSandbox) -> None:
    """Reports the median RUN of /bin/true (start, exec, exit, teardown, EXITED); no bound."""
    samples = []
    for _ in range(200):
        began = time.perf_counter()
        out = sandbox.run(["/bin/true"])
        samples.append(time.perf_counter() - began)
        assert out.exited is not None and out.exited.exit_code == 0
    median_ms = statistics.median(samples) * 1000
    p90_ms = statistics.quantiles(samples, n=10)[-1] * 1000
    print(f"\nsupervisor RUN /bin/true round trip: median {median_ms:.2f} ms, p90 {p90_ms:.2f} ms")


# ---- the cached build --------------------------------------------------------------------------


def test_supervisor_binary_is_built_once_as_0755_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(tmp_path / "cache"))
    first = ensure_supervisor_binary()
    assert first.parent == tmp_path / "cache"
    assert first.name.startswith("contain-supervisor-") and len(first.name) == len("contain-supervisor-") + 16
    assert stat.S_IMODE(first.stat().st_mode) == 0o755
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temp file left behind
    assert ensure_supervisor_binary() == first
    assert expected_supervisor_path() == first
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o755  # another uid may run bwrap


def test_group_writable_cache_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o775)
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(cache))
    with pytest.raises(SandboxStartError, match="group or world writable"):
        ensure_supervisor_binary()
    assert list(cache.iterdir()) == []


def test_a_cached_binary_with_a_loose_mode_is_refused(
    supervisor_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    swapped = cache / supervisor_binary.name
    shutil.copy(supervisor_binary, swapped)
    os.chmod(swapped, 0o777)
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(cache))
    with pytest.raises(SandboxStartError, match="mode 777"):
        ensure_supervisor_binary()


def test_no_compiler_is_an_unsupported_host_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UnsupportedHost) as caught:
        ensure_supervisor_binary()
    assert "apt-get install gcc libc6-dev" in caught.value.fix


# -- launcher: the one disk budget (--disk-tmpfs) ------------------------------------------------

DISK_PROBE = "grep ' {d} ' /proc/self/mountinfo; stat -c '%a %u' {d}/tmp {d}/s0"


def _launch(supervisor: Path, mountpoint: Path, *extra: str, as_user: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [str(supervisor), "--exec-as", "65534", "65534", *extra]
    if not extra or extra[-1] != "--":
        argv += ["--disk-tmpfs", str(mountpoint), "1048576", "300", "--disk-dir", "tmp", "1777"]
        argv += ["--disk-dir", "s0", "0755", "--"]
    argv += ["/bin/sh", "-c", DISK_PROBE.format(d=mountpoint)]
    if as_user:
        argv = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)


@pytest.mark.needs_root
@pytest.mark.parametrize("as_user", [False, True], ids=["root", "ordinary-user"])
def test_the_launcher_mounts_one_sized_inode_capped_tmpfs_only_in_its_own_namespace(
    supervisor_binary: Path, host_tmp: Path, as_user: bool
) -> None:
    shutil.copy(supervisor_binary, host_tmp / "supervisor")  # the ordinary user must be able to run it
    mountpoint = host_tmp / "disk"
    mountpoint.mkdir()
    done = _launch(host_tmp / "supervisor", mountpoint, as_user=as_user)
    assert done.returncode == 0, done.stderr
    line, tmp, scratch = done.stdout.splitlines()
    assert "- tmpfs tmpfs " in line and "size=1024k,nr_inodes=300" in line and "nosuid,nodev" in line
    assert (tmp, scratch) == ("1777 65534", "755 65534")  # created as the sandbox user
    assert str(mountpoint) not in Path("/proc/self/mountinfo").read_text()  # never in the host's table
    assert list(mountpoint.iterdir()) == []


@pytest.mark.needs_root
@pytest.mark.parametrize(
    ("disk_args", "message"),
    [
        (["--disk-tmpfs", "relative", "1048576", "300"], "usage"),
        (["--disk-tmpfs", "{m}", "0", "300"], "usage"),
        (["--disk-tmpfs", "{m}", "1048576", "300", "--disk-dir", "../escape", "1777"], "usage"),
        (["--disk-tmpfs", "{m}", "1048576", "300", "--disk-dir", "a/b", "1777"], "usage"),
        (["--disk-tmpfs", "{m}", "1048576", "300", "--disk-dir", "tmp", "999"], "usage"),
        (["--disk-tmpfs", "{link}", "1048576", "300"], "cannot mount the disk budget"),
    ],
    ids=["relative", "zero-size", "dotdot", "slash", "not-octal", "symlink"],
)
def test_the_launcher_refuses_a_bad_disk_budget_before_exec(
    supervisor_binary: Path, host_tmp: Path, disk_args: list[str], message: str
) -> None:
    (host_tmp / "disk").mkdir()
    (host_tmp / "link").symlink_to(host_tmp / "disk")
    args = [a.format(m=host_tmp / "disk", link=host_tmp / "link") for a in disk_args]
    argv = [str(supervisor_binary), "--exec-as", "65534", "65534", *args, "--", "/bin/echo", "ran"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 125 and message in done.stderr and "ran" not in done.stdout


@pytest.mark.needs_root
def test_an_ordinary_user_cannot_launch_as_another_user(supervisor_binary: Path, host_tmp: Path) -> None:
    shutil.copy(supervisor_binary, host_tmp / "supervisor")
    done = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
         str(host_tmp / "supervisor"), "--exec-as", "1000", "1000", "--", "/bin/echo", "ran"],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    assert done.returncode == 125 and "only root may --exec-as another user" in done.stderr
