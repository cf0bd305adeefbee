"""The guest agent as pid 1 of a fresh pid namespace on the host, driven through ``GuestSandbox``.

No VM: the agent runs under ``unshare --pid --uts --fork`` (so it is pid 1, as in the guest, and
its ``kill(-1)`` and ``sethostname`` stay in namespaces the test created), its control port is one
end of a socketpair (or a pty for the port-permission test), its cgroup root a fresh directory of
the host's cgroup2 hierarchy, and its workload runs as uid 1000. The host side is the product's:
``GuestSandbox`` plus ``run_loop.wait_for_command`` with ``CappedReader``, as ``Sandbox`` uses them.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import pty
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
import tracemalloc
import tty
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from contain.errors import FileTransferError, SandboxLost
from contain.host.facts import detect_host
from contain.runtime.backend import CommandRequest
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.files import anchor_export_destination
from contain.runtime.microvm.agent_build import ensure_guest_agent_binary
from contain.runtime.microvm.backend import guest_seccomp_filter
from contain.runtime.microvm.guest_channel import (
    HEADER,
    MAX_FILTER_INSTRUCTIONS,
    WINDOW_BYTES,
    GuestChannel,
    GuestExited,
    MsgType,
    encode_frame,
    encode_items,
)
from contain.runtime.microvm.guest_handle import GuestLimits, GuestSandbox
from contain.runtime.run_loop import wait_for_command
from contain.runtime.seccomp_rules import SECCOMP_RULES, Action
from contain.runtime.streams import CappedReader, StdinFeeder
from contain.runtime.supervisor_channel import SpawnFailed, Started

pytestmark = pytest.mark.needs_root

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}
WORKLOAD_UID = 1000
NO_LIMITS = GuestLimits()
CGROUP2 = (
    Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified/cgroup.procs").exists() else Path("/sys/fs/cgroup")
)


@functools.cache
def product_filter() -> bytes:
    """The filter the microvm backend sends (the process backend's, x86_64)."""
    return guest_seccomp_filter(detect_host())


@pytest.fixture(scope="session")
def agent_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONTAIN_CACHE_DIR", str(tmp_path_factory.mktemp("agent-cache")))
        return ensure_guest_agent_binary().path


class UnshareVmm:
    """The ``Vmm`` of these tests: the ``unshare`` process whose child (pid 1 of its namespace) is the agent."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.killed = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def netns_path(self) -> str:
        return f"/proc/{self.proc.pid}/ns/net"

    @property
    def cgroup(self) -> SandboxCgroup | None:
        return None

    def kill(self) -> None:
        self.killed = True
        self.proc.kill()  # --kill-child: the agent, pid 1 of the namespace, dies with it

    def close(self) -> None:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(timeout=5)


@dataclass
class Guest:
    sandbox: GuestSandbox
    vmm: UnshareVmm
    scratch: Path
    cgroup_root: Path
    machine_id: Path
    port_path: str | None = None

    def stderr(self) -> str:
        assert self.vmm.proc.stderr is not None
        return self.vmm.proc.stderr.read().decode(errors="replace")


def start_agent(
    agent: Path, tmp_path: Path, *, limits: GuestLimits = NO_LIMITS, port: str = "socket", chroot: bool = False
) -> tuple[Guest, socket.socket | int]:
    """Start the agent; returns the guest and the host end of the port (socket or pty master)."""
    cgroup_root = CGROUP2 / f"contain-agent-test-{uuid.uuid4().hex[:12]}"
    cgroup_root.mkdir()
    # The workload (uid 1000) must reach its scratch: pytest's directories are root's 0700, so the
    # scratch lives in a directory of its own under /tmp (removed by remove_guest_dirs).
    top = Path(tempfile.mkdtemp(prefix="contain-agent-test-", dir="/tmp"))
    top.chmod(0o755)
    scratch = top / "scratch"
    scratch.mkdir()
    os.chown(scratch, WORKLOAD_UID, WORKLOAD_UID)
    machine_id = tmp_path / "machine-id"
    port_path = None
    if port == "socket":
        host_end, agent_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        port_args, pass_fds = ["--port-fd", str(agent_end.fileno())], (agent_end.fileno(),)
    else:
        master, slave = pty.openpty()
        tty.setraw(slave)  # bytes as they are: no echo, no line discipline
        os.chmod(os.ttyname(slave), 0o666)  # the agent must tighten it to 0600 itself
        port_path = os.ttyname(slave)
        port_args, pass_fds = ["--port", port_path], ()
    argv = [
        "unshare", "--pid", "--uts", "--mount-proc", "--fork", "--kill-child", "--",
        # root's group as a supplementary group, as an /init might leave it: file requests must
        # not read through it
        "setpriv", "--groups", "0", "--",
        str(agent), *port_args,
        "--cgroup-root", str(cgroup_root), "--machine-id-path", str(machine_id),
        *(["--chroot", str(top)] if chroot else []),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, pass_fds=pass_fds, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if port == "socket":
        agent_end.close()
        channel = GuestChannel(os.dup(host_end.fileno()))
        keep: socket.socket | int = host_end
    else:
        channel = GuestChannel(os.dup(master))
        keep = master
        # the pty's slave stays open here until the agent has it (a closed slave hangs up the master)
        threading.Timer(5.0, os.close, args=(slave,)).start()
    vmm = UnshareVmm(proc)
    if not limits.seccomp_bpf:  # the agent refuses a SPAWN without one, as the backend always sends it
        limits = limits._replace(seccomp_bpf=product_filter())
    sandbox = GuestSandbox.connect(channel, vmm, limits=limits, timeout_s=10.0)
    return Guest(sandbox, vmm, scratch, cgroup_root, machine_id, port_path), keep


def agent_pid(guest: Guest) -> int:
    """The agent's host pid: the one child of ``unshare``."""
    return int(Path(f"/proc/{guest.vmm.pid}/task/{guest.vmm.pid}/children").read_text().split()[0])


def agent_descendants(guest: Guest) -> list[int]:
    """Every process below the agent, seen from the host (its run init, the workload, orphans)."""
    found: list[int] = []
    todo = [agent_pid(guest)]
    while todo:
        pid = todo.pop()
        for task in Path(f"/proc/{pid}/task").iterdir():
            children = [int(c) for c in (task / "children").read_text().split()]
            found += children
            todo += children
    return found


def remove_cgroup(root: Path) -> None:
    for child in (root / "contain-run", root):
        if child.exists():
            child.rmdir()


def remove_guest_dirs(made: Guest) -> None:
    remove_cgroup(made.cgroup_root)
    shutil.rmtree(made.scratch.parent)


@pytest.fixture
def guest(agent_binary: Path, tmp_path: Path) -> Iterator[Guest]:
    made, keep = start_agent(agent_binary, tmp_path)
    try:
        yield made
    finally:
        made.sandbox.close()
        if isinstance(keep, socket.socket):
            keep.close()
        remove_guest_dirs(made)


@dataclass
class Outcome:
    reply: Started | SpawnFailed
    exited: GuestExited | None
    stdout: bytes
    stderr: bytes
    truncated: bool = False


def run(
    guest: Guest, *argv: str, stdin: bytes | None = None, timeout_s: float = 20.0, output_cap: int = 1 << 20
) -> Outcome:
    """One command through the product's run loop, as ``Sandbox._run_locked`` drives it."""
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    if stdin is None:
        in_child, in_host = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC), None
    else:
        in_child, in_host = os.pipe2(os.O_CLOEXEC)
    reply = guest.sandbox.spawn(CommandRequest(tuple(argv), ENV, "/", ()), (in_child, out_w, err_w))
    for fd in (in_child, out_w, err_w):
        os.close(fd)
    stdout, stderr = CappedReader(out_r, output_cap), CappedReader(err_r, output_cap)
    if isinstance(reply, SpawnFailed):
        stdout.close()
        stderr.close()
        if in_host is not None:
            os.close(in_host)
        return Outcome(reply, None, b"", b"")
    feeder = StdinFeeder(in_host, stdin or b"") if in_host is not None else None
    outcome = wait_for_command(
        guest.sandbox,
        stdout,
        stderr,
        feeder,
        deadline=time.perf_counter() + timeout_s,
        cpu_budget_s=1e9,
        cpu_used=None,
        on_lost=lambda reason: guest.sandbox.destroy(),
    )
    exited = outcome.exited
    assert exited is None or isinstance(exited, GuestExited)
    return Outcome(reply, exited, stdout.result().data, stderr.result().data, stdout.truncated)


