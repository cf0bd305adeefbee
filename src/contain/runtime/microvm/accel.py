"""KVM or TCG: decided by booting the real guest kernel under KVM, with a watchdog.

A working ``/dev/kvm`` and a real-mode test guest that reaches HLT prove little (``host/kvm.py``):
on this project's CI host, QEMU aborts under ``-accel kvm -cpu host`` ("failed to set MSR
0x10a"), and with ``-arch-capabilities`` the guest hangs after "Probing EDD", while the tiny test
guest runs fine. So the only evidence we accept is the thing itself: ``check_kvm_boot`` boots the
guest's kernel and initramfs under ``-accel kvm`` in probe mode (``/init`` loads the modules,
prints ``PROBE_MARKER`` and powers off) and kills QEMU after ``KVM_BOOT_TIMEOUT_S``. KVM counts as
working only if the marker appeared and QEMU exited 0 within that time.

The verdict is cached in the microVM cache (``kvm-boot-<key>.json``), keyed by the kernel's and
initramfs's digests, QEMU's version line and the host kernel's release: a new kernel, a new
QEMU or a host reboot into another kernel asks again; nothing else does. ``contain doctor``'s
``kvm-guest`` check reads the same verdict (``host/observe.py``).

``decide_accelerator`` is the pure decision (a truth table over the manifest's
``runtime.microvm.accel`` and the verdict): ``auto`` takes KVM only where the boot succeeded, else
TCG, and says why; ``kvm`` fails closed (``UnsupportedHost``) unless the boot succeeded; ``tcg``
never touches /dev/kvm.

What this does not prove: that KVM stays healthy for a long run, or anything about performance.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from contain.errors import UnsupportedHost
from contain.runtime.microvm.artefacts import content_digest, ensure_artefact, guest_cache_dir
from contain.runtime.microvm.guest_build import GuestImage
from contain.runtime.microvm.initramfs import FAIL_MARKER, PROBE_MARKER
from contain.runtime.microvm.vmm import VmmFacts, VmProcess
from contain.runtime.microvm.vmm_plan import (
    Accel,
    GuestMode,
    VmPlan,
    plan_clock_words,
    plan_kernel_cmdline,
)

__all__ = [
    "KVM_BOOT_TIMEOUT_S",
    "AccelChoice",
    "AccelRequirement",
    "KvmBootVerdict",
    "check_kvm_boot",
    "decide_accelerator",
    "kvm_boot_key",
]

KVM_DEVICE = "/dev/kvm"
KVM_BOOT_TIMEOUT_S = 20.0  # a healthy KVM boot to the probe marker takes well under 2 s
PROBE_MEMORY_MIB = 128


class AccelRequirement(StrEnum):
    """The manifest's ``runtime.microvm.accel``."""

    AUTO = "auto"
    KVM = "kvm"
    TCG = "tcg"


@dataclass(frozen=True)
class KvmBootVerdict:
    """Whether the guest kernel booted under KVM, and what happened."""

    boots: bool
    detail: str  # what ended the boot: the marker, QEMU's exit and last console line, or the watchdog
    seconds: float


@dataclass(frozen=True)
class AccelChoice:
    """The accelerator a VM runs with and the one-line reason (reported in ``RunResult.layers``)."""

    accel: Accel
    reason: str


