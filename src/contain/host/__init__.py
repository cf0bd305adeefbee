"""What this host offers: ``detect_host`` (cheap, on every sandbox start) and ``contain doctor``
(slow, real tries in ``observe``: user namespaces, cgroup children, a KVM guest; judged in
``doctor``) with a fix for every gap.

Names are imported on first use so that the sandbox start-up path, which needs only
``contain.host.facts``, does not load the doctor and the KVM checker.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from contain.host.doctor import (
        Check,
        Report,
        Status,
        build_report,
        render_json,
        render_text,
    )
    from contain.host.facts import CgroupMount, HostFacts, detect_host
    from contain.host.kvm import KvmGuestResult, KvmStatus, check_kvm_guest
    from contain.host.observe import Observations, observe_host, observe_supervisor

_WHERE = {
    "Check": "contain.host.doctor",
    "Observations": "contain.host.observe",
    "Report": "contain.host.doctor",
    "Status": "contain.host.doctor",
    "build_report": "contain.host.doctor",
    "observe_supervisor": "contain.host.observe",
    "observe_host": "contain.host.observe",
    "render_json": "contain.host.doctor",
    "render_text": "contain.host.doctor",
    "CgroupMount": "contain.host.facts",
    "HostFacts": "contain.host.facts",
    "detect_host": "contain.host.facts",
    "KvmGuestResult": "contain.host.kvm",
    "KvmStatus": "contain.host.kvm",
    "check_kvm_guest": "contain.host.kvm",
}

__all__ = [
    "CgroupMount",
    "Check",
    "HostFacts",
    "KvmGuestResult",
    "KvmStatus",
    "Observations",
    "Report",
    "Status",
    "build_report",
    "check_kvm_guest",
    "detect_host",
    "observe_host",
    "observe_supervisor",
    "render_json",
    "render_text",
]


def __getattr__(name: str) -> typing.Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'contain.host' has no attribute {name!r}")
