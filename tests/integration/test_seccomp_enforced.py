"""The compiled seccomp filter, installed by real bwrap, refuses what the table says.

Each deny case runs twice: under ``bwrap --seccomp FD`` and, as its positive control, in the same
sandbox without the filter, where the probe must succeed or fail *differently*. A case whose
control shows the same errno could not have detected a missing filter, so it fails (or skips,
only when the host kernel lacks the feature the probe needs).

Probes are small ctypes calls made by /usr/bin/python3 inside the sandbox; one batch script runs
them all and prints ``{name: [return value, errno]}`` as JSON. The i386 and x32 cases kill the
process, so they run on their own.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from bwrap_args import USR_ONLY_SANDBOX
from contain.host.facts import detect_host
from contain.runtime.seccomp import compile_filter

pytestmark = pytest.mark.needs_bwrap

SANDBOX = [
    *USR_ONLY_SANDBOX,
    "--symlink",
    "usr/bin",
    "/bin",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
]
KILLED_BY_SIGSYS = 128 + signal.SIGSYS  # bwrap exits 128 + signal when its child is killed

# x86_64 syscall numbers; the probes run only there (see the arch check in the fixture).
BATCH_PROBE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a & (2**64 - 1)) for a in args])
    return [r, ctypes.get_errno() if r == -1 else 0]

def in_child(probe):
    # For probes that change the caller (ptrace, new namespaces): run them in a throwaway child.
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(wr, json.dumps(probe()).encode())
        os._exit(0)
    os.close(wr)
    os.waitpid(pid, 0)
    return json.loads(os.read(rd, 100))

def clone_newuser():
    r = sc(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD)
    if r[0] == 0:
        os._exit(0)
    if r[0] > 0:
        os.waitpid(r[0], 0)
        return [0, 0]
    return r

def fork_works():
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    return [0, 0] if os.waitpid(pid, 0)[1] >> 8 == 7 else [-1, 0]

def keep(r):
    if r[0] > 2:
        os.close(r[0])
    return r

out = {}
out["io_uring_setup"] = sc(425, 1, 0)
out["clone_newuser"] = in_child(clone_newuser)
out["unshare_newuser"] = in_child(lambda: sc(272, 0x10000000))
out["clone3"] = sc(435, 0, 0)
out["fork"] = fork_works()
FAMILIES = (("netlink", 16), ("packet", 17), ("vsock", 40), ("unix_high_bits", 1 | 1 << 32),
            ("inet", 2), ("unix", 1))
for name, family in FAMILIES:
    out["socket_" + name] = keep(sc(41, family, 1 if family != 16 else 3, 0))
pair = (ctypes.c_int * 2)()
out["socketpair_unix"] = sc(53, 1, 1, 0, ctypes.addressof(pair))
out["socketpair_inet"] = sc(53, 2, 1, 0, ctypes.addressof(pair))
# TIOCSTI needs the terminal to be ours: new session, pty as controlling terminal (TIOCSCTTY).
try:
    os.setsid()
except OSError:
    pass
master, slave = os.openpty()
sc(16, slave, 0x540E, 0)
char = ctypes.c_char(b"x")
out["ioctl_tiocsti_high_bits"] = sc(16, slave, 0x5412 | 1 << 32, ctypes.addressof(char))
out["ioctl_tioclinux"] = sc(16, slave, 0x541C, ctypes.addressof(char))
out["ptrace_traceme"] = in_child(lambda: sc(101, 0))
out["keyctl"] = sc(250, 0, -3, 0)  # KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING
out["bpf"] = sc(321, 999, 0, 0)  # unknown command: EINVAL when reached, before any cap check
out["personality_addr_no_randomize"] = in_child(lambda: sc(135, 0x0040000))
out["personality_query"] = sc(135, 0xFFFFFFFF)
out["mount"] = sc(165, 0, 0, 0, 0, 0)  # NULL target: EFAULT when reached
out["landlock"] = sc(444, 0, 0, 1)  # landlock_create_ruleset(NULL, 0, VERSION)
insn = (ctypes.c_uint64 * 1)(0x06 | 0x7FFF0000 << 32)  # BPF_RET | BPF_K, SECCOMP_RET_ALLOW
prog = (ctypes.c_ulong * 2)(1, ctypes.addressof(insn))
libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
out["seccomp_listener"] = in_child(lambda: sc(317, 1, 8, ctypes.addressof(prog)))
out["seccomp_nested"] = in_child(lambda: sc(317, 1, 0, ctypes.addressof(prog)))
print(json.dumps(out), flush=True)
"""


@dataclass(frozen=True)
class Case:
    probe: str
    refused_with: int  # errno under the filter
    missing_feature: str | None = None  # when the control shows the same errno, the kernel lacks it


DENIED = (
    Case("io_uring_setup", errno.EPERM, "io_uring is disabled (kernel.io_uring_disabled)"),
    Case("clone_newuser", errno.EPERM),
    Case("unshare_newuser", errno.EPERM),
    Case("clone3", errno.ENOSYS),
    Case("socket_netlink", errno.EAFNOSUPPORT),
    Case("socket_packet", errno.EAFNOSUPPORT),
    Case("socket_vsock", errno.EAFNOSUPPORT, "the kernel has no AF_VSOCK"),
    Case("socket_unix_high_bits", errno.EAFNOSUPPORT),
    Case("socketpair_inet", errno.EAFNOSUPPORT),
    Case("ioctl_tiocsti_high_bits", errno.EPERM, "TIOCSTI is disabled (dev.tty.legacy_tiocsti)"),
    Case("ioctl_tioclinux", errno.EPERM),
    Case("ptrace_traceme", errno.EPERM),
    Case("keyctl", errno.EPERM),
    Case("bpf", errno.EPERM),
    Case("personality_addr_no_randomize", errno.EPERM),
    Case("mount", errno.EPERM),
    Case("seccomp_listener", errno.EPERM),
)
ALLOWED = (
    "fork",
    "socket_inet",
    "socket_unix",
    "socketpair_unix",
    "personality_query",
    "landlock",
    "seccomp_nested",
)

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def _no_core_dumps() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGSYS would otherwise dump core


