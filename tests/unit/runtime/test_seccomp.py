"""Unit tests for contain.runtime.seccomp: the table compiled to BPF, and libseccomp errors.

Pure: no root, no bwrap, no filter is installed. The compiled program is run by a small classic-BPF
interpreter below (the subset libseccomp emits), so each row is checked against the real bytes the
kernel would get.
"""

from __future__ import annotations

import errno
import random
import struct
from collections.abc import Sequence
from pathlib import Path

import pytest

from contain.errors import UnsupportedHost
from contain.runtime import seccomp
from contain.runtime.seccomp import compile_filter, describe_filter_pfc, plan_filter
from contain.runtime.seccomp_rules import SECCOMP_RULES, Action, ArgCondition, ArgOp, SyscallRule

AUDIT_ARCH_X86_64 = 0xC000_003E
AUDIT_ARCH_I386 = 0x4000_0003
AUDIT_ARCH_AARCH64 = 0xC000_00B7
AUDIT_ARCH_ARM = 0x4000_0028
X32_SYSCALL_BIT = 0x4000_0000

RET_KILL_PROCESS = 0x8000_0000
RET_ERRNO = 0x0005_0000
RET_ALLOW = 0x7FFF_0000


# --- a classic BPF interpreter for seccomp programs ------------------------------------------


