"""A hostile guest for the VM cases: root inside the microVM, the host's VMM unchanged.

A VM boundary must hold when the guest kernel is the attacker's (a workload that found a kernel
bug is root in the guest). The VM cases therefore attack twice: as the workload (uid 1000, through
contain's real backend) and as **guest root**. For guest root the probe does what such an attacker
could do: it chooses the guest's ``/init``. ``hostile_initramfs`` appends a second cpio archive to
the built initramfs (the kernel unpacks concatenated archives in order, later members replacing
earlier ones) holding a new ``/init`` and ``/probe-attack.sh``. The new ``/init`` is the real
one with a single line added after the guest is set up and before the agent starts: run the
attack script as root with the full devtmpfs ``/dev`` (every serial, console and virtio port,
every ``/dev/vd*``, ``/dev/mem``, ``/dev/port``) and ``/sys``, printing to the serial console.

Everything outside the guest is contain's own: ``hostile_sandbox`` is a ``Sandbox`` on a
``MicroVMBackend`` given that image, so QEMU's argv (``vmm_plan.plan_qemu_argv``), its network
namespace, its cgroup, the agent channel and the teardown are exactly what every microvm
sandbox gets. ``ControlVm`` is the positive control: the same planned argv with one weakness
added (a monitor wired to a guest port, a writable drive, a NIC without ``restrict``), run as a
plain bounded host process, so a case can show its judge sees the breach.

What this does not do: judge (the cases in cases_vm.py do), or model a guest that attacks the
VMM's device emulation with crafted descriptors (QEMU's own fuzzing covers that, not a battery).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from contain.runtime.microvm.accel import AccelChoice
from contain.runtime.microvm.cpio import CpioEntry, render_newc
from contain.runtime.microvm.guest_build import GuestImage, ensure_guest_image
from contain.runtime.microvm.initramfs import INIT_SCRIPT, READY_MARKER, Initramfs
from contain.runtime.microvm.vmm import SerialLog, detect_vmm_facts
from contain.runtime.microvm.vmm_plan import Accel, VmPlan, plan_qemu_argv

__all__ = [
    "ATTACK_DONE_MARKER",
    "ControlVm",
    "hostile_image",
    "hostile_init_script",
    "hostile_initramfs_members",
    "hostile_sandbox",
    "sha256_of",
]

ATTACK_DONE_MARKER = "contain-probe: attack done"
_ANCHOR = f'echo "{READY_MARKER}"\n'
# The one line the hostile /init adds: the attack runs as root, as pid 1's child, with the whole
# devtmpfs; its output goes to the serial console (the judge reads it there, as evidence only).
_ATTACK_LINE = (
    '$B sh /probe-attack.sh </dev/null >/dev/console 2>&1; echo "' + ATTACK_DONE_MARKER + ' rc=$?" >/dev/console\n'
)


def hostile_init_script(init: str = INIT_SCRIPT) -> str:
    """The real guest ``/init`` with the attack line after its ready marker.

    Raises:
        ValueError: the ready marker is not in ``init`` exactly once (the guest's /init changed;
            the probe must not silently boot an image without the attack).
    """
    if init.count(_ANCHOR) != 1:
        raise ValueError(f"the guest /init no longer has exactly one {_ANCHOR.strip()!r}; update hostile_guest.py")
    return init.replace(_ANCHOR, _ANCHOR + _ATTACK_LINE)


def hostile_initramfs_members(script: str) -> list[CpioEntry]:
    """The archive appended to the built initramfs: the hostile ``/init`` and the attack."""
    return [
        CpioEntry("init", stat.S_IFREG | 0o755, hostile_init_script().encode()),
        CpioEntry("probe-attack.sh", stat.S_IFREG | 0o755, script.encode()),
    ]


def hostile_image(script: str, *, into: Path, base: GuestImage | None = None) -> GuestImage:
    """The built guest image with its initramfs extended by ``hostile_initramfs_members``.

    Args:
        into: a private directory of the probe run; the new initramfs is written there.
    """
    base = base if base is not None else ensure_guest_image()
    data = base.initramfs.path.read_bytes() + render_newc(hostile_initramfs_members(script))
    digest = hashlib.sha256(data).hexdigest()[:24]
    path = into / f"hostile-initramfs-{digest}.cpio"
    path.write_bytes(data)
    return dataclasses.replace(base, initramfs=Initramfs(path=path, digest=digest, has_agent=True))


@contextlib.contextmanager
def hostile_sandbox(boundary: Mapping[str, Any], image: GuestImage) -> Iterator[tuple[Any, Any]]:
    """A ``Sandbox`` on contain's ``MicroVMBackend`` booting ``image``; yields (sandbox, backend).

    The sandbox is not started: the case calls ``start()`` and judges what it raises too.
    """
    from contain.boundary import Boundary
    from contain.runtime import Sandbox
    from contain.runtime.microvm.backend import MicroVMBackend

    backend = MicroVMBackend(guest_image=lambda: image)
    sandbox = Sandbox(Boundary.model_validate(dict(boundary)), backend=backend)
    try:
        yield sandbox, backend
    finally:
        sandbox.close()


def sha256_of(path: str | Path) -> str:
    """The file's SHA-256, read through a descriptor opened with O_NOFOLLOW."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _reap(pid: int, options: int) -> tuple[int, Any] | None:
    """(wait status, rusage) of child ``pid`` once it ended; None while it runs (``WNOHANG``)."""
    got, status, usage = os.wait4(pid, options)
    return (status, usage) if got == pid else None


