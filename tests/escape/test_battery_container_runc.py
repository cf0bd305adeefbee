"""The whole escape-and-recovery battery against contain's container backend under runc (what CI runs).

Every catalogue and project case runs against a fresh `container:runc` sandbox per attack, judged
from outside. Asserted: every case ran; every case is CONTAINED or NOT_APPLICABLE except exactly the
``KNOWN_FINDINGS`` below (backend gaps this battery found, each with its verdict and cause);
NOT_APPLICABLE only where it is true by construction (the VM cases and XT-07), with the reason. Skipped only when runc
is absent or unusable on this host (the skip says which and why).
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from battery_kit import ContainerBattery

from contain.probe.case import Verdict

pytestmark = [pytest.mark.needs_root]


class TestBatteryUnderRunc(ContainerBattery):
    SPEC = "container:runc"
    # case id -> (the verdict it gets today, the backend gap this battery found). Asserted exactly:
    # a new failure fails the test, and so does a fixed finding until its row is removed. RE-09 and
    # RE-54 escaped in this battery's first runs (runc made the container's user namespace as host
    # root, so per-user counts were host root's) and were fixed in the backend (h/container 7c1a744).
    KNOWN_FINDINGS: ClassVar[dict[str, tuple[Verdict, str]]] = {}