def run_bpf(program: bytes, *, nr: int, arch: int, args: Sequence[int] = (0,) * 6) -> int:
    """Run a seccomp BPF program on one ``struct seccomp_data``; return the 32-bit action."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *[a & (2**64 - 1) for a in (*args, 0, 0, 0, 0, 0, 0)[:6]])
    insns = [struct.unpack_from("<HBBI", program, off) for off in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc &= k
        elif code == 0x05:  # BPF_JMP | BPF_JA
            pc += k
        elif code in (0x15, 0x25, 0x35, 0x45):  # JEQ, JGT, JGE, JSET with K
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"opcode {code:#x} at {pc - 1} not understood by the test")


def ret_of(rule: SyscallRule) -> int:
    if rule.action is Action.ERRNO:
        assert rule.errno_value is not None
        return RET_ERRNO | rule.errno_value
    return {Action.KILL_PROCESS: RET_KILL_PROCESS, Action.ALLOW: RET_ALLOW}[rule.action]


def witness(rule: SyscallRule) -> list[int]:
    """Six argument values that satisfy every condition of ``rule``."""
    args = [0] * 6
    for cond in rule.when:
        args[cond.index] = {
            ArgOp.EQ: cond.value,
            ArgOp.NE: cond.value ^ 1,
            ArgOp.GT: cond.value + 1,
            ArgOp.GE: cond.value,
            ArgOp.LT: cond.value - 1,
            ArgOp.LE: cond.value,
            ArgOp.MASKED_EQ: cond.value,
        }[cond.op]
    assert rule.matches(args), rule
    return args


def nr_on(arch: str, name: str) -> int:
    """The arch's syscall number, from the plan (libseccomp's tables)."""
    plan = plan_filter([SyscallRule(syscall=name, action=Action.KILL_PROCESS, why="x", probe="x")], arch=arch)
    assert plan.denies, f"{name} does not exist on {arch}"
    return plan.denies[0][1]


@pytest.fixture(scope="module")
def x86_bpf() -> bytes:
    return compile_filter(arch="x86_64")


def x86(bpf: bytes, nr: int, *args: int) -> int:
    return run_bpf(bpf, nr=nr, arch=AUDIT_ARCH_X86_64, args=args)


# --- the table against the compiled filter ---------------------------------------------------


def test_no_deny_row_shadows_an_allow_row() -> None:
    for allow in (r for r in SECCOMP_RULES if r.action is Action.ALLOW):
        args = witness(allow)
        for deny in (r for r in SECCOMP_RULES if r.is_deny and r.syscall == allow.syscall):
            assert not deny.matches(args), f"{deny} refuses what {allow} allows"


def test_every_syscall_in_the_table_exists_on_x86_64() -> None:
    plan = plan_filter(arch="x86_64")
    assert plan.absent_on_arch == ()
    assert len(plan.denies) + len(plan.allows) == len(SECCOMP_RULES)


def test_aarch64_records_the_rows_for_syscalls_it_does_not_have() -> None:
    plan = plan_filter(arch="aarch64")
    absent = {r.syscall for r in plan.absent_on_arch}
    # x86-only legacy calls, and the path calls aarch64 has only in their *at form
    assert absent == {"iopl", "ioperm", "uselib", "chmod", "creat", "mknod", "open"}
    assert len(plan.denies) + len(plan.allows) + len(plan.absent_on_arch) == len(SECCOMP_RULES)


# --- the compiled filter --------------------------------------------------------------------------


def test_compile_filter_returns_whole_bpf_instructions(x86_bpf: bytes) -> None:
    assert len(x86_bpf) > 0
    assert len(x86_bpf) % 8 == 0
    assert len(x86_bpf) // 8 < 4096  # BPF_MAXINSNS


def test_compile_filter_is_cached_per_rules_and_arch(x86_bpf: bytes) -> None:
    assert compile_filter(arch="x86_64") is x86_bpf
    assert compile_filter(list(SECCOMP_RULES), arch="x86_64") is x86_bpf
    fewer = compile_filter(SECCOMP_RULES[:5], arch="x86_64")
    assert fewer != x86_bpf
    assert compile_filter(arch="aarch64") != x86_bpf


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_row_compiles_to_its_action(arch: str) -> None:
    bpf = compile_filter(arch=arch)
    token = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}[arch]
    plan = plan_filter(arch=arch)
    for rule, nr in plan.denies:
        assert run_bpf(bpf, nr=nr, arch=token, args=witness(rule)) == ret_of(rule), rule
    for rule in plan.allows:
        nr = nr_on(arch, rule.syscall)
        assert run_bpf(bpf, nr=nr, arch=token, args=witness(rule)) == RET_ALLOW, rule


def test_the_pfc_text_mentions_every_denied_syscall() -> None:
    pfc = describe_filter_pfc(arch="x86_64")
    for rule in SECCOMP_RULES:
        if rule.is_deny:
            assert f'"{rule.syscall}"' in pfc, rule.syscall
    assert "action KILL_PROCESS" in pfc  # the bad-arch action


def test_ordinary_syscalls_are_allowed(x86_bpf: bytes) -> None:
    # read, write, openat, execve, mmap, exit_group, getpid, fork-style clone(SIGCHLD)
    for nr, args in (
        (0, ()),
        (1, ()),
        (257, ()),
        (59, ()),
        (9, ()),
        (231, ()),
        (39, ()),
        (56, (17,)),
        (56, (0x003D0F00,)),
    ):  # 0x3d0f00: glibc pthread_create flags
        assert x86(x86_bpf, nr, *args) == RET_ALLOW, nr


def test_other_abis_hit_the_kill_action(x86_bpf: bytes) -> None:
    # i386 via int 0x80: getpid is 20 there, socketcall 102
    for nr in (20, 102):
        assert run_bpf(x86_bpf, nr=nr, arch=AUDIT_ARCH_I386) == RET_KILL_PROCESS
    # x32: same AUDIT_ARCH, nr | 0x40000000; libseccomp adds the check, we pin it here
    for nr in (39, 41, 101, 425):
        assert x86(x86_bpf, nr | X32_SYSCALL_BIT) == RET_KILL_PROCESS
    aarch64 = compile_filter(arch="aarch64")
    assert run_bpf(aarch64, nr=20, arch=AUDIT_ARCH_ARM) == RET_KILL_PROCESS
    assert run_bpf(aarch64, nr=172, arch=AUDIT_ARCH_AARCH64) == RET_ALLOW  # getpid
    assert run_bpf(aarch64, nr=425, arch=AUDIT_ARCH_AARCH64) == RET_ERRNO | errno.EPERM


def test_clone_is_refused_for_each_namespace_flag_only(x86_bpf: bytes) -> None:
    clone = 56
    for flag in (0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000):
        assert x86(x86_bpf, clone, flag | 17) == RET_ERRNO | errno.EPERM
        assert x86(x86_bpf, clone, flag | 0x003D0F00) == RET_ERRNO | errno.EPERM
    assert x86(x86_bpf, clone, 1 << 32 | 17) == RET_ALLOW  # no CLONE_NEW* bit set
    assert x86(x86_bpf, 435) == RET_ERRNO | errno.ENOSYS  # clone3


def test_socket_allows_only_unix_inet_inet6(x86_bpf: bytes) -> None:
    for family in range(0, 64):
        expected = RET_ALLOW if family in (1, 2, 10) else RET_ERRNO | errno.EAFNOSUPPORT
        assert x86(x86_bpf, 41, family, 1, 0) == expected, family
        pair = RET_ALLOW if family == 1 else RET_ERRNO | errno.EAFNOSUPPORT
        assert x86(x86_bpf, 53, family, 1, 0) == pair, family
    # high bits never let a family through; the kernel would read AF_UNIX, we refuse instead
    for family in (1 << 32 | 1, 1 << 32 | 16, 2**64 - 1):
        assert x86(x86_bpf, 41, family) == RET_ERRNO | errno.EAFNOSUPPORT


def test_ioctl_refuses_tiocsti_and_tioclinux_whatever_the_high_bits(x86_bpf: bytes) -> None:
    for request in (0x5412, 0x541C):
        for high in (0, 1 << 32, 0xFFFF_FFFF << 32):
            assert x86(x86_bpf, 16, 0, high | request) == RET_ERRNO | errno.EPERM
    for request in (0x5401, 0x5413, 0x540E, 0x541B, 0x5411, 0x5412 ^ 1):  # TCGETS, TIOCGWINSZ...
        assert x86(x86_bpf, 16, 0, request) == RET_ALLOW


def test_personality_passes_only_per_linux_and_the_query(x86_bpf: bytes) -> None:
    rows = [r for r in SECCOMP_RULES if r.syscall == "personality" and r.is_deny]
    rng = random.Random(1234)
    samples = [1, 8, 0x0040000, 0x0400000, 0x8000000, 0x8000_0000, 0xFFFF_FFFE, 0x7FFF_FFFF]
    samples += [rng.randrange(1, 0xFFFF_FFFF) for _ in range(20000)]
    samples += [1 << k for k in range(32)] + [0xFFFF_FFFF ^ (1 << k) for k in range(32)]
    for value in samples:
        assert any(r.matches([value, 0, 0, 0, 0, 0]) for r in rows), hex(value)
    for value in (0, 0xFFFF_FFFF):
        assert not any(r.matches([value, 0, 0, 0, 0, 0]) for r in rows)
        assert x86(x86_bpf, 135, value) == RET_ALLOW
    for value in (0x0040000, 8, 0x0040000 | 1 << 32):  # high bits cannot hide the flag
        assert x86(x86_bpf, 135, value) == RET_ERRNO | errno.EPERM


def test_seccomp_is_refused_only_with_a_listener(x86_bpf: bytes) -> None:
    assert x86(x86_bpf, 317, 1, 8) == RET_ERRNO | errno.EPERM  # SECCOMP_FILTER_FLAG_NEW_LISTENER
    assert x86(x86_bpf, 317, 1, 8 | 1) == RET_ERRNO | errno.EPERM
    assert x86(x86_bpf, 317, 1, 0) == RET_ALLOW
    assert x86(x86_bpf, 317, 1, 1) == RET_ALLOW  # TSYNC alone


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["i386", "i686", "armv7l", "s390x", "riscv64"])
def test_unsupported_arch_raises_and_names_the_bypass(arch: str) -> None:
    with pytest.raises(UnsupportedHost) as info:
        compile_filter(arch=arch)
    assert arch in info.value.cause
    assert "x86_64" in info.value.fix
    if arch in ("i386", "i686"):
        assert "socketcall()" in info.value.cause


def test_missing_libseccomp_raises_with_the_debian_package(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedHost) as info:
        compile_filter(arch="x86_64", libseccomp_path=str(tmp_path / "libseccomp.so.2"))
    assert "libseccomp2" in info.value.fix
    assert "cannot load libseccomp" in info.value.cause


def test_a_syscall_unknown_to_libseccomp_is_an_error_not_a_silent_skip() -> None:
    rule = SyscallRule(syscall="no_such_syscall", action=Action.KILL_PROCESS, why="w", probe="SY-06")
    with pytest.raises(UnsupportedHost, match="no_such_syscall"):
        compile_filter([rule], arch="x86_64")


def test_conflicting_rows_are_refused_before_libseccomp_merges_them_silently() -> None:
    # libseccomp keeps the first of two such rows and drops the other without an error.
    kill = SyscallRule(syscall="bpf", action=Action.KILL_PROCESS, why="w", probe="SY-06")
    eperm = SyscallRule(syscall="bpf", action=Action.ERRNO, errno_value=1, why="w", probe="SY-06")
    masked = SyscallRule(
        syscall="bpf",
        action=Action.ERRNO,
        errno_value=2,
        why="w",
        probe="SY-06",
        when=(ArgCondition(index=0, op=ArgOp.EQ, value=5),),
    )
    for rows in ([kill, eperm], [eperm, kill], [masked, kill]):
        with pytest.raises(ValueError, match="conflict"):
            compile_filter(rows, arch="x86_64")
    compile_filter([eperm, eperm], arch="x86_64")  # same outcome: harmless


class _FailingLib:
    """The real libseccomp, except that one call returns -EINVAL."""

    def __init__(self, real: object, failing: str) -> None:
        self._real, self._failing = real, failing

    def __getattr__(self, name: str) -> object:
        if name == self._failing:
            return lambda *args: -errno.EINVAL
        return getattr(self._real, name)


@pytest.mark.parametrize("call", ["seccomp_attr_set", "seccomp_rule_add_exact_array", "seccomp_export_bpf"])
def test_a_failing_libseccomp_call_names_the_call_and_errno(call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = seccomp._libseccomp(None)
    monkeypatch.setattr(seccomp, "_libseccomp", lambda path: _FailingLib(real, call))
    with pytest.raises(UnsupportedHost) as info:
        compile_filter(SECCOMP_RULES[:3], arch="x86_64", libseccomp_path="fake")
    assert call in info.value.cause and "EINVAL" in info.value.cause
    assert "libseccomp2" in info.value.fix


def test_module_exports_what_it_says() -> None:
    for name in seccomp.__all__:
        assert hasattr(seccomp, name), name
