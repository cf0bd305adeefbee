"""What this host offers: ``probe_host`` (cheap, on every sandbox start) and ``contain doctor``
(slow, real tries: user namespaces, cgroup children, a KVM guest) with a fix for every gap.

Names are imported on first use so that the sandbox start-up path, which needs only
``contain.host.facts``, does not load the doctor and the KVM checker.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from contain.host.doctor import (
        Check,
        Observations,
        Report,
        Status,
        build_report,
        observe_agent,
        observe_host,
        render_json,
        render_text,
    )
    from contain.host.facts import CgroupMount, HostFacts, probe_host
    from contain.host.kvm import KvmGuestResult, KvmStatus, check_kvm_guest

_WHERE = {
    "Check": "contain.host.doctor",
    "Observations": "contain.host.doctor",
    "Report": "contain.host.doctor",
    "Status": "contain.host.doctor",
    "build_report": "contain.host.doctor",
    "observe_agent": "contain.host.doctor",
    "observe_host": "contain.host.doctor",
    "render_json": "contain.host.doctor",
    "render_text": "contain.host.doctor",
    "CgroupMount": "contain.host.facts",
    "HostFacts": "contain.host.facts",
    "probe_host": "contain.host.facts",
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
    "observe_agent",
    "observe_host",
    "probe_host",
    "render_json",
    "render_text",
]


def __getattr__(name: str) -> typing.Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'contain.host' has no attribute {name!r}")