# ---- commands ---------------------------------------------------------------------------------


def test_ready_names_the_agent_as_pid_1_with_boot_id_and_kernel(guest: Guest) -> None:
    ready = guest.sandbox.ready
    assert ready is not None
    assert ready.pid == 1
    assert ready.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert ready.kernel == os.uname().release
    assert ready.cgroup.startswith("v2:")


def test_a_command_runs_as_uid_1000_in_a_new_session_without_capabilities(guest: Guest) -> None:
    result = run(
        guest,
        "sh",
        "-c",
        "id -u; id -g; id -G; grep -E '^Cap(Eff|Prm|Inh|Bnd|Amb)|^NoNewPrivs' /proc/self/status; ps -o sid= -p $$; echo $$",
    )
    assert isinstance(result.reply, Started)
    assert result.exited is not None and result.exited.exit_code == 0, result.stderr
    lines = result.stdout.decode().split("\n")
    assert lines[:3] == ["1000", "1000", "1000"]
    status = dict(line.split(":\t") for line in lines[3:9] if ":\t" in line)
    assert {status[key] for key in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd")} == {"0000000000000000"}
    assert status["NoNewPrivs"] == "1"


RUN_NAMESPACES = ("user", "pid", "mnt", "ipc", "uts", "cgroup")


def test_a_run_gets_user_pid_mount_ipc_uts_and_cgroup_namespaces_of_its_own_and_keeps_the_net_one(
    guest: Guest,
) -> None:
    agent = agent_pid(guest)
    agent_ns = {n: os.readlink(f"/proc/{agent}/ns/{n}") for n in (*RUN_NAMESPACES, "net")}
    script = "for n in user pid mnt ipc uts cgroup net; do echo $n $(readlink /proc/self/ns/$n); done"
    result = run(guest, "sh", "-c", script)
    assert result.exited is not None and result.exited.exit_code == 0, result.stderr
    ns = dict(line.split(" ", 1) for line in result.stdout.decode().splitlines())
    assert [n for n in RUN_NAMESPACES if ns[n] == agent_ns[n]] == []
    assert ns["net"] == agent_ns["net"]  # the guest's eth0 and lo are the egress path


def test_the_run_maps_only_the_workload_ids_and_sees_only_its_own_pid_namespace_and_cgroup(guest: Guest) -> None:
    script = (
        "echo $$; cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups; grep ^0:: /proc/self/cgroup; "
        "grep ^NSpid: /proc/self/status; cd /proc && echo [0-9]*"
    )
    result = run(guest, "sh", "-c", script)
    assert result.exited is not None and result.exited.exit_code == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.decode().splitlines()]
    # pid 2: the run's init is 1, hidden by hidepid=2 (it is not dumpable); NSpid has one entry
    # because /proc is a procfs of the run's own pid namespace, not the agent's
    assert lines[:5] + lines[6:] == ["2", "1000 1000 1", "1000 1000 1", "deny", "0::/", "2"]
    assert lines[5].split()[0] == "NSpid:" and len(lines[5].split()) == 2  # grep's pid, one namespace deep


