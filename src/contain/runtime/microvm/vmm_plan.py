"""The QEMU ``-M microvm`` command line as a pure plan: a ``VmPlan`` in, an argv out.

``plan_qemu_argv`` decides every device the VM has; nothing is added by default
(``-nodefaults``, ``-no-user-config``, no option ROMs, no display, no monitor, no NIC unless
``network`` is given). What the guest gets, one row of ``plan_qemu_argv`` each:

- the accelerator the host's boot check chose (``accel.decide_accelerator``): ``kvm`` with
  ``-cpu host``, or ``tcg`` (translation cache ``TCG_TB_MIB``) with ``-cpu max`` (RDRAND for the
  guest's RNG; the clock needs ``plan_clock_words`` as well);
- memory (MiB) from the boundary's memory budget and vCPUs from its CPU budget (``plan_vm_size``);
- the serial console on QEMU's stdout (the host reads it into a bounded ring: ``vmm.SerialLog``);
  QEMU's stdin is /dev/null, so nothing can be typed into the guest's console;
- one virtio-serial port named ``contain`` on a socket the host already holds (``fd=``: no path
  on the file system), the agent's control channel (docs/guest-agent-protocol.md);
- virtio-blk devices, every one ``readonly=on`` (QEMU opens the file O_RDONLY, so the guest
  cannot change a host image whatever it writes to /dev/vd*), each with a serial the guest's
  /init finds it by: ``contain-userland`` and ``contain-ro-N`` for the Nth read bind;
- virtio-rng fed from the host's /dev/urandom;
- ``-no-reboot``: a guest that reboots or panics ends the VM;
- ``-sandbox on``: QEMU's own seccomp filter (obsolete syscalls and resource control denied;
  fork/exec and privilege changes denied too unless the network needs its per-connection
  connector).

``plan_kernel_cmdline`` starts from ``KERNEL_WORDS`` (one row per word, with its reason), adds the
guest's settings (``contain.*=`` words /init reads) and refuses what the guest's shell could
misread: only absolute paths of ``[A-Za-z0-9._/+@-]`` and no ``:`` (the list separator), and at
most 2048 bytes in all (x86's COMMAND_LINE_SIZE). It also refuses any word of
``REFUSED_KERNEL_WORDS``: boot time is never bought by turning guest hardening off (KASLR,
speculation mitigations, SMAP/SMEP, page zeroing and the like stay as Debian's kernel sets them).

What the plan does not do: check that files exist (the apply step opens them), or decide the
accelerator (a fact it is given).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

from contain.errors import UnsupportedHost

__all__ = [
    "BASE_CMDLINE",
    "KERNEL_WORDS",
    "REFUSED_KERNEL_WORDS",
    "Accel",
    "GuestForward",
    "GuestMode",
    "KernelWord",
    "NetworkPlan",
    "VmPlan",
    "plan_clock_words",
    "plan_kernel_cmdline",
    "plan_qemu_argv",
    "plan_vm_size",
]

QEMU_BINARY = "qemu-system-x86_64"
COMMAND_LINE_MAX = 2048  # arch/x86/include/asm/setup.h COMMAND_LINE_SIZE
GUEST_KERNEL_OVERHEAD_MIB = 96  # the kernel, initramfs and page cache before the workload runs
MIN_GUEST_MIB = 128
MAX_VCPUS = 16
# TCG's translation cache, in MiB: QEMU 7.2 defaults to 1 GiB (allocated as it fills); 64 MiB
# keeps the VMM's own memory bounded, at the price of retranslating a little more.
TCG_TB_MIB = 64
_SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+@-]*")


@dataclass(frozen=True)
class KernelWord:
    """One word every guest kernel command line starts with, and why it is there."""

    word: str
    why: str


# The clock words come from plan_clock_words. Each boot-time word was measured (docs/microvm.md
# "Where a cold boot's time goes" lists the ones measured and left out as not worth it).
KERNEL_WORDS: tuple[KernelWord, ...] = (
    KernelWord("console=ttyS0", "the serial console is the host's only view of a failed boot"),
    KernelWord("quiet", "under TCG every console byte costs a trap; warnings and errors still reach the log"),
    KernelWord("panic=-1", "a guest that panics ends at once (with -no-reboot: the VM ends)"),
    KernelWord("reboot=t", "a guest reboot goes through the triple fault QEMU's -no-reboot turns into an exit"),
    KernelWord("random.trust_cpu=on", "seed the RNG from RDRAND (TCG's max CPU has it) besides virtio-rng"),
    KernelWord(
        "cryptomgr.notests",
        "skip the crypto self-tests (known-answer tests of each algorithm as it registers): ~0.3 s of "
        "emulated CPU under TCG, about a tenth of the boot. They catch a miscompiled implementation, not an "
        "attacker; the guest runs no FIPS mode that would require them, and every algorithm stays available",
    ),
)
BASE_CMDLINE = tuple(row.word for row in KERNEL_WORDS)
# Words that would make the boot faster and are never used, because they turn guest hardening off
# (the kernel word, what it would cost). tests/unit/runtime/microvm/test_vmm_plan.py checks that no
# planned command line carries one.
REFUSED_KERNEL_WORDS: tuple[KernelWord, ...] = (
    KernelWord("nokaslr", "the kernel text and memory regions at fixed, known addresses"),
    KernelWord("mitigations=off", "every CPU speculation mitigation"),
    KernelWord("pti=off", "kernel page-table isolation (Meltdown)"),
    KernelWord("spectre_v2=off", "indirect-branch speculation mitigations (retpolines stay, IBRS/STIBP go)"),
    KernelWord("nosmap", "the kernel reading user memory by accident stops faulting"),
    KernelWord("nosmep", "the kernel executing user memory stops faulting"),
    KernelWord("init_on_alloc=0", "zeroing of allocated pages (Debian's config turns it on)"),
    KernelWord("hardened_usercopy=off", "bounds checks on copies between kernel and user memory"),
    KernelWord("randomize_kstack_offset=off", "per-syscall kernel stack offset randomisation"),
    KernelWord("page_alloc.shuffle=0", "randomised free-page order"),
)


class Accel(StrEnum):
    KVM = "kvm"
    TCG = "tcg"


class GuestMode(StrEnum):
    """What the guest's /init does after the modules load (initramfs.py)."""

    AGENT = "agent"
    PROBE = "probe"
    SHELL = "shell"


