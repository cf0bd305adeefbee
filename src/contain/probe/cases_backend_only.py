"""OC and VM cases: attacks on a container runtime or a VMM, which only those backends have.

OC-01..06 attack what an OCI runtime adds (its binary re-exec'd into the container, its state
directory, image unpacking, the container's masked paths and capability sets); VM-01..06 attack
what a VMM adds (monitor and serial devices, virtual block devices, the guest control channel, the
user-mode network). The process backend and the bare host have none of these parts, so on them
each case is NOT_APPLICABLE by construction, and the report says why.

On a backend that has the parts, a case here must run a real attack. Until the container and
microVM backends exist (and bring their probes with them), a target of another kind gets ERROR
from these checks, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable

from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext

__all__ = ["CASES"]

_NO_RUNTIME = (
    "not applicable by construction: the {kind} target runs no OCI runtime (no runtime binary re-exec'd into "
    "the sandbox, no runtime state directory, no image unpacking)"
)
_NO_VMM = (
    "not applicable by construction: the {kind} target runs no VMM and no guest kernel (no serial or monitor "
    "device, no virtual block device, no guest control channel, no user-mode network)"
)
_KINDS_WITHOUT_RUNTIME = ("process", "host", "wrap")


def _unimplemented(case_id: str) -> Callable[[ProbeContext], CaseResult]:
    def check(ctx: ProbeContext) -> CaseResult:
        raise NotImplementedError(
            f"{case_id} has no probe for target {ctx.target.name!r} yet; the backend that applies brings it"
        )

    return check


def _case(case_id: str, category: Category, title: str, expected: str, reason: str) -> ProbeCase:
    return ProbeCase(
        case_id,
        category,
        title,
        expected,
        _unimplemented(case_id),
        not_applicable={kind: reason.format(kind=kind) for kind in _KINDS_WITHOUT_RUNTIME},
    )


# (id, title, expected) per the catalogue's rows.
_OC_ROWS: tuple[tuple[str, str, str], ...] = (
    ("OC-01", "overwrite the runtime binary via /proc/self/exe", "open for writing fails; runtime byte-identical"),
    ("OC-02", "leaked host directory descriptors or cwd", "no descriptor or cwd resolves outside the root"),
    ("OC-03", "write kernel knobs, read masked /proc and /sys paths", "writes refused; masked paths empty"),
    ("OC-04", "capabilities, setns, mount proc, unshare -U and mount", "no capability; every attempt refused"),
    ("OC-05", "crafted image or rootfs tarball", "refused or confined; no device, no set-id, size bounded"),
    ("OC-06", "find and write the runtime's state directory", "not visible or not writable from inside"),
)
_VM_ROWS: tuple[tuple[str, str, str], ...] = (
    ("VM-01", "reach the VMM control plane from the guest", "no monitor command runs on the host"),
    ("VM-02", "write through every block device the guest sees", "refused or in a disposable overlay"),
    ("VM-03", "forge control-protocol replies", "the result reflects the real exit status"),
    ("VM-04", "network from the guest: NICs, user-mode gateway and DNS", "only the egress path answers"),
    ("VM-05", "exhaust the host through the VMM", "the VMM stays within its budget; logs capped"),
    ("VM-06", "a guest that stops answering", "ends at the deadline; nothing of the VMM left"),
)

CASES: tuple[ProbeCase, ...] = (
    *(_case(i, Category.OC, title, expected, _NO_RUNTIME) for i, title, expected in _OC_ROWS),
    *(_case(i, Category.VM, title, expected, _NO_VMM) for i, title, expected in _VM_ROWS),
)