def test_system_v_ipc_of_one_run_is_gone_for_the_next(guest: Guest) -> None:
    made = run(guest, "sh", "-c", "ipcmk -M 4096 >/dev/null && ipcs -m | grep -c '^0x'")
    assert made.exited is not None and made.exited.exit_code == 0, made.stderr
    assert made.stdout == b"1\n"
    after = run(guest, "sh", "-c", "ipcs -m | grep -c '^0x'")
    assert after.stdout == b"0\n", (after.reply, after.stderr, after.exited)


def test_a_run_whose_procfs_cannot_be_mounted_never_runs(agent_binary: Path, tmp_path: Path) -> None:
    """The chroot here has no /proc directory: the run's procfs mount fails, and that is a SPAWN_FAILED
    at stage proc, not a run with the agent's /proc or none."""
    made, keep = start_agent(agent_binary, tmp_path, chroot=True)
    try:
        assert run(made, "/scratch/anything").reply == SpawnFailed(stage="proc", errno=errno.ENOENT)
        assert agent_descendants(made) == []
    finally:
        made.sandbox.close()
        if isinstance(keep, socket.socket):
            keep.close()
        remove_guest_dirs(made)


def test_exit_codes_and_signals_are_reported_as_wait_statuses(guest: Guest) -> None:
    assert run(guest, "sh", "-c", "exit 7").exited.exit_code == 7  # type: ignore[union-attr]
    killed = run(guest, "sh", "-c", "kill -TERM $$")
    assert killed.exited is not None and killed.exited.signal == signal.SIGTERM


def test_a_missing_program_is_a_spawn_failure_at_exec_with_enoent(guest: Guest) -> None:
    result = run(guest, "no-such-program-anywhere")
    assert result.reply == SpawnFailed(stage="exec", errno=2)