@dataclass(frozen=True)
class GuestForward:
    """One TCP forward: a guest connection to ``guest_address:guest_port`` is carried, by a
    ``connector`` process QEMU starts per connection (``socat - TCP:host:port``), to
    ``host_address:host_port`` in QEMU's own network namespace (where contain's egress listens)."""

    guest_address: str
    guest_port: int
    host_address: str
    host_port: int


@dataclass(frozen=True)
class NetworkPlan:
    """QEMU user networking with ``restrict=on``: the guest reaches only these forwards.

    ``restrict=on`` (libslirp's restricted mode) drops every guest packet that is not to a
    ``guestfwd`` address or DHCP/TFTP on the virtual network: the gateway 10.0.2.2 (the host's
    loopback, seen from QEMU) and the built-in DNS forwarder 10.0.2.3 answer nothing.
    """

    forwards: tuple[GuestForward, ...]
    connector: str  # absolute path of socat


@dataclass(frozen=True)
class VmPlan:
    """Everything one VM is started from; built by the backend from the boundary and the facts."""

    accel: Accel
    kernel: str
    initramfs: str
    memory_mib: int
    vcpus: int
    cmdline: tuple[str, ...]
    userland_image: str
    read_images: tuple[str, ...]  # the Nth is mounted at the Nth path of contain.ro
    agent_fd: int | None  # a connected stream socket QEMU inherits; None in probe mode
    network: NetworkPlan | None = None
    qemu: str = QEMU_BINARY