class ControlVm:
    """A positive-control VM: a ``VmPlan``'s planned argv plus ``extra`` QEMU arguments.

    It runs as a bounded host process in its own session (killed when the context exits, or at
    ``timeout_s``), in the host's network namespace unless ``own_netns``; its agent port is one
    end of a socket pair nobody answers. It exists to show that a judge sees a breach when the
    weakness is there; it is never the target.
    """

    def __init__(
        self,
        image: GuestImage,
        *,
        extra: Sequence[str] = (),
        drop: Sequence[str] = (),
        cmdline_extra: Sequence[str] = (),
        memory_mib: int = 192,
        own_netns: bool = True,
        with_agent_port: bool = True,
    ) -> None:
        self.image = image
        self.extra = list(extra)
        self.drop = set(drop)
        self.cmdline_extra = tuple(cmdline_extra)
        self.memory_mib = memory_mib
        self.own_netns = own_netns
        self.with_agent_port = with_agent_port  # without it /init stops after the attack line
        self.serial = SerialLog()
        self.exit_code: int | None = None
        self.max_rss_kib = 0  # QEMU's peak resident memory once it was reaped

    def plan(self, agent_fd: int | None) -> VmPlan:
        """The VM as the backend would plan a scratch-only sandbox (TCG), with ``cmdline_extra``."""
        from contain.boundary import Boundary
        from contain.boundary.plain import plain_boundary
        from contain.runtime.microvm.backend import VMM_OVERHEAD_BYTES, plan_vm

        boundary = plain_boundary(
            Boundary.model_validate({"resources": {"memory_bytes": self.memory_mib * 1024**2 + VMM_OVERHEAD_BYTES}})
        )
        plan, _ = plan_vm(
            boundary,
            image=self.image,
            choice=AccelChoice(Accel.TCG, "tcg (positive control)"),
            facts=detect_vmm_facts(),
            read_binds=(),
            agent_fd=agent_fd,
        )
        return dataclasses.replace(plan, cmdline=plan.cmdline + self.cmdline_extra)

    def argv(self, agent_fd: int | None) -> list[str]:
        argv = [a for a in plan_qemu_argv(self.plan(agent_fd)) if a not in self.drop] + self.extra
        return (["/usr/bin/unshare", "--net", "--"] if self.own_netns else []) + argv

    def run(self, *, timeout_s: float) -> SerialLog:
        """Boot, wait for ``ATTACK_DONE_MARKER`` (or ``timeout_s``), then kill QEMU and reap it."""
        host_end, guest_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen(
                self.argv(guest_end.fileno() if self.with_agent_port else None),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(guest_end.fileno(),),
                start_new_session=True,
            )
        finally:
            guest_end.close()
        assert proc.stdout is not None
        stream = proc.stdout
        reader = threading.Thread(target=self._read, args=(stream.fileno(),), daemon=True)
        reader.start()
        # Reaped only here, with wait4 (never Popen.poll, which would reap a QEMU that quit by itself,
        # e.g. on a monitor's "quit", and lose its rusage): wait4 gives this child's own peak RSS
        # (unshare execs QEMU: one pid, one process).
        reaped: tuple[int, Any] | None = None
        try:
            deadline = time.monotonic() + timeout_s
            while reaped is None and time.monotonic() < deadline:
                if self.serial.wait_for(ATTACK_DONE_MARKER, timeout_s=0.5):
                    break
                reaped = _reap(proc.pid, os.WNOHANG)
            time.sleep(0.5)  # the host side of a breach (a command QEMU runs) completes after the guest's write
        finally:
            if reaped is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                reaped = _reap(proc.pid, 0)
            assert reaped is not None  # a blocking wait4 on our own child returns it
            status, usage = reaped
            proc.returncode = self.exit_code = os.waitstatus_to_exitcode(status)
            self.max_rss_kib = usage.ru_maxrss
            reader.join(timeout=5.0)
            stream.close()
            host_end.close()
        return self.serial

    def _read(self, fd: int) -> None:
        while chunk := os.read(fd, 65536):
            self.serial.feed(chunk)
        self.serial.close()