def decide_accelerator(
    requirement: AccelRequirement, *, kvm_present: bool, verdict: KvmBootVerdict | None
) -> AccelChoice:
    """Pick the accelerator (see the module docstring's truth table).

    Args:
        requirement: the manifest's choice.
        kvm_present: whether /dev/kvm exists.
        verdict: the boot check's verdict (None: not asked, because there is no /dev/kvm or the
            requirement is tcg).

    Raises:
        UnsupportedHost: ``kvm`` was required and the guest does not boot under KVM here.
    """
    if requirement is AccelRequirement.TCG:
        return AccelChoice(Accel.TCG, "tcg (runtime.microvm.accel: tcg)")
    if verdict is not None and verdict.boots:
        return AccelChoice(Accel.KVM, f"kvm (the guest kernel booted under KVM in {verdict.seconds:.1f} s)")
    why = f"{KVM_DEVICE} does not exist" if not kvm_present or verdict is None else verdict.detail
    if requirement is AccelRequirement.KVM:
        raise UnsupportedHost(
            f"runtime.microvm.accel is kvm, but the guest kernel does not boot under KVM here: {why}",
            "set runtime.microvm.accel: auto (or tcg) to use software emulation, or fix KVM on this host",
        )
    return AccelChoice(Accel.TCG, f"tcg (software emulation: KVM does not boot the guest here: {why})")


def kvm_boot_key(image: GuestImage, facts: VmmFacts, *, host_release: str) -> str:
    """The cache key of a verdict: what the answer depends on."""
    return content_digest(
        [
            b"kvm-boot-v1",
            image.kernel.digest.encode(),
            image.initramfs.digest.encode(),
            facts.qemu_version.encode(),
            host_release.encode(),
        ]
    )


def check_kvm_boot(image: GuestImage, facts: VmmFacts, *, timeout_s: float = KVM_BOOT_TIMEOUT_S) -> KvmBootVerdict:
    """The cached verdict, or a real boot under KVM to get it (see the module docstring).

    Raises:
        SandboxStartError: the cache fails its checks.
    """
    key = kvm_boot_key(image, facts, host_release=os.uname().release)

    def build(out: Path) -> None:
        out.write_text(json.dumps(asdict(_boot_under_kvm(image, facts, timeout_s=timeout_s))))

    path, _ = ensure_artefact(guest_cache_dir(), f"kvm-boot-{key}.json", build)
    data = json.loads(path.read_text())
    return KvmBootVerdict(boots=bool(data["boots"]), detail=str(data["detail"]), seconds=float(data["seconds"]))


def _boot_under_kvm(image: GuestImage, facts: VmmFacts, *, timeout_s: float) -> KvmBootVerdict:
    if not os.path.exists(KVM_DEVICE):
        return KvmBootVerdict(False, f"{KVM_DEVICE} does not exist", 0.0)
    if facts.qemu is None:
        return KvmBootVerdict(False, "qemu-system-x86_64 is not installed", 0.0)
    cmdline = plan_kernel_cmdline(
        clock=plan_clock_words(accel=Accel.KVM, tsc_khz=facts.tsc_khz),
        mode=GuestMode.PROBE,
        disk_bytes=1 << 20,
        inodes=64,
        scratch_paths=(),
        read_paths=(),
        network=False,
    )
    plan = VmPlan(
        accel=Accel.KVM,
        kernel=str(image.kernel.vmlinuz),
        initramfs=str(image.initramfs.path),
        memory_mib=PROBE_MEMORY_MIB,
        vcpus=1,
        cmdline=cmdline,
        userland_image=str(image.userland.path),
        read_images=(),
        agent_fd=None,
        qemu=facts.qemu,
    )
    vm = VmProcess(plan)
    began = time.monotonic()
    vm.start()
    try:
        code = vm.wait(timeout_s)
        seconds = time.monotonic() - began
    finally:
        vm.close()
    log = vm.serial.text()
    if code is None:
        last = (vm.serial.tail_lines(1) or "nothing").strip()[:200]
        detail = f"the guest did not finish booting within {timeout_s:g} s (last: {last!r})"
        return KvmBootVerdict(False, detail, seconds)
    if code == 0 and PROBE_MARKER in log:
        return KvmBootVerdict(True, f"booted to the probe marker in {seconds:.1f} s", seconds)
    failed = next((line for line in log.splitlines() if FAIL_MARKER in line), "")
    last = failed or (vm.serial.tail_lines(1) or "no output").strip()
    return KvmBootVerdict(False, f"QEMU exited with status {code}: {last[:200]!r}", seconds)