def plan_vm_size(*, memory_bytes: int, cpu_cores: float) -> tuple[int, int]:
    """(guest MiB, vCPUs) for a boundary's budgets.

    Guest RAM is the memory budget (whole MiB, at least ``MIN_GUEST_MIB``): the guest's kernel
    takes its share from it, so a workload gets less than on the process backend, never more.
    vCPUs: the CPU budget rounded up (1.5 cores -> 2), at most ``MAX_VCPUS``.
    """
    mib = max(MIN_GUEST_MIB, memory_bytes // (1024 * 1024))
    return mib, max(1, min(MAX_VCPUS, math.ceil(cpu_cores)))


def plan_clock_words(*, accel: Accel, tsc_khz: int | None) -> tuple[str, ...]:
    """Kernel words that give the guest a working clock.

    Under TCG the microvm guest has no HPET, no ACPI PM timer and no kvmclock, and calibrating the
    TSC against the emulated PIT fails on a loaded host ("Unable to calibrate against PIT"); the
    kernel then falls back to jiffies and, measured here, hung in 3 of 4 boots with its clock
    stuck at 0.000000. TCG's TSC runs at the host's TSC rate, so telling the guest that rate
    (``tsc_early_khz``, from the host's /proc/cpuinfo) and trusting it (``tsc=reliable``: no
    watchdog against the missing references) booted 8 of 8. Under KVM the kernel reads the rate
    from kvmclock and nothing is added.

    Raises:
        UnsupportedHost: TCG without a known host TSC rate.
    """
    if accel is Accel.KVM:
        return ()
    if not tsc_khz:
        raise UnsupportedHost(
            "the host's TSC frequency is unknown, and a TCG guest cannot calibrate its clock without it",
            "run on an x86_64 host whose /proc/cpuinfo reports constant_tsc and cpu MHz",
        )
    return (f"tsc_early_khz={tsc_khz}", "tsc=reliable", "clocksource=tsc", "lpj=4000000")


def plan_kernel_cmdline(
    *,
    clock: tuple[str, ...],
    mode: GuestMode,
    disk_bytes: int,
    inodes: int,
    scratch_paths: tuple[str, ...],
    read_paths: tuple[str, ...],
    network: bool,
) -> tuple[str, ...]:
    """The guest kernel's command line: ``BASE_CMDLINE`` and the ``contain.*`` words /init reads.

    Raises:
        UnsupportedHost: a path the guest shell could misread, a word of ``REFUSED_KERNEL_WORDS``,
            or a line past 2048 bytes.
    """
    for path in (*scratch_paths, *read_paths):
        if not _SAFE_PATH.fullmatch(path) or "/../" in f"{path}/" or "//" in path:
            raise UnsupportedHost(
                f"the microvm backend cannot mount {path!r} in the guest",
                "use absolute paths of letters, digits and . _ / + @ - for microvm scratch and read binds",
            )
    words = [
        *BASE_CMDLINE,
        *clock,
        f"contain.mode={mode.value}",
        f"contain.disk={disk_bytes}",
        f"contain.inodes={inodes}",
        f"contain.scratch={':'.join(scratch_paths)}",
        f"contain.net={1 if network else 0}",
    ]
    if read_paths:
        words.append(f"contain.ro={':'.join(read_paths)}")
    refused = {row.word: row for row in REFUSED_KERNEL_WORDS}
    for word in words:
        row = refused.get(word)
        if row is not None:
            raise UnsupportedHost(
                f"the guest command line would carry {word!r}, which turns off {row.why}",
                "do not add kernel words that weaken the guest; see vmm_plan.REFUSED_KERNEL_WORDS",
            )
    if len(" ".join(words)) >= COMMAND_LINE_MAX:
        raise UnsupportedHost(
            f"the guest command line would be {len(' '.join(words))} bytes (the kernel keeps {COMMAND_LINE_MAX})",
            "bind fewer or shorter paths",
        )
    return tuple(words)


def plan_qemu_argv(plan: VmPlan) -> list[str]:
    """The whole QEMU argv for ``plan``; see the module docstring for each device and why."""
    # QEMU's own seccomp filter. Where the network's forwards start a connector per connection,
    # fork/exec and the session calls the spawner makes (QEMU files setsid under
    # "elevateprivileges") stay allowed: measured, with them denied every forwarded connection
    # closed at once. QEMU then still has no capabilities and no_new_privs (vmm.plan_vmm_launch),
    # so no privilege change can succeed.
    spawn = "allow" if plan.network is not None else "deny"
    argv = [
        plan.qemu,
        "-M", "microvm,x-option-roms=off,isa-serial=on",
        "-accel", "kvm" if plan.accel is Accel.KVM else f"tcg,tb-size={TCG_TB_MIB}",
        "-cpu", "host" if plan.accel is Accel.KVM else "max",
        "-m", str(plan.memory_mib),
        "-smp", str(plan.vcpus),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-sandbox", f"on,obsolete=deny,elevateprivileges={spawn},spawn={spawn},resourcecontrol=deny",
        "-kernel", plan.kernel,
        "-initrd", plan.initramfs,
        "-append", " ".join(plan.cmdline),
        "-chardev", "stdio,id=console,signal=off",
        "-serial", "chardev:console",
        "-object", "rng-random,id=rng0,filename=/dev/urandom",
        "-device", "virtio-rng-device,rng=rng0",
    ]  # fmt: skip
    if plan.agent_fd is not None:
        argv += [
            "-device", "virtio-serial-device,max_ports=2",
            "-chardev", f"socket,id=agent,fd={plan.agent_fd}",
            "-device", "virtserialport,chardev=agent,name=contain",
        ]  # fmt: skip
    disks = [("contain-userland", plan.userland_image)]
    disks += [(f"contain-ro-{i}", image) for i, image in enumerate(plan.read_images)]
    for i, (serial, image) in enumerate(disks):
        argv += [
            "-drive", f"file={_qemu_escape(image)},format=raw,if=none,id=disk{i},readonly=on",
            "-device", f"virtio-blk-device,drive=disk{i},serial={serial}",
        ]  # fmt: skip
    if plan.network is not None:
        connector = plan.network.connector
        forwards = "".join(
            f",guestfwd=tcp:{f.guest_address}:{f.guest_port}-cmd:{connector} - TCP:{f.host_address}:{f.host_port}"
            for f in plan.network.forwards
        )
        argv += [
            "-netdev", f"user,id=net0,restrict=on,ipv6=off{forwards}",
            "-device", "virtio-net-device,netdev=net0",
        ]  # fmt: skip
    return argv


def _qemu_escape(value: str) -> str:
    # QEMU option values split on ","; a literal comma is written twice.
    return value.replace(",", ",,")