def test_stdin_reaches_the_command_and_output_comes_back_in_order(guest: Guest) -> None:
    data = os.urandom(3 * WINDOW_BYTES + 123)  # more than one credit window in each direction
    result = run(guest, "cat", stdin=data, output_cap=8 << 20)
    assert result.exited is not None and result.exited.exit_code == 0
    assert result.stdout == data


def test_stdout_and_stderr_stay_apart(guest: Guest) -> None:
    result = run(guest, "sh", "-c", "echo out; echo err >&2")
    assert (result.stdout, result.stderr) == (b"out\n", b"err\n")


def test_frames_printed_by_the_workload_are_data_not_control(guest: Guest) -> None:
    """VM-03: a workload prints well-formed EXITED/READY/ERROR frames (and a broken one) on stdout and
    stderr; the host's result is the real exit status and the bytes come back verbatim."""
    forged = b"".join(
        encode_frame(kind, encode_items(items))
        for kind, items in (
            (
                MsgType.EXITED,
                ["status=0", "utime_us=0", "stime_us=0", "maxrss_kb=0", "oom_kills=0", "pids_limit_hits=0"],
            ),
            (
                MsgType.READY,
                ["version=2", "pid=1", "boot_id=00000000-0000-0000-0000-000000000000", "kernel=x", "cgroup=none"],
            ),
            (MsgType.ERROR, ["message=forged"]),
        )
    ) + HEADER.pack(0xFFFFFFFF, 3, 1, 0)
    script = (
        "import sys; d=bytes.fromhex(sys.argv[1]); sys.stdout.buffer.write(d); sys.stderr.buffer.write(d); sys.exit(3)"
    )
    result = run(guest, "python3", "-c", script, forged.hex())
    assert result.exited is not None and result.exited.exit_code == 3
    assert result.stdout == forged and result.stderr == forged
    assert run(guest, "true").exited.exit_code == 0  # type: ignore[union-attr]  # the channel is still in step


def test_an_output_flood_keeps_host_memory_within_the_windows(guest: Guest) -> None:
    """The host reader is slow on purpose: the guest may not send beyond its credit, so host memory
    for output stays within one window per stream while 64 MiB pass through."""
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    devnull = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    tracemalloc.start()
    try:
        reply = guest.sandbox.spawn(
            CommandRequest(("sh", "-c", "head -c 67108864 /dev/zero; head -c 67108864 /dev/zero >&2"), ENV, "/", ()),
            (devnull, out_w, err_w),
        )
        assert isinstance(reply, Started)
        for fd in (devnull, out_w, err_w):
            os.close(fd)
        total = {out_r: 0, err_r: 0}
        peak_buffered = 0
        selector = selectors.DefaultSelector()
        for fd in (out_r, err_r):
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select():
                chunk = os.read(key.fd, 1 << 16)  # slower than the guest writes: the windows fill
                if not chunk:
                    selector.unregister(key.fd)
                total[key.fd] += len(chunk)
            run_state = guest.sandbox._run
            assert run_state is not None
            peak_buffered = max(peak_buffered, *(len(o.pending) for o in run_state.out.values()))
        selector.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        os.close(out_r)
        os.close(err_r)
    assert total == {out_r: 64 << 20, err_r: 64 << 20}
    assert guest.sandbox.wait_exited(10).exit_code == 0  # type: ignore[union-attr]
    assert peak_buffered <= WINDOW_BYTES
    assert peak < 16 << 20  # Python allocations during 128 MiB of output


def test_the_output_cap_closes_the_stream_in_the_guest(guest: Guest) -> None:
    result = run(guest, "sh", "-c", "yes; echo yes-ended-with-$? >&2", output_cap=100_000)
    assert result.truncated and len(result.stdout) == 100_000
    assert result.exited is not None and result.exited.exit_code == 0
    assert result.stderr.startswith(b"yes: standard output: Broken pipe") or b"yes-ended-with-" in result.stderr


def test_the_output_max_is_enforced_inside_the_guest(agent_binary: Path, tmp_path: Path) -> None:
    made, keep = start_agent(agent_binary, tmp_path, limits=GuestLimits(output_max_bytes=1000))
    try:
        # the host's own cap is the same 1000 bytes (as Sandbox sets both from output_bytes): it
        # must still see that the command wrote past it, or the result would not say "truncated"
        result = run(made, "sh", "-c", "head -c 100000 /dev/zero; echo done-$? >&2", output_cap=1000)
        assert (len(result.stdout), result.truncated) == (1000, True)
        assert result.exited is not None and result.exited.exit_code == 0
        assert result.stderr == b"done-141\n"  # SIGPIPE once the agent closed its end of the pipe
        exact = run(made, "sh", "-c", "head -c 1000 /dev/zero", output_cap=1000)
        assert (len(exact.stdout), exact.truncated) == (1000, False)  # exactly the cap is not a truncation
    finally:
        made.sandbox.close()
        if isinstance(keep, socket.socket):
            keep.close()
        remove_guest_dirs(made)


