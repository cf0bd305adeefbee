"""Does KVM actually run a guest here? Asked by running two tiny guests in a killable child.

A present ``/dev/kvm`` that answers ``KVM_GET_API_VERSION`` proves little: on some hosts (nested
virtualisation, broken firmware settings, sandboxed kernels) ``KVM_RUN`` never comes back and a
VMM hangs at boot. So ``check_kvm_guest`` runs real guest code through the KVM ioctl API
(Documentation/virt/kvm/api.rst) in a child process (``python -m contain.host.kvm``) with a hard
timeout, SIGKILLing it on expiry:

1. **Halt guest.** One page of guest memory at guest-physical 0 holding real-mode code
   ``mov al, 0x42; out 0x10, al; hlt`` (``GUEST_CODE``); cs base 0 / selector 0, rip 0,
   rflags 2 (bit 1 is reserved and must be set). Expected: ``KVM_EXIT_IO`` (an OUT of one byte
   0x42 to port 0x10), then ``KVM_EXIT_HLT``. No in-kernel irqchip, so HLT exits to us.
2. **Timer guest.** A fresh VM with the in-kernel irqchip and PIT (what QEMU uses); the guest
   programs the 8259 PIC and the PIT, enables interrupts and halts. Expected: the timer IRQ0
   handler runs and OUTs 0x99 to port 0x10. A guest kernel that gets no timer interrupt hangs
   in "Calibrating delay loop", so this is the second thing a real boot needs.

The verdict is one of three (``KvmStatus``): it runs a guest; it hangs (timed out: use software
emulation, QEMU ``-accel tcg``); or it is unavailable (an errno, or the guest stopped in an
unexpected way).

What this does not prove: that long mode, paging, virtio or a full kernel boot work, nor
anything about performance. It never needs root beyond read-write access to ``/dev/kvm``.
Constants are x86_64 values from include/uapi/linux/kvm.h; on other architectures the check
reports "unavailable" without touching the device.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import mmap
import os
import platform
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "GUEST_BYTE",
    "GUEST_CODE",
    "GUEST_PORT",
    "KVM_API_VERSION",
    "KvmGuestResult",
    "KvmStatus",
    "check_kvm_guest",
    "kvm_api_version",
    "parse_child_report",
    "run_checker",
    "run_test_guests",
]

KVM_DEVICE = "/dev/kvm"
KVM_API_VERSION = 12  # the only stable API version since Linux 2.6.22 (api.rst, 4.1)
GUEST_TIMEOUT_S = 3.0

# include/uapi/asm-generic/ioctl.h: dir << 30 | size << 16 | type << 8 | nr; _IOW dir=1, _IOR 2.
_IOC_WRITE = 1
_IOC_READ = 2
KVMIO = 0xAE


def _io(nr: int) -> int:
    return (KVMIO << 8) | nr


def _iow(nr: int, size: int) -> int:
    return (_IOC_WRITE << 30) | (size << 16) | (KVMIO << 8) | nr


def _ior(nr: int, size: int) -> int:
    return (_IOC_READ << 30) | (size << 16) | (KVMIO << 8) | nr


# Struct sizes on x86_64: kvm_userspace_memory_region 4+4+8+8+8; kvm_regs 18 u64; kvm_sregs
# 8 kvm_segment (24) + 2 kvm_dtable (16) + 7 u64 + interrupt_bitmap[4] u64; kvm_pit_config 64.
MEMORY_REGION_SIZE = 32
REGS_SIZE = 144
SREGS_SIZE = 312
PIT_CONFIG_SIZE = 64

KVM_GET_API_VERSION = _io(0x00)
KVM_CREATE_VM = _io(0x01)
KVM_GET_VCPU_MMAP_SIZE = _io(0x04)
KVM_CREATE_VCPU = _io(0x41)
KVM_SET_USER_MEMORY_REGION = _iow(0x46, MEMORY_REGION_SIZE)
KVM_CREATE_IRQCHIP = _io(0x60)
KVM_CREATE_PIT2 = _iow(0x77, PIT_CONFIG_SIZE)
KVM_RUN = _io(0x80)
KVM_GET_REGS = _ior(0x81, REGS_SIZE)
KVM_SET_REGS = _iow(0x82, REGS_SIZE)
KVM_GET_SREGS = _ior(0x83, SREGS_SIZE)
KVM_SET_SREGS = _iow(0x84, SREGS_SIZE)

# kvm_run.exit_reason values.
KVM_EXIT_NAMES: dict[int, str] = {
    0: "KVM_EXIT_UNKNOWN",
    1: "KVM_EXIT_EXCEPTION",
    2: "KVM_EXIT_IO",
    5: "KVM_EXIT_HLT",
    6: "KVM_EXIT_MMIO",
    8: "KVM_EXIT_SHUTDOWN",
    9: "KVM_EXIT_FAIL_ENTRY",
    17: "KVM_EXIT_INTERNAL_ERROR",
}
KVM_EXIT_IO = 2
KVM_EXIT_HLT = 5
KVM_EXIT_IO_OUT = 1

# kvm_run layout: exit_reason u32 at 8; the exit union at 32; for io: direction u8, size u8,
# port u16, count u32, data_offset u64 (from the start of kvm_run).
_RUN_EXIT_REASON = 8
_RUN_IO = 32
# kvm_regs: rsp is the 7th u64, rip and rflags the 17th and 18th. kvm_sregs starts with cs:
# base u64 at 0, limit u32 at 8, selector u16 at 12.
_REGS_RSP = 6 * 8
_REGS_RIP = 16 * 8
_SREGS_CS_BASE = 0
_SREGS_CS_SELECTOR = 12
_RFLAGS_RESERVED = 0x2

PAGE_SIZE = 0x1000
GUEST_PORT = 0x10
GUEST_BYTE = 0x42
TIMER_BYTE = 0x99
# mov al, 0x42 ; out 0x10, al ; hlt
GUEST_CODE = bytes((0xB0, GUEST_BYTE, 0xE6, GUEST_PORT, 0xF4))

# Timer guest, loaded at TIMER_CODE_AT with the stack below TIMER_STACK_AT.
TIMER_CODE_AT = 0x500
TIMER_HANDLER_AT = 0x600
TIMER_STACK_AT = 0xF00
TIMER_VECTOR = 0x08  # IRQ0 after ICW2 = 0x08, the PC/AT real-mode layout
TIMER_CODE = bytes.fromhex(
    "b011e620"  # mov al, 0x11 ; out 0x20, al   PIC ICW1: edge, cascade, ICW4 follows
    "b008e621"  # mov al, 0x08 ; out 0x21, al   ICW2: IRQ0-7 -> vectors 8-15
    "b004e621"  # mov al, 0x04 ; out 0x21, al   ICW3: slave on IRQ2
    "b001e621"  # mov al, 0x01 ; out 0x21, al   ICW4: 8086 mode
    "b0fee621"  # mov al, 0xfe ; out 0x21, al   OCW1: mask all but IRQ0
    "b034e643"  # mov al, 0x34 ; out 0x43, al   PIT channel 0, lo/hi byte, mode 2
    "b000e640"  # mov al, 0x00 ; out 0x40, al   reload 0x1000 (about 3.4 ms)
    "b010e640"  # mov al, 0x10 ; out 0x40, al
    "fb"  # sti
    "f4"  # hlt (in-kernel irqchip: the vcpu sleeps in the kernel until an interrupt)
    "ebfd"  # jmp back to hlt
)
# mov al, 0x99 ; out 0x10, al ; iret
TIMER_HANDLER = bytes((0xB0, TIMER_BYTE, 0xE6, GUEST_PORT, 0xCF))

# The exits each guest must produce, in order: (exit reason, byte OUT to GUEST_PORT).
HALT_EXITS = ((KVM_EXIT_IO, GUEST_BYTE), (KVM_EXIT_HLT, 0))
TIMER_EXITS = ((KVM_EXIT_IO, TIMER_BYTE),)
_MAX_EXITS = 64  # PIT/PIC writes are handled in the kernel; a few spurious exits are tolerated


class KvmStatus(StrEnum):
    """The three answers to "does KVM run a guest here?"."""

    RUNS = "runs"
    HANGS = "hangs"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class KvmGuestResult:
    """What happened when we ran the test guests."""

    status: KvmStatus
    detail: str  # for UNAVAILABLE: the errno or the unexpected exit; otherwise what ran
    timeout_s: float = GUEST_TIMEOUT_S

    @property
    def verdict(self) -> str:
        """One line: "runs a guest", "hangs (...): use ...", or "unavailable: <why>"."""
        if self.status is KvmStatus.RUNS:
            return "runs a guest"
        if self.status is KvmStatus.HANGS:
            return f"hangs (timed out after {self.timeout_s:g} s): use software emulation (QEMU -accel tcg)"
        return f"unavailable: {self.detail}"


class GuestFailed(Exception):
    """The guest stopped in a way that is not the expected one (raised in the child only)."""


def kvm_api_version(device: str = KVM_DEVICE) -> int:
    """``KVM_GET_API_VERSION`` of ``device``.

    Raises:
        OSError: the device cannot be opened or does not answer the ioctl.
    """
    fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    try:
        return fcntl.ioctl(fd, KVM_GET_API_VERSION)
    finally:
        os.close(fd)


def pack_memory_region(*, slot: int, guest_phys_addr: int, size: int, userspace_addr: int) -> bytes:
    """struct kvm_userspace_memory_region (flags 0)."""
    return struct.pack("=IIQQQ", slot, 0, guest_phys_addr, size, userspace_addr)


def plan_guest_memory(*, with_timer: bool) -> bytes:
    """The one page of guest memory for the halt guest or the timer guest."""
    page = bytearray(PAGE_SIZE)
    if not with_timer:
        page[: len(GUEST_CODE)] = GUEST_CODE
        return bytes(page)
    # Real-mode interrupt vector table at 0: 4-byte offset:segment entries.
    struct.pack_into("=HH", page, TIMER_VECTOR * 4, TIMER_HANDLER_AT, 0)
    page[TIMER_CODE_AT : TIMER_CODE_AT + len(TIMER_CODE)] = TIMER_CODE
    page[TIMER_HANDLER_AT : TIMER_HANDLER_AT + len(TIMER_HANDLER)] = TIMER_HANDLER
    return bytes(page)


def describe_io_exit(run: bytes | mmap.mmap) -> tuple[int, int, int, int]:
    """(direction, size, port, first data byte) of a KVM_EXIT_IO in a kvm_run buffer."""
    direction, size, port, _count, offset = struct.unpack_from("=BBHIQ", run, _RUN_IO)
    return direction, size, port, run[offset]


def _run_one(kvm: int, *, with_timer: bool) -> None:
    """Create a VM, run one test guest to its expected end; raise GuestFailed otherwise."""
    vm = fcntl.ioctl(kvm, KVM_CREATE_VM, 0)
    if with_timer:
        fcntl.ioctl(vm, KVM_CREATE_IRQCHIP, 0)
        fcntl.ioctl(vm, KVM_CREATE_PIT2, bytes(PIT_CONFIG_SIZE))
    memory = mmap.mmap(-1, PAGE_SIZE)
    memory[:] = plan_guest_memory(with_timer=with_timer)
    address = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    region = pack_memory_region(slot=0, guest_phys_addr=0, size=PAGE_SIZE, userspace_addr=address)
    fcntl.ioctl(vm, KVM_SET_USER_MEMORY_REGION, region)
    vcpu = fcntl.ioctl(vm, KVM_CREATE_VCPU, 0)
    run = mmap.mmap(vcpu, fcntl.ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0), mmap.MAP_SHARED)
    sregs = bytearray(SREGS_SIZE)
    fcntl.ioctl(vcpu, KVM_GET_SREGS, sregs, True)
    struct.pack_into("=Q", sregs, _SREGS_CS_BASE, 0)
    struct.pack_into("=H", sregs, _SREGS_CS_SELECTOR, 0)
    fcntl.ioctl(vcpu, KVM_SET_SREGS, bytes(sregs))
    regs = bytearray(REGS_SIZE)
    struct.pack_into("=Q", regs, _REGS_RSP, TIMER_STACK_AT)
    struct.pack_into("=QQ", regs, _REGS_RIP, TIMER_CODE_AT if with_timer else 0, _RFLAGS_RESERVED)
    fcntl.ioctl(vcpu, KVM_SET_REGS, bytes(regs))
    expected = list(TIMER_EXITS if with_timer else HALT_EXITS)
    for _ in range(_MAX_EXITS):
        fcntl.ioctl(vcpu, KVM_RUN, 0)
        reason = struct.unpack_from("=I", run, _RUN_EXIT_REASON)[0]
        want_reason, want_byte = expected[0]
        if reason == KVM_EXIT_IO:
            direction, size, port, byte = describe_io_exit(run)
            if port != GUEST_PORT:
                continue  # a port the in-kernel devices did not claim; the guest goes on
            if (direction, size, byte) != (KVM_EXIT_IO_OUT, 1, want_byte) or want_reason != reason:
                raise GuestFailed(f"guest wrote {byte:#x} to port {port:#x}, expected {want_byte:#x}")
        elif reason != want_reason:
            name = KVM_EXIT_NAMES.get(reason, str(reason))
            raise GuestFailed(f"guest stopped with {name}, expected {KVM_EXIT_NAMES[want_reason]}")
        expected.pop(0)
        if not expected:
            return
    raise GuestFailed(f"guest did not finish within {_MAX_EXITS} exits")


def run_test_guests(device: str = KVM_DEVICE) -> str:
    """Run the halt guest and the timer guest in this process (no timeout: call it in a child).

    Returns:
        What ran, for the report.

    Raises:
        OSError: an ioctl or open failed (the errno says why).
        GuestFailed: a guest stopped in an unexpected way.
    """
    kvm = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    version = fcntl.ioctl(kvm, KVM_GET_API_VERSION)
    if version != KVM_API_VERSION:
        raise GuestFailed(f"KVM_GET_API_VERSION is {version}, expected {KVM_API_VERSION}")
    _run_one(kvm, with_timer=False)
    _run_one(kvm, with_timer=True)
    return "real-mode guest ran to HLT and took a PIT timer interrupt"


def check_kvm_guest(
    *, device: str = KVM_DEVICE, timeout_s: float = GUEST_TIMEOUT_S, arch: str | None = None
) -> KvmGuestResult:
    """Run ``run_test_guests`` in a child process, SIGKILLed after ``timeout_s``.

    Returns:
        RUNS, HANGS (the child did not finish in time) or UNAVAILABLE with the reason.
    """
    if (arch or platform.machine()) != "x86_64":
        return KvmGuestResult(KvmStatus.UNAVAILABLE, "the guest check supports x86_64 only")
    if not os.path.exists(device):
        return KvmGuestResult(KvmStatus.UNAVAILABLE, f"ENOENT ({device} does not exist)")
    return run_checker([sys.executable, "-m", "contain.host.kvm", device], timeout_s=timeout_s)


def run_checker(argv: Sequence[str], *, timeout_s: float) -> KvmGuestResult:
    """Run a checker child that prints one JSON report line; SIGKILL it after ``timeout_s``.

    Returns:
        The child's report; HANGS when it did not finish in time; UNAVAILABLE when it crashed.
    """
    try:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as exc:
        return KvmGuestResult(KvmStatus.UNAVAILABLE, f"cannot start the checker: {exc}")
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        # A child stuck in the kernel may outlive SIGKILL for a while; the verdict is the same.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.communicate(timeout=1.0)
        return KvmGuestResult(KvmStatus.HANGS, "KVM_RUN did not return", timeout_s)
    return parse_child_report(out, err, child.returncode, timeout_s=timeout_s)


def parse_child_report(out: str, err: str, returncode: int, *, timeout_s: float) -> KvmGuestResult:
    """Turn the child's one JSON line (or its crash) into a result."""
    try:
        report = json.loads(out.strip().splitlines()[-1])
        status = KvmStatus(report["status"])
        detail = str(report["detail"])
    except (IndexError, KeyError, ValueError, TypeError):
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return KvmGuestResult(KvmStatus.UNAVAILABLE, f"checker exited with status {returncode}: {tail}", timeout_s)
    return KvmGuestResult(status, detail, timeout_s)


def _child_main(argv: Sequence[str]) -> int:
    device = argv[0] if argv else KVM_DEVICE
    try:
        report = {"status": KvmStatus.RUNS.value, "detail": run_test_guests(device)}
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        report = {"status": KvmStatus.UNAVAILABLE.value, "detail": f"{code} ({exc.strerror})"}
    except GuestFailed as exc:
        report = {"status": KvmStatus.UNAVAILABLE.value, "detail": str(exc)}
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
