"""The seccomp table rendered as an OCI runtime spec's ``linux.seccomp`` section.

One table, two renderings: ``runtime.seccomp_rules.SECCOMP_RULES`` becomes BPF for the process backend
(``compile_filter``) and, here, the JSON an OCI runtime (runc, runsc) compiles itself. Both go
through ``plan_filter`` first, so a row is resolved, checked for conflicts and found absent on an
arch in exactly one place.

What carries over exactly: the default action (allow), each deny row with its action, errno and
argument tests (libseccomp's comparison codes and operands, which is what runc hands to
libseccomp), and the architecture list. A syscall from any other ABI (i386 ``int 0x80`` on
x86_64, AArch32 on aarch64) meets the runtime's bad-arch action; runc kills it, as our filter
does (checked by the probe's SY cases on the container backend). ALLOW rows are the default and
need no entry, as in ``compile_filter``.

Not decided here: gVisor applies the profile in its own kernel (the sentry), to the syscalls the
workload makes to gVisor, not to the host kernel; what the sentry itself may call on the host is
gVisor's own filter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contain.runtime.seccomp import plan_filter
from contain.runtime.seccomp_rules import SECCOMP_RULES, Action, ArgOp, SyscallRule

__all__ = ["OCI_ARCHES", "render_oci_seccomp"]

# platform.machine() -> the OCI spec's SCMP_ARCH_* name
OCI_ARCHES = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}

_OCI_OPS = {
    ArgOp.NE: "SCMP_CMP_NE",
    ArgOp.LT: "SCMP_CMP_LT",
    ArgOp.LE: "SCMP_CMP_LE",
    ArgOp.EQ: "SCMP_CMP_EQ",
    ArgOp.GE: "SCMP_CMP_GE",
    ArgOp.GT: "SCMP_CMP_GT",
    ArgOp.MASKED_EQ: "SCMP_CMP_MASKED_EQ",
}
_OCI_ACTIONS = {Action.ERRNO: "SCMP_ACT_ERRNO", Action.KILL_PROCESS: "SCMP_ACT_KILL_PROCESS"}


def _entry(rule: SyscallRule) -> dict[str, Any]:
    entry: dict[str, Any] = {"names": [rule.syscall], "action": _OCI_ACTIONS[rule.action]}
    if rule.action is Action.ERRNO:
        entry["errnoRet"] = rule.errno_value
    if rule.when:
        entry["args"] = [
            {"index": c.index, "value": first, "valueTwo": second, "op": _OCI_OPS[c.op]}
            for c in rule.when
            for first, second in (c.datums(),)
        ]
    return entry


def render_oci_seccomp(
    rules: Sequence[SyscallRule] = SECCOMP_RULES, *, arch: str, libseccomp_path: str | None = None
) -> dict[str, Any]:
    """The ``linux.seccomp`` object for ``arch``, deny rows in table order.

    Raises:
        UnsupportedHost: the arch is not supported, or libseccomp cannot resolve a row
            (as ``plan_filter``).
        ValueError: two rows conflict (as ``plan_filter``).
    """
    plan = plan_filter(tuple(rules), arch=arch, libseccomp_path=libseccomp_path)
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": [OCI_ARCHES[plan.arch.name]],
        "syscalls": [_entry(rule) for rule, _number in plan.denies],
    }