def test_a_timeout_kills_every_process_of_the_run_including_new_sessions(guest: Guest) -> None:
    script = "setsid sleep 60 & (trap '' TERM HUP; sleep 60) & sleep 60"
    began = time.perf_counter()
    result = run(guest, "sh", "-c", script, timeout_s=1.0)
    assert result.exited is not None and result.exited.signal == signal.SIGKILL
    assert time.perf_counter() - began < 10
    # EXITED comes after everything was reaped: the agent has no process left, in or out of the run cgroup
    assert agent_descendants(guest) == []
    assert (guest.cgroup_root / "contain-run" / "cgroup.procs").read_text() == ""


def test_memory_limits_are_refused_when_the_guest_has_no_memory_controller(agent_binary: Path, tmp_path: Path) -> None:
    made, keep = start_agent(agent_binary, tmp_path, limits=GuestLimits(memory_max_bytes=64 << 20, pids_max=64))
    try:
        assert made.sandbox.ready is not None
        if "memory" in made.sandbox.ready.controllers:
            pytest.skip("this host's cgroup2 has the memory controller: the refusal path is not reachable")
        result = run(made, "true")
        assert result.reply == SpawnFailed(stage="cgroup", errno=95)  # EOPNOTSUPP: fail closed, nothing ran
    finally:
        made.sandbox.close()
        if isinstance(keep, socket.socket):
            keep.close()
        remove_guest_dirs(made)


# ---- the control port ---------------------------------------------------------------------------


def test_the_workload_cannot_open_the_control_port(agent_binary: Path, tmp_path: Path) -> None:
    made, master = start_agent(agent_binary, tmp_path, port="pty")
    try:
        assert made.sandbox.ready is not None
        # The agent made its port root-only; the workload (uid 1000, no capabilities) is refused.
        assert made.port_path is not None
        slave_path = made.port_path
        mode = os.stat(slave_path)
        assert (stat.S_IMODE(mode.st_mode), mode.st_uid) == (0o600, 0)
        result = run(made, "sh", "-c", f"exec 3<>{slave_path}", timeout_s=10)
        assert result.exited is not None and result.exited.exit_code != 0
        assert b"Permission denied" in result.stderr
        assert run(made, "sh", "-c", "ls -l /proc/1/fd/ 2>&1; cat /proc/1/environ").exited.exit_code != 0  # type: ignore[union-attr]
    finally:
        made.sandbox.close()
        os.close(master)  # type: ignore[arg-type]
        remove_guest_dirs(made)


# ---- files ------------------------------------------------------------------------------------


def test_put_then_get_round_trips_a_file_owned_by_the_workload(guest: Guest) -> None:
    data = os.urandom(300_000)
    guest.sandbox.put_file(str(guest.scratch), "dir/sub/file.bin", data, mode=0o640, label="file")
    info = os.stat(guest.scratch / "dir/sub/file.bin")
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (WORKLOAD_UID, 0o640)
    assert guest.sandbox.get_file(str(guest.scratch), "dir/sub/file.bin", max_bytes=len(data), label="file") == data


