"""Unit tests for contain.runtime.seccomp_rules: the table and its rows, without libseccomp."""

from __future__ import annotations

import re

import pytest

from contain.errors import UnsupportedHost
from contain.runtime import seccomp_rules
from contain.runtime.seccomp_rules import (
    SECCOMP_RULES,
    SUPPORTED_ARCHES,
    Action,
    ArgCondition,
    ArgOp,
    SyscallRule,
    seccomp_arch,
)


def test_every_row_has_a_one_line_why_and_names_a_catalogue_probe() -> None:
    for rule in SECCOMP_RULES:
        assert rule.why.strip() and "\n" not in rule.why, rule
        assert re.fullmatch(r"(FS|PR|FD|SY|IP|NE|PX|RE)-\d\d", rule.probe), rule


def test_no_two_rows_share_a_syscall_and_the_same_conditions() -> None:
    seen: dict[tuple[str, tuple[ArgCondition, ...]], SyscallRule] = {}
    for rule in SECCOMP_RULES:
        key = (rule.syscall, rule.when)
        assert key not in seen, f"{rule} repeats {seen[key]}"
        seen[key] = rule


def test_the_briefed_minimum_is_denied() -> None:
    required = {
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        "unshare",
        "setns",
        "clone",
        "clone3",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "keyctl",
        "add_key",
        "request_key",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "open_by_handle_at",
        "name_to_handle_at",
        "ioctl",
        "socket",
        "socketpair",
        "personality",
        "acct",
        "swapon",
        "swapoff",
        "reboot",
        "settimeofday",
        "clock_settime",
        "adjtimex",
        "clock_adjtime",
        "syslog",
        "quotactl",
        "lookup_dcookie",
        "vhangup",
        "uselib",
        "nfsservctl",
        "iopl",
        "ioperm",
        "fanotify_init",
        "seccomp",
    }
    denied = {r.syscall for r in SECCOMP_RULES if r.is_deny}
    assert required - denied == set()


def test_landlock_is_never_denied() -> None:
    for rule in SECCOMP_RULES:
        if rule.syscall.startswith("landlock_"):
            assert rule.action is Action.ALLOW and rule.when == ()


def test_rule_validation_refuses_malformed_rows() -> None:
    with pytest.raises(ValueError, match="errno"):
        SyscallRule(syscall="bpf", action=Action.ERRNO, why="w", probe="SY-06")
    with pytest.raises(ValueError, match="errno"):
        SyscallRule(syscall="bpf", action=Action.ALLOW, errno_value=1, why="w", probe="SY-06")
    with pytest.raises(ValueError, match="one non-empty line"):
        SyscallRule(syscall="bpf", action=Action.KILL_PROCESS, why="a\nb", probe="SY-06")
    with pytest.raises(ValueError, match="one test per argument"):
        SyscallRule(
            syscall="socket",
            action=Action.KILL_PROCESS,
            why="w",
            probe="SY-07",
            when=(ArgCondition(index=0, op=ArgOp.NE, value=1), ArgCondition(index=0, op=ArgOp.NE, value=2)),
        )
    with pytest.raises(ValueError, match="outside mask"):
        ArgCondition(index=1, op=ArgOp.MASKED_EQ, value=0x100, mask=0xFF)
    with pytest.raises(ValueError, match="only meaningful"):
        ArgCondition(index=1, op=ArgOp.EQ, value=1, mask=0xFF)


def test_every_supported_arch_is_found_and_any_other_names_its_bypass() -> None:
    assert [seccomp_arch(a.name) for a in SUPPORTED_ARCHES] == list(SUPPORTED_ARCHES)
    with pytest.raises(UnsupportedHost, match="socketcall"):
        seccomp_arch("i386")


def test_module_exports_what_it_says() -> None:
    for name in seccomp_rules.__all__:
        assert hasattr(seccomp_rules, name), name