@pytest.fixture(scope="module")
def run_in_sandbox() -> Runner:
    """``run(argv, *, filtered, binds=())``: run argv in bwrap, with or without the filter."""
    facts = detect_host()
    if facts.bwrap_path is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    if facts.arch != "x86_64":
        pytest.skip(f"the probes use x86_64 syscall numbers; this host is {facts.arch}")
    bpf = compile_filter(arch=facts.arch, libseccomp_path=facts.libseccomp_path)
    bwrap = facts.bwrap_path

    def run(argv: Sequence[str], *, filtered: bool, binds: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
        fd = os.memfd_create("contain-seccomp-test")
        try:
            os.write(fd, bpf)
            os.lseek(fd, 0, os.SEEK_SET)
            seccomp = ["--seccomp", str(fd)] if filtered else []
            return subprocess.run(
                [bwrap, *SANDBOX, *binds, *seccomp, "--", *argv],
                pass_fds=(fd,),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                stdin=subprocess.DEVNULL,
                preexec_fn=_no_core_dumps,
            )
        finally:
            os.close(fd)

    return run


@pytest.fixture(scope="module")
def batch(run_in_sandbox: Runner) -> dict[bool, dict[str, list[int]]]:
    """The batch probe's results, keyed by whether the filter was installed."""
    results = {}
    for filtered in (True, False):
        done = run_in_sandbox(["/usr/bin/python3", "-c", BATCH_PROBE], filtered=filtered)
        assert done.returncode == 0, f"batch probe (filtered={filtered}) died: {done.stderr}"
        results[filtered] = json.loads(done.stdout)
    return results


@pytest.mark.parametrize("case", DENIED, ids=lambda c: c.probe)
def test_filter_refuses_with_the_tables_errno_and_the_control_does_not(
    case: Case, batch: dict[bool, dict[str, list[int]]]
) -> None:
    refused = [-1, case.refused_with]
    control = batch[False][case.probe]
    if control == refused:
        if case.missing_feature:
            pytest.skip(f"positive control cannot show the breach: {case.missing_feature}")
        pytest.fail(
            f"{case.probe}: control gives {control} without the filter too; "
            "the probe cannot tell whether the filter works"
        )
    assert batch[True][case.probe] == refused, f"{case.probe} under the filter"


@pytest.mark.parametrize("probe", ALLOWED)
def test_deliberate_allows_still_work_under_the_filter(probe: str, batch: dict[bool, dict[str, list[int]]]) -> None:
    assert batch[True][probe][0] >= 0, f"{probe} refused under the filter: {batch[True][probe]}"
    assert batch[False][probe][0] >= 0, f"{probe} fails even without the filter"


def test_the_filter_is_really_installed(run_in_sandbox: Runner) -> None:
    argv = ["/usr/bin/grep", "^Seccomp:", "/proc/self/status"]
    assert run_in_sandbox(argv, filtered=True).stdout.split() == ["Seccomp:", "2"]
    assert run_in_sandbox(argv, filtered=False).stdout.split() == ["Seccomp:", "0"]


def test_an_x32_syscall_kills_the_process(run_in_sandbox: Runner) -> None:
    probe = (
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True);"
        "r = libc.syscall(ctypes.c_long(39 | 0x40000000));"  # getpid through the x32 ABI
        "print('survived', r, ctypes.get_errno(), flush=True)"
    )
    control = run_in_sandbox(["/usr/bin/python3", "-c", probe], filtered=False)
    assert control.returncode == 0 and "survived" in control.stdout, control
    filtered = run_in_sandbox(["/usr/bin/python3", "-c", probe], filtered=True)
    assert filtered.returncode == KILLED_BY_SIGSYS, filtered
    assert "survived" not in filtered.stdout


I386_PROBE_C = r"""
#include <stdio.h>
int main(void) {
    long ret;
    __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20L) : "memory");  /* i386 getpid */
    printf("ret=%ld\n", ret);
    return 0;
}
"""


def test_an_i386_int80_syscall_kills_the_process(run_in_sandbox: Runner, tmp_path: Path) -> None:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the int 0x80 probe (Debian: gcc, libc6-dev)"
    source, binary = tmp_path / "int80.c", tmp_path / "int80"
    source.write_text(I386_PROBE_C)
    subprocess.run([gcc, "-static", "-O1", "-o", str(binary), str(source)], check=True, timeout=120)
    binds = ["--ro-bind", str(binary), "/int80"]
    control = run_in_sandbox(["/int80"], filtered=False, binds=binds)
    if control.returncode == 128 + signal.SIGSEGV or control.returncode == -signal.SIGSEGV:
        pytest.skip("the kernel has no IA32 emulation: int 0x80 faults without the filter")
    assert control.returncode == 0 and control.stdout.startswith("ret="), control
    assert int(control.stdout.strip().removeprefix("ret=")) > 0, control  # a pid, not -ENOSYS
    filtered = run_in_sandbox(["/int80"], filtered=True, binds=binds)
    assert filtered.returncode == KILLED_BY_SIGSYS, filtered
    assert "ret=" not in filtered.stdout
