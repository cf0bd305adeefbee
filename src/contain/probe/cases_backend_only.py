"""VM cases: attacks on a VMM, which only microVM backends have.

VM-01..06 attack what a VMM adds (monitor and serial devices, virtual block devices, the guest
control channel, the user-mode network). The process and container backends and the bare host
have none of these parts, so on them each case is NOT_APPLICABLE by construction, and the report
says why. (The OC cases, which attack what an OCI runtime adds, are in ``cases_oci.py``.)

On a backend that has the parts, a case here must run a real attack. Until the microVM backend
exists (and brings its probes with it), a target of another kind gets ERROR from these checks,
never a pass.
"""

from __future__ import annotations

from collections.abc import Callable

from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext

__all__ = ["CASES"]

_NO_VMM = (
    "not applicable by construction: the {kind} target runs no VMM and no guest kernel (no serial or monitor "
    "device, no virtual block device, no guest control channel, no user-mode network)"
)
# Kinds without a VMM; "container" covers every runtime (container:runc, container:runsc). gVisor's
# Sentry is a user-space kernel, not a VMM: it has no virtual devices, block devices or monitor.
_KINDS_WITHOUT_VMM = ("process", "container", "host", "wrap")


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
        not_applicable={kind: reason.format(kind=kind) for kind in _KINDS_WITHOUT_VMM},
    )


# (id, title, expected) per the catalogue's rows.
_VM_ROWS: tuple[tuple[str, str, str], ...] = (
    ("VM-01", "reach the VMM control plane from the guest", "no monitor command runs on the host"),
    ("VM-02", "write through every block device the guest sees", "refused or in a disposable overlay"),
    ("VM-03", "forge control-protocol replies", "the result reflects the real exit status"),
    ("VM-04", "network from the guest: NICs, user-mode gateway and DNS", "only the egress path answers"),
    ("VM-05", "exhaust the host through the VMM", "the VMM stays within its budget; logs capped"),
    ("VM-06", "a guest that stops answering", "ends at the deadline; nothing of the VMM left"),
)

CASES: tuple[ProbeCase, ...] = (*(_case(i, Category.VM, title, expected, _NO_VMM) for i, title, expected in _VM_ROWS),)