def test_put_and_get_refuse_a_symlink_planted_at_any_component(guest: Guest, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    run(guest, "sh", "-c", f"cd {guest.scratch} && ln -s {outside} link && ln -s {outside}/secret leaf")
    for relative in ("link/secret", "leaf", "link/new"):
        with pytest.raises(FileTransferError):
            guest.sandbox.get_file(str(guest.scratch), relative, max_bytes=100, label=relative)
        with pytest.raises(FileTransferError):
            guest.sandbox.put_file(str(guest.scratch), relative, b"x", mode=0o644, label=relative)
    assert (outside / "secret").read_text() == "host secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def test_get_refuses_fifos_devices_and_files_over_the_bound(guest: Guest) -> None:
    run(guest, "sh", "-c", f"cd {guest.scratch} && mkfifo fifo && head -c 2000 /dev/zero > big")
    with pytest.raises(FileTransferError, match="not a regular file"):
        guest.sandbox.get_file(str(guest.scratch), "fifo", max_bytes=100, label="fifo")
    with pytest.raises(FileTransferError, match="over the 1999-byte limit"):
        guest.sandbox.get_file(str(guest.scratch), "big", max_bytes=1999, label="big")
    with pytest.raises(FileTransferError):
        guest.sandbox.put_file(str(guest.scratch), "fifo", b"x", mode=0o644, label="fifo")
    assert run(guest, "true").exited.exit_code == 0  # type: ignore[union-attr]  # the agent did not block on the fifo


def test_file_requests_cannot_climb_out_of_the_scratch_root(guest: Guest) -> None:
    for relative in ("../x", "a/../../x", "/etc/passwd", "./x", "a//b"):
        with pytest.raises(SandboxLost):
            guest.sandbox.get_file(str(guest.scratch), relative, max_bytes=100, label=relative)
        break  # the first one already ends the channel: a bad path is a protocol error, never an open


def test_export_copies_files_and_directories_and_skips_links_and_fifos(guest: Guest, tmp_path: Path) -> None:
    script = (
        f"cd {guest.scratch} && mkdir -p out/a/b && echo one > out/a/one && echo two > out/a/b/two && "
        f"ln -s /etc/passwd out/link && mkfifo out/fifo && head -c 5000 /dev/zero > out/big"
    )
    assert run(guest, "sh", "-c", script).exited.exit_code == 0  # type: ignore[union-attr]
    dest = tmp_path / "export"
    anchor = anchor_export_destination(str(dest))
    try:
        report = guest.sandbox.export(str(guest.scratch / "out"), anchor, max_bytes=4096)
    finally:
        anchor.close()
    assert (dest / "a/one").read_text() == "one\n" and (dest / "a/b/two").read_text() == "two\n"
    assert not (dest / "link").exists() and not (dest / "link").is_symlink()
    assert not (dest / "fifo").exists() and not (dest / "big").exists()
    assert (report.files, report.dirs, report.bytes) == (2, 2, 8)
    assert sorted(report.skipped) == [
        "big (export limit of 4096 bytes reached)",
        "fifo (not a regular file or directory)",
        "link (not a regular file or directory)",
    ]


# ---- framing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        HEADER.pack(1 << 30, MsgType.HELLO, 0, 0),  # oversize
        HEADER.pack(0, 200, 0, 0),  # unknown type
        HEADER.pack(0, MsgType.KILL, 0, 7),  # reserved bits
        HEADER.pack(3, MsgType.HELLO, 0, 0) + b"abc",  # items not NUL-terminated
        HEADER.pack(0, MsgType.DATA, 1, 0),  # stdout data from the host
        encode_frame(MsgType.PUT_FILE, encode_items(["root=/", "path=../etc/x", "mode=644", "size=1"])),
    ],
    ids=["oversize", "unknown-type", "reserved", "unterminated-items", "host-stdout", "dotdot-path"],
)
def test_a_framing_error_ends_the_agent_and_runs_nothing(agent_binary: Path, tmp_path: Path, raw: bytes) -> None:
    made, keep = start_agent(agent_binary, tmp_path)
    try:
        assert isinstance(keep, socket.socket)
        keep.sendall(raw)
        made.vmm.proc.wait(timeout=10)
        assert b"protocol error" in made.vmm.proc.stderr.read()  # type: ignore[union-attr]
        with pytest.raises(SandboxLost):
            made.sandbox.wait_exited(5) if made.sandbox._run else made.sandbox.hello(timeout_s=5)
    finally:
        made.sandbox.close()
        keep.close()  # type: ignore[union-attr]
        remove_guest_dirs(made)


def test_reseed_and_identity_take_effect_in_the_guest(guest: Guest) -> None:
    guest.sandbox.reseed(os.urandom(64))
    guest.sandbox.set_identity(hostname="vm-0f3a", machine_id="0123456789abcdef0123456789abcdef")
    assert run(guest, "hostname").stdout == b"vm-0f3a\n"
    assert guest.machine_id.read_text() == "0123456789abcdef0123456789abcdef\n"
    assert os.uname().nodename != "vm-0f3a"  # the host's own hostname did not change


