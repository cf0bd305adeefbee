"""The accelerator decision, as a truth table."""

from __future__ import annotations

import pytest

from contain.errors import UnsupportedHost
from contain.runtime.microvm.accel import AccelRequirement, KvmBootVerdict, decide_accelerator
from contain.runtime.microvm.vmm_plan import Accel

BOOTS = KvmBootVerdict(True, "booted to the probe marker in 0.8 s", 0.8)
ABORTS = KvmBootVerdict(False, "QEMU exited with status -6: 'kvm_buf_set_msrs'", 0.3)
HANGS = KvmBootVerdict(False, "the guest did not finish booting within 20 s", 20.0)


@pytest.mark.parametrize(
    ("requirement", "kvm_present", "verdict", "accel"),
    [
        (AccelRequirement.AUTO, True, BOOTS, Accel.KVM),
        (AccelRequirement.AUTO, True, ABORTS, Accel.TCG),
        (AccelRequirement.AUTO, True, HANGS, Accel.TCG),
        (AccelRequirement.AUTO, False, None, Accel.TCG),
        (AccelRequirement.KVM, True, BOOTS, Accel.KVM),
        (AccelRequirement.TCG, True, BOOTS, Accel.TCG),
        (AccelRequirement.TCG, False, None, Accel.TCG),
    ],
)
def test_kvm_is_used_only_where_the_real_guest_booted(requirement, kvm_present, verdict, accel):
    assert decide_accelerator(requirement, kvm_present=kvm_present, verdict=verdict).accel is accel


def test_the_reason_names_why_kvm_was_not_used():
    choice = decide_accelerator(AccelRequirement.AUTO, kvm_present=True, verdict=ABORTS)
    assert choice.reason == (
        "tcg (software emulation: KVM does not boot the guest here: QEMU exited with status -6: 'kvm_buf_set_msrs')"
    )


@pytest.mark.parametrize(("kvm_present", "verdict"), [(True, ABORTS), (True, HANGS), (False, None)])
def test_a_required_kvm_fails_closed(kvm_present, verdict):
    with pytest.raises(UnsupportedHost, match=r"runtime\.microvm\.accel is kvm"):
        decide_accelerator(AccelRequirement.KVM, kvm_present=kvm_present, verdict=verdict)
