"""``MicroVMBackend``: the ``microvm`` backend, one QEMU ``-M microvm`` guest per sandbox.

``start(plan)`` is the checklist (``Sandbox`` already decided the layers, created the host cgroup
with the boundary's limits, and checked scratch paths):

1. refuse what a VM cannot carry (``plan_microvm_refusals``, pure, one table row per refusal with
   its reason): a memory budget below one guest's RAM plus the VMM's own (QEMU would be
   OOM-killed in the cgroup before the guest prints a byte), write binds (there is no safe live
   sharing: no 9p or virtiofs here, and a copy back would need the whole write-bind audit on a
   second path; refused, never weakened) and attachments (a host socket cannot cross into a VM);
2. build or find the guest (``guest_build.ensure_guest_image``: kernel, initramfs with the agent,
   userland) and an image per read bind (``images.ensure_read_image``, cached by content);
3. decide the accelerator (``accel``: KVM only where the real guest kernel booted under it);
4. plan the VM (``plan_vm``, pure): guest RAM from the memory budget less ``VMM_OVERHEAD_BYTES``
   (the VMM's own memory is counted in the same host cgroup, whose limit is the budget; a budget
   too small for the smallest guest is refused, never exceeded), vCPUs
   from the CPU budget, the kernel command line (scratch, read binds, the disk budget); with
   ``network.allow``, one virtio NIC on QEMU's user network with ``restrict=on`` whose only
   reachable addresses are ``GUEST_FORWARDS`` (contain's proxy and DNS stub, which ``Sandbox``
   starts in QEMU's network namespace right after this returns); no NIC otherwise;
5. start QEMU in the sandbox's cgroup and an empty network namespace, as the sandbox's leased
   host uid without capabilities, under QEMU's own seccomp filter (``vmm.VmProcess``), with the
   agent's port on one end of a socket pair;
6. connect ``GuestSandbox`` (the agent's handle, guest_handle.py) over the other end and wait for
   READY within ``BOOT_TIMEOUT_S``; on failure the VMM is killed and the error quotes the end of
   the serial console (``SandboxStartError``);
7. compile contain's seccomp filter for the guest (``guest_seccomp_filter``: the process
   backend's own ``filter_for``, x86_64) into the limits; the agent installs it in every SPAWN
   right before exec and refuses a SPAWN without one;
8. give the guest fresh entropy from the host (RESEED) and a fresh identity (IDENTITY), so no two
   VMs share an RNG state or machine id.

Where a guest stops answering later, ``GuestSandbox`` marks the sandbox lost and ``Sandbox`` ends
the run at its deadline (124) or with ``SandboxLost``; ``close`` powers the guest off, kills QEMU
after a second's grace and reaps it. Nothing is left on the host: the channel is a socket pair,
the console a pipe, images are cached read-only artefacts.

A pool's sandboxes start through ``open_warm_start()`` instead: one template VM booted and saved
once, each sandbox a QEMU restored from that file, then RESEED and IDENTITY as in 8
(warm_start.py, snapshot.py; docs/microvm.md "Snapshots and the warm pool", "What a snapshot shares").

What this backend does not do: write binds (see 1), Firecracker, or carry a direct connection to
a DNS placeholder address (only proxy-aware clients reach allowed hosts from the guest; a direct
connection is dropped by QEMU's restricted network).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from contain.boundary.kinds import FileAccess
from contain.boundary.plain import PlainBoundary
from contain.errors import BackendRefusal, ContainError, SandboxStartError, UnsupportedHost
from contain.host.facts import HostFacts
from contain.runtime.backend import BackendPlan, RunningSandbox, WarmStart
from contain.runtime.disk_budget import default_scratch_paths, inode_budget
from contain.runtime.filter_cache import filter_for
from contain.runtime.microvm.accel import (
    KVM_DEVICE,
    AccelChoice,
    AccelRequirement,
    check_kvm_boot,
    decide_accelerator,
)
from contain.runtime.microvm.guest_build import GuestImage, ensure_guest_image
from contain.runtime.microvm.guest_channel import GuestChannel
from contain.runtime.microvm.guest_handle import GuestLimits, GuestSandbox
from contain.runtime.microvm.handle import MicroVMHandle
from contain.runtime.microvm.images import ensure_read_image
from contain.runtime.microvm.vmm import SerialLog, VmmFacts, VmProcess, detect_vmm_facts
from contain.runtime.microvm.vmm_plan import (
    MIN_GUEST_MIB,
    GuestForward,
    GuestMode,
    NetworkPlan,
    VmPlan,
    plan_clock_words,
    plan_kernel_cmdline,
    plan_vm_size,
)
from contain.runtime.supervisor_build import supervisor_cache_dir
from contain.visible_text import for_terminal

__all__ = [
    "BOOT_TIMEOUT_S",
    "VMM_OVERHEAD_BYTES",
    "MicroVMBackend",
    "PreparedGuest",
    "Refusal",
    "plan_microvm_refusals",
    "plan_vm",
]

BOOT_TIMEOUT_S = 60.0  # TCG on a loaded 2-core host: measured boots take 3-8 s
# QEMU's own memory beside guest RAM, charged to the same host cgroup. Measured under TCG
# (tb-size 64 MiB): a 416 MiB guest whose workload touched 200 MiB peaked at 415 MiB in the
# cgroup, and with 330 MiB touched the host cgroup OOM-killed QEMU; so 192 MiB is kept back.
VMM_OVERHEAD_BYTES = 192 * 1024**2
GUEST_KERNEL_RESERVE_BYTES = 48 * 1024**2  # guest kernel, agent and page cache outside the workload's cgroup
SERIAL_TAIL_LINES = 15
GUEST_EGRESS_ADDRESS = "10.0.2.100"  # inside QEMU's user network, outside its DHCP range (10.0.2.15+)
# The only destinations the guest's NIC reaches: contain's proxy and DNS stub in QEMU's netns
# (egress.session.PROXY_ADDRESS and DNS_ADDRESS).
GUEST_FORWARDS = (
    GuestForward(GUEST_EGRESS_ADDRESS, 3128, "127.0.0.1", 3128),
    GuestForward(GUEST_EGRESS_ADDRESS, 53, "127.0.0.1", 53),
)


@dataclass(frozen=True)
class PreparedGuest:
    """What ``MicroVMBackend.prepare`` found and built for one plan (steps 1-3 of ``start``)."""

    image: GuestImage
    facts: VmmFacts
    choice: AccelChoice
    read_binds: tuple[tuple[str, str], ...]  # (guest path, image path) per read bind, in order


@dataclass(frozen=True)
class Refusal:
    """Something in a boundary the microvm backend refuses, and why (``feature``: the row's name,
    carried by ``BackendRefusal``)."""

    what: str
    why: str
    fix: str
    feature: str


def plan_microvm_refusals(boundary: PlainBoundary, *, attachments: int) -> tuple[Refusal, ...]:
    """Every part of ``boundary`` (and the attachments) this backend cannot enforce; empty: none."""
    refusals: list[Refusal] = []
    smallest = MIN_GUEST_MIB * 1024**2 + VMM_OVERHEAD_BYTES
    if boundary.resources.memory_bytes < smallest:
        # Without this row QEMU is OOM-killed in its cgroup before the guest prints a byte, and the
        # start fails as "the guest did not come up" with an empty console (found by VM probes).
        refusals.append(
            Refusal(
                f"a memory budget of {boundary.resources.memory_bytes} bytes",
                f"a microVM needs at least {smallest} bytes: {MIN_GUEST_MIB} MiB of guest RAM and "
                f"{VMM_OVERHEAD_BYTES // 1024**2} MiB for the VMM, both counted in the sandbox's cgroup",
                f"set resources.memory_bytes to at least {smallest // 1024**2}MiB, or use --backend process",
                "memory_budget",
            )
        )
    writes = [r.path for r in boundary.files if r.access is FileAccess.WRITE]
    if writes:
        refusals.append(
            Refusal(
                f"write binds ({', '.join(writes)})",
                "a microVM shares no live directory with the host (no 9p or virtiofs), and copying back "
                "would bypass the write-bind audit",
                "use a scratch path with export: (copied out at close through the export rules), "
                "or use --backend process",
                "write_binds",
            )
        )
    if attachments:
        refusals.append(
            Refusal(
                f"{attachments} attachment(s) under /.contain",
                "a host socket or file handed in by a service cannot cross into the guest",
                "use --backend process for tasks that talk to the broker",
                "attachments",
            )
        )
    return tuple(refusals)


def plan_vm(
    boundary: PlainBoundary,
    *,
    image: GuestImage,
    choice: AccelChoice,
    facts: VmmFacts,
    read_binds: tuple[tuple[str, str], ...],
    agent_fd: int | None,
    connector: str | None = None,
) -> tuple[VmPlan, GuestLimits]:
    """The VM for ``boundary`` and the limits the agent applies inside it (pure).

    Args:
        read_binds: (guest path, image path) per read bind, in order.
        connector: socat's path, needed when the boundary allows network destinations.

    Raises:
        UnsupportedHost: the boundary allows network destinations and there is no connector.
    """
    network = None
    if boundary.allows_network:
        if connector is None:
            raise UnsupportedHost(
                "the microvm backend forwards the guest's egress with socat, which is not installed",
                "apt-get install socat",
            )
        network = NetworkPlan(forwards=GUEST_FORWARDS, connector=connector)
    resources = boundary.resources
    guest_bytes = resources.memory_bytes - VMM_OVERHEAD_BYTES
    if guest_bytes < MIN_GUEST_MIB * 1024**2:
        need = (MIN_GUEST_MIB * 1024**2 + VMM_OVERHEAD_BYTES) // 1024**2
        raise UnsupportedHost(
            f"resources.memory_bytes is {resources.memory_bytes // 1024**2} MiB; a microVM needs at least {need} MiB "
            f"({MIN_GUEST_MIB} MiB of guest RAM and {VMM_OVERHEAD_BYTES // 1024**2} MiB for QEMU, in one host cgroup)",
            f"set resources.memory_bytes to {need}MiB or more, or use --backend process",
        )
    memory_mib, vcpus = plan_vm_size(memory_bytes=guest_bytes, cpu_cores=resources.cpu_cores)
    cmdline = plan_kernel_cmdline(
        clock=plan_clock_words(accel=choice.accel, tsc_khz=facts.tsc_khz),
        mode=GuestMode.AGENT,
        disk_bytes=resources.disk_bytes,
        inodes=inode_budget(resources.disk_bytes),
        scratch_paths=tuple(p for p in default_scratch_paths(boundary) if p != "/tmp"),
        read_paths=tuple(path for path, _ in read_binds),
        network=network is not None,
    )
    assert facts.qemu is not None
    plan = VmPlan(
        accel=choice.accel,
        kernel=str(image.kernel.vmlinuz),
        initramfs=str(image.initramfs.path),
        memory_mib=memory_mib,
        vcpus=vcpus,
        cmdline=cmdline,
        userland_image=str(image.userland.path),
        read_images=tuple(path for _, path in read_binds),
        agent_fd=agent_fd,
        network=network,
        qemu=facts.qemu,
    )
    workload_bytes = max(32 * 1024**2, memory_mib * 1024**2 - GUEST_KERNEL_RESERVE_BYTES)
    # The agent forwards at most output_max bytes and then ends the stream; one byte past the cap
    # lets the host's capped reader see the overflow, so RunResult marks the output truncated and
    # records the violation as on the other backends (with exactly the cap it saw a clean EOF).
    limits = GuestLimits(
        memory_max_bytes=workload_bytes, pids_max=resources.pids_max, output_max_bytes=resources.output_bytes + 1
    )
    return plan, limits


GUEST_ARCH = "x86_64"  # the guest kernel's (and the agent's) only architecture


def guest_seccomp_filter(facts: HostFacts) -> bytes:
    """Contain's seccomp program for the guest's workload: the one the process backend hands its
    supervisor (``filter_cache.filter_for``, the ``SECCOMP_RULES`` table), for x86_64, cached
    beside the agent and supervisor binaries.

    Raises:
        UnsupportedHost: libseccomp cannot compile it.
    """
    return filter_for(
        arch=GUEST_ARCH, libseccomp_path=facts.libseccomp_path, cache_dir=supervisor_cache_dir().absolute()
    )


class MicroVMBackend:
    """Starts one microVM per sandbox; see the module docstring. ``layer_report`` holds the lines
    only known once started (the accelerator), which ``Sandbox`` adds to ``RunResult.layers``."""

    name = "microvm"

    def __init__(self, *, accel: str = "auto", guest_image: Callable[[], GuestImage] = ensure_guest_image) -> None:
        """Args:
        accel: ``auto``, ``kvm`` or ``tcg`` (``runtime.microvm.accel``).
        guest_image: what the guest boots from (default: the built and cached image). The escape
            battery passes an image whose initramfs it rewrote, to act as a hostile guest kernel.
        """
        self._requirement = AccelRequirement(accel)
        self._guest_image = guest_image
        self.layer_report: dict[str, str] = {}
        self.serial_tail = ""  # the console's last lines once a VM ended badly (raw guest text)
        self.serial: SerialLog | None = None  # the last started VM's console (bounded), for outside judges

    def cgroup_joined_at_exec(self, facts: HostFacts) -> bool:
        return False

    def prepare(self, plan: BackendPlan, *, reuse: PreparedGuest | None = None) -> PreparedGuest:
        """Steps 1-3 of ``start`` and the read-bind images: everything before a VM is planned
        (shared with the warm start, warm_start.py, so both refuse and build alike). ``reuse``:
        an earlier result whose guest image, QEMU facts and accelerator are taken as they are
        (refusals and read-bind images are always decided anew).

        Raises:
            UnsupportedHost, SandboxStartError: as ``start``.
        """
        refusals = plan_microvm_refusals(plan.boundary, attachments=len(plan.attachments))
        if refusals:
            first = refusals[0]
            raise BackendRefusal(
                f"the microvm backend cannot carry {first.what}: {first.why}", first.fix, feature=first.feature
            )
        if reuse is not None:
            image, facts, choice = reuse.image, reuse.facts, reuse.choice
        else:
            facts = detect_vmm_facts()
            if facts.qemu is None:
                raise UnsupportedHost("qemu-system-x86_64 is not installed", "apt-get install qemu-system-x86")
            image = self._guest_image()
            if not image.initramfs.has_agent:
                raise SandboxStartError("the guest initramfs has no guest agent", "run `contain doctor --build-guest`")
            choice = self._choose_accel(image, facts)
        read_binds = tuple(
            (bind.rule.path, str(ensure_read_image(bind.host_realpath)))
            for bind in plan.paths.binds
            if bind.rule.access is FileAccess.READ and bind.is_dir
        )
        unsupported = [b.rule.path for b in plan.paths.binds if b.rule.access is FileAccess.READ and not b.is_dir]
        if unsupported:
            raise UnsupportedHost(
                f"the microvm backend binds directories only; {', '.join(unsupported)} is a file",
                "bind the directory that holds it",
            )
        return PreparedGuest(image=image, facts=facts, choice=choice, read_binds=read_binds)

    def open_warm_start(self) -> WarmStart:
        """Boot once, snapshot, restore per sandbox (warm_start.py; ``backend.WarmStartCapable``)."""
        from contain.runtime.microvm.warm_start import MicroVMWarmStart  # only pools pay for it

        return MicroVMWarmStart(self)

    def start(self, plan: BackendPlan) -> RunningSandbox:
        """Start the VM and return the agent's handle once READY (see the module docstring).

        Raises:
            UnsupportedHost: the boundary asks for what a VM cannot carry, KVM was required and
                does not boot the guest, or QEMU, the kernel package or a build tool is missing.
            SandboxStartError: the build failed, or the guest did not come up.
        """
        prepared = self.prepare(plan)
        image, facts, choice, read_binds = prepared.image, prepared.facts, prepared.choice, prepared.read_binds
        host_end, guest_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        guest_fd = guest_end.detach()  # QEMU inherits it under this number (pass_fds keeps numbers)
        try:
            vm_plan, limits = plan_vm(
                plan.boundary,
                image=image,
                choice=choice,
                facts=facts,
                read_binds=read_binds,
                agent_fd=guest_fd,
                connector=shutil.which("socat"),
            )
            limits = limits._replace(seccomp_bpf=guest_seccomp_filter(plan.facts))
        except BaseException:
            os.close(guest_fd)
            host_end.close()
            raise
        vm = VmProcess(vm_plan, cgroup=plan.cgroup, guest_fd=guest_fd, run_as=plan.host_ids)
        self.serial = vm.serial
        began = time.monotonic()
        try:
            vm.start()
            handle = GuestSandbox.connect(
                GuestChannel.from_socket(host_end), vm, limits=limits, timeout_s=BOOT_TIMEOUT_S
            )
        except ContainError as exc:
            host_end.close()
            vm.close(grace_s=0)
            self.serial_tail = vm.serial.tail_lines(SERIAL_TAIL_LINES)
            raise SandboxStartError(
                f"the microVM guest did not come up ({exc.cause}); its console ended with:\n"
                + for_terminal(self.serial_tail),
                "run `contain doctor`; after a kernel panic, rebuild with `contain doctor --build-guest`",
            ) from exc
        try:
            handle.reseed(secrets.token_bytes(64))
            handle.set_identity(hostname="contain", machine_id=secrets.token_hex(16), realtime_ns=time.time_ns())
        except BaseException:
            handle.destroy()
            handle.close()
            raise
        network = vm_plan.network is not None
        self.layer_report = {
            "accelerator": choice.reason,
            "guest": f"kernel {image.kernel.release}, {vm_plan.memory_mib} MiB, {vm_plan.vcpus} vCPU, "
            f"up in {time.monotonic() - began:.2f} s",
        }
        return MicroVMHandle(handle, serial_tail=vm.serial.tail_lines, network=network)

    def _choose_accel(self, image: GuestImage, facts: VmmFacts) -> AccelChoice:
        kvm_present = os.path.exists(KVM_DEVICE)
        verdict = None
        if self._requirement is not AccelRequirement.TCG and kvm_present:
            verdict = check_kvm_boot(image, facts)
        return decide_accelerator(self._requirement, kvm_present=kvm_present, verdict=verdict)