def test_with_a_chroot_file_requests_name_paths_as_the_workload_sees_them(agent_binary: Path, tmp_path: Path) -> None:
    """In the guest the workload is chrooted to /newroot while the agent is not: /work must mean
    /newroot/work for put, get and export, never the initramfs's /work."""
    made, keep = start_agent(agent_binary, tmp_path, chroot=True)
    try:
        made.sandbox.put_file("/scratch", "in.txt", b"inside", mode=0o644, label="in.txt")
        assert (made.scratch / "in.txt").read_bytes() == b"inside"
        assert made.sandbox.get_file("/scratch", "in.txt", max_bytes=100, label="in.txt") == b"inside"
        anchor = anchor_export_destination(str(tmp_path / "out"))
        try:
            report = made.sandbox.export("/scratch", anchor, max_bytes=100)
        finally:
            anchor.close()
        assert (report.files, (tmp_path / "out/in.txt").read_bytes()) == (1, b"inside")
    finally:
        made.sandbox.close()
        if isinstance(keep, socket.socket):
            keep.close()
        remove_guest_dirs(made)


def test_a_file_transfer_while_a_command_streams_output_keeps_the_channel(guest: Guest) -> None:
    """The pump's CREDIT and stdin frames may fall between a PUT_FILE's data frames; the agent
    must take them as flow control, not as a request in the middle of the transfer."""
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    devnull = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    reply = guest.sandbox.spawn(
        CommandRequest(("sh", "-c", "head -c 200000000 /dev/zero"), ENV, "/", ()), (devnull, out_w, err_w)
    )
    assert isinstance(reply, Started)
    for fd in (devnull, out_w, err_w):
        os.close(fd)
    drained = {"bytes": 0}

    def drain() -> None:
        while chunk := os.read(out_r, 1 << 16):
            drained["bytes"] += len(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    data = os.urandom(8 << 20)
    for index in range(4):
        guest.sandbox.put_file(str(guest.scratch), f"during-{index}.bin", data, mode=0o644, label="during")
    exited = guest.sandbox.wait_exited(60)
    reader.join(timeout=60)
    os.close(out_r)
    os.close(err_r)
    assert exited is not None and exited.exit_code == 0
    assert drained["bytes"] == 200_000_000
    assert (guest.scratch / "during-3.bin").read_bytes() == data


def test_get_reads_only_what_the_workload_could_read(guest: Guest) -> None:
    """File requests act as the workload: a root-owned 0640 file (group root) in scratch stays
    unreadable even though the agent itself is root (and began with root's groups)."""
    secret = guest.scratch / "root-only"
    secret.write_text("root only")
    os.chown(secret, 0, 0)
    secret.chmod(0o640)
    with pytest.raises(FileTransferError, match="Permission denied"):
        guest.sandbox.get_file(str(guest.scratch), "root-only", max_bytes=100, label="root-only")
    assert run(guest, "cat", str(secret)).exited.exit_code != 0  # type: ignore[union-attr]  # same verdict


def test_close_shuts_the_guest_down_without_a_kill_and_leaves_no_process(guest: Guest) -> None:
    run(guest, "sh", "-c", "setsid sleep 60 &")
    guest.sandbox.close()
    assert guest.vmm.proc.returncode is not None and not guest.vmm.killed
    assert (guest.cgroup_root / "contain-run" / "cgroup.procs").read_text() == ""  # the setsid'd sleep too


@pytest.mark.skipif(
    shutil.which("strace") is None, reason="strace is not installed: the agent's ioctls cannot be watched"
)
def test_reseed_forces_a_crng_reseed_after_adding_the_entropy(guest: Guest, tmp_path: Path) -> None:
    """Added entropy alone reaches an initialised CRNG's keys only at its next timed reseed (60 s):
    restored VMs would share getrandom() output until then. Watched from outside with strace."""
    agent = agent_pid(guest)
    log = tmp_path / "strace.log"
    tracer = subprocess.Popen(["strace", "-qq", "-e", "trace=ioctl", "-o", str(log), "-p", str(agent)])
    try:
        deadline = time.monotonic() + 10
        while "TracerPid:\t0\n" in Path(f"/proc/{agent}/status").read_text():  # until strace is attached
            assert time.monotonic() < deadline, "strace did not attach"
        guest.sandbox.reseed(os.urandom(64))
    finally:
        tracer.terminate()
        tracer.wait(timeout=10)
    calls = [line for line in log.read_text().splitlines() if "ioctl(" in line]
    assert [("RNDADDENTROPY" in c, "RNDRESEEDCRNG" in c) for c in calls] == [(True, False), (False, True)], calls
    assert all(c.rstrip().endswith("= 0") for c in calls), calls


def test_the_run_after_a_capped_run_gets_its_own_output(guest: Guest) -> None:
    """When the host's cap closes a stream, the end of that stream still comes from the guest later
    (after CLOSE_OUTPUT); the next command must not take it for the end of its own output."""
    for round_number in range(24):  # a race: the stale end must arrive after the pump ended
        capped = run(guest, "head", "-c", "300000", "/dev/zero", output_cap=10_000)
        assert capped.truncated
        second = run(guest, "echo", f"second-{round_number}")
        assert second.stdout == f"second-{round_number}\n".encode(), round_number


def test_stdin_still_in_flight_when_a_command_exits_is_not_credited_to_the_next(guest: Guest) -> None:
    """A command that exits without reading its stdin leaves host DATA in flight; credit the agent
    returned for it would land on the next command's window and overflow it."""
    for round_number in range(24):
        early = run(guest, "head", "-c", "1", stdin=b"x" * (1 << 20))
        assert early.stdout == b"x", round_number
        echoed = run(guest, "cat", stdin=b"next")
        assert echoed.stdout == b"next", round_number


# ---- seccomp (the process backend's filter, installed by the agent right before exec) ---------

# Each call from the workload, as (syscall number on x86_64, arguments): keyctl(GET_KEYRING_ID,
# session keyring, 0), io_uring_setup(1, NULL), personality(ADDR_NO_RANDOMIZE). Unfiltered, as
# uid 1000, keyctl and personality succeed and io_uring_setup fails with EFAULT.
SYSCALL_CALLS = {"keyctl": (250, (0, -3, 0)), "io_uring_setup": (425, (1, 0)), "personality": (135, (0x0040000,))}
SYSCALL_SCRIPT = """
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
for name, (nr, args) in json.loads(sys.argv[1]).items():
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    out[name] = ctypes.get_errno() if rc == -1 else 0
print(json.dumps(out))
"""


def _table_errno(syscall: str) -> int:
    """The errno the rule table gives ``syscall`` (its unconditional ERRNO row, or for personality
    the rows that refuse a flag)."""
    rows = [row for row in SECCOMP_RULES if row.syscall == syscall and row.action is Action.ERRNO]
    values = {row.errno_value for row in rows}
    assert len(values) == 1, (syscall, values)
    value = values.pop()
    assert value is not None
    return value


def test_the_workload_gets_the_rule_tables_errno_for_keyrings_io_uring_and_personality(guest: Guest) -> None:
    result = run(guest, "python3", "-c", SYSCALL_SCRIPT, json.dumps(SYSCALL_CALLS))
    assert result.exited is not None and result.exited.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen == {name: _table_errno(name) for name in SYSCALL_CALLS}
    # and the filter is the seccomp mode the kernel reports for the workload
    status = run(guest, "grep", "-E", "^(Seccomp|Seccomp_filters):", "/proc/self/status")
    assert b"Seccomp:\t2" in status.stdout


def test_a_spawn_without_a_filter_or_with_one_over_the_bpf_limit_is_refused(guest: Guest) -> None:
    base = ["cwd=/", "arg=/bin/true", "env=PATH=/usr/bin:/bin"]
    over = (b"\x06\x00\x00\x00\x00\x00\xff\x7f" * (MAX_FILTER_INSTRUCTIONS + 1)).hex()  # RET ALLOW
    for items in (base, [*base, f"seccomp={over}"], [*base, "seccomp=0600"], [*base, "seccomp=" + "G" * 16]):
        with guest.sandbox._request_lock:
            reply = guest.sandbox._call(encode_frame(MsgType.SPAWN, encode_items(items)))
            guest.sandbox._awaiting = False
        assert reply.type is MsgType.ERROR, items[-1][:40]
    # the agent is still there and serves the next, filtered, command
    assert run(guest, "sh", "-c", "exit 3").exited.exit_code == 3  # type: ignore[union-attr]


def test_a_filter_the_kernel_refuses_means_the_command_never_runs(agent_binary: Path, tmp_path: Path) -> None:
    invalid = b"\xff\xff\x00\x00\x00\x00\x00\x00"  # an unknown BPF opcode: the kernel says EINVAL
    made, keep = start_agent(agent_binary, tmp_path, limits=GuestLimits(seccomp_bpf=invalid))
    try:
        marker = made.scratch / "ran"
        result = run(made, "sh", "-c", f"touch {marker}")
        assert result.reply == SpawnFailed(stage="seccomp", errno=errno.EINVAL)
        assert not marker.exists()
    finally:
        made.sandbox.close()
        keep.close()  # type: ignore[union-attr]
        remove_guest_dirs(made)
