"""render_oci_seccomp: the same rows as the BPF filter, in the OCI spec's words."""

from __future__ import annotations

import errno

import pytest

from contain.errors import UnsupportedHost
from contain.runtime.container.oci_seccomp import render_oci_seccomp
from contain.runtime.seccomp import plan_filter
from contain.runtime.seccomp_rules import SECCOMP_RULES, Action, ArgCondition, ArgOp, SyscallRule


def test_every_compiled_deny_row_is_one_entry_in_table_order():
    profile = render_oci_seccomp(arch="x86_64")
    plan = plan_filter(SECCOMP_RULES, arch="x86_64")
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    assert profile["architectures"] == ["SCMP_ARCH_X86_64"]
    assert [e["names"] for e in profile["syscalls"]] == [[rule.syscall] for rule, _nr in plan.denies]
    for entry, (rule, _nr) in zip(profile["syscalls"], plan.denies, strict=True):
        assert entry["action"] == {Action.ERRNO: "SCMP_ACT_ERRNO", Action.KILL_PROCESS: "SCMP_ACT_KILL_PROCESS"}[
            rule.action
        ]
        assert entry.get("errnoRet") == rule.errno_value
        assert len(entry.get("args", [])) == len(rule.when)


def test_allow_rows_are_the_default_and_not_listed():
    profile = render_oci_seccomp(arch="x86_64")
    listed = {(e["names"][0], str(e.get("args"))) for e in profile["syscalls"]}
    assert all(e["action"] != "SCMP_ACT_ALLOW" for e in profile["syscalls"])
    assert ("socketpair", "None") not in listed


def test_a_masked_test_carries_mask_then_value_as_runc_hands_them_to_libseccomp():
    row = SyscallRule(
        syscall="clone",
        action=Action.ERRNO,
        errno_value=errno.EPERM,
        when=(ArgCondition(index=0, op=ArgOp.MASKED_EQ, value=0x1000_0000, mask=0x1000_0000),),
        why="w",
        probe="SY-01",
    )
    eq_row = SyscallRule(
        syscall="socket",
        action=Action.ERRNO,
        errno_value=errno.EAFNOSUPPORT,
        when=(ArgCondition(index=0, op=ArgOp.EQ, value=40),),
        why="w",
        probe="SY-07",
    )
    profile = render_oci_seccomp([row, eq_row], arch="x86_64")
    assert profile["syscalls"] == [
        {
            "names": ["clone"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": errno.EPERM,
            "args": [{"index": 0, "value": 0x1000_0000, "valueTwo": 0x1000_0000, "op": "SCMP_CMP_MASKED_EQ"}],
        },
        {
            "names": ["socket"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": errno.EAFNOSUPPORT,
            "args": [{"index": 0, "value": 40, "valueTwo": 0, "op": "SCMP_CMP_EQ"}],
        },
    ]


def test_rows_for_syscalls_the_arch_lacks_are_left_out_as_in_the_bpf():
    names = {e["names"][0] for e in render_oci_seccomp(arch="aarch64")["syscalls"]}
    assert render_oci_seccomp(arch="aarch64")["architectures"] == ["SCMP_ARCH_AARCH64"]
    assert "iopl" not in names and "open" not in names
    assert "openat" in names


def test_an_unsupported_arch_is_refused_as_for_the_bpf():
    with pytest.raises(UnsupportedHost):
        render_oci_seccomp(arch="i686")
