"""The microVM warm start: each pooled sandbox is a QEMU restored from one saved template VM.

``MicroVMWarmStart`` is what ``MicroVMBackend.open_warm_start()`` returns to a ``SandboxPool``
(``runtime/backend.py``: ``WarmStart``). ``start(plan)`` is the checklist, per sandbox:

1. ``MicroVMBackend.prepare(plan)``: the same refusals, guest build, accelerator choice and
   read-bind images as a cold start (a bound directory is imaged, by content, at every start);
2. plan the VM exactly as a cold start would (``backend.plan_vm``) and key it
   (``snapshot_plan.template_key``): a boundary, bound content, guest build or QEMU that differs
   gives another key, so a restore never resumes a guest set up for something else;
3. find the template for that key: already open in this warm start, else in the cache
   (``snapshot.open_cached_snapshot``), else build it now (``snapshot.build_template``: in this
   sandbox's cgroup; the first sandbox of a pool pays for it, about one cold boot);
4. start a new QEMU from the same plan with ``-incoming fd:N`` on a fresh read-only open of the
   snapshot, in this sandbox's own host cgroup and an empty network namespace (``vmm.VmProcess``,
   as cold), on a new agent socket pair; QEMU resumes the guest once the stream is loaded;
5. over the agent channel, before anything else: RESEED with 64 fresh host bytes (the agent adds
   them with RNDADDENTROPY and then forces a CRNG reseed with RNDRESEEDCRNG, so the restored
   kernel stops drawing from the template's RNG state), IDENTITY (hostname, and a fresh random
   machine id), then HELLO (version check; its READY reads ``boot_id`` for the first time in this
   guest's life, after the reseed, so every restored VM draws its own). Any failure kills the
   VM and fails the start with the console's tail (``SandboxStartError``); the pool retries.

Why a restored VM holds nothing of another task: the template never ran a command, never received
a file, an environment or an attachment (step 2 of ``snapshot.build_template``); each restore is
its own QEMU process whose guest RAM (scratch, /tmp, /dev/shm are tmpfs in it) is private to it;
its disks are the cached images opened ``readonly=on``. So no overlay or disk copy is needed, and
none is left behind.

What it does NOT make fresh (shared by every VM restored from one template, as after any VM
snapshot; documented in docs/runtime.md "microVM snapshots"): the guest kernel's own secrets drawn
at boot (KASLR offset, the stack canary and address layout of the agent, pid 1, kernel hash-table
keys); every workload process is a new exec drawing from the reseeded RNG. The guest's wall clock
resumes at the template's save time (the agent has no clock request yet): ``date`` in a restored
VM is behind by the snapshot's age. ``close()`` leaves the content-keyed snapshot in the cache
(like the kernel and images; ``contain microvm snapshot clear`` removes it) and nothing else.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time

from contain.errors import ContainError, SandboxStartError
from contain.runtime.backend import BackendPlan, RunningSandbox
from contain.runtime.microvm.backend import MicroVMBackend, plan_vm
from contain.runtime.microvm.guest_channel import GuestChannel
from contain.runtime.microvm.guest_handle import GuestSandbox
from contain.runtime.microvm.snapshot import build_template, open_cached_snapshot, open_snapshot_dir, qemu_identity
from contain.runtime.microvm.snapshot_plan import artefacts_fingerprint, plan_restore_words, template_key
from contain.runtime.microvm.vmm import VmProcess
from contain.runtime.microvm.vmm_plan import VmPlan
from contain.visible_text import for_terminal

__all__ = ["GUEST_HOSTNAME", "MicroVMWarmStart"]

GUEST_HOSTNAME = "contain"  # as a cold microVM's (backend.py); the machine id is what is per VM
RESEED_BYTES = 64  # 512 bits from the host's CSPRNG; the agent accepts 32..512 bytes


class MicroVMWarmStart:
    """Restores pooled microVMs from a template; see the module docstring.

    ``layer_report`` holds the lines of the last ``start`` (``Sandbox`` adds them to the
    sandbox's layers through ``pool.WarmBackend``). ``last_restore_s`` is QEMU start to the
    agent's READY for the last restore, for the bench.
    """

    def __init__(self, backend: MicroVMBackend) -> None:
        self._backend = backend
        self._lock = threading.Lock()
        self._templates: dict[str, int] = {}  # key -> read-only descriptor of its snapshot
        self._closed = False
        self.layer_report: dict[str, str] = {}
        self.last_restore_s = 0.0

    def start(self, plan: BackendPlan) -> RunningSandbox:
        """Restore one VM for ``plan`` (see the module docstring).

        Raises:
            UnsupportedHost: as ``MicroVMBackend.start``.
            SandboxStartError: the template could not be built, or the restored guest did not answer.
        """
        prepared = self._backend.prepare(plan)
        host_end, guest_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        guest_fd = guest_end.detach()
        try:
            vm_plan, limits = plan_vm(
                plan.boundary,
                image=prepared.image,
                choice=prepared.choice,
                facts=prepared.facts,
                read_binds=prepared.read_binds,
                agent_fd=guest_fd,
            )
            qemu = qemu_identity(prepared.facts)
            key = template_key(vm_plan, qemu)
            snapshot_fd, how = self._template(key, vm_plan, artefacts=artefacts_fingerprint(vm_plan, qemu), plan=plan)
            restore_fd = os.open(f"/proc/self/fd/{snapshot_fd}", os.O_RDONLY | os.O_CLOEXEC)  # own offset
        except BaseException:
            os.close(guest_fd)
            host_end.close()
            raise
        vm = VmProcess(
            vm_plan,
            cgroup=plan.cgroup,
            guest_fd=guest_fd,
            extra_argv=plan_restore_words(snapshot_fd=restore_fd),
            extra_fds=(restore_fd,),
        )
        began = time.monotonic()
        try:
            vm.start()
        except BaseException:
            host_end.close()
            raise
        finally:
            os.close(restore_fd)
        handle = GuestSandbox(GuestChannel.from_socket(host_end), vm, limits=limits)
        try:
            handle.reseed(secrets.token_bytes(RESEED_BYTES))
            handle.set_identity(hostname=GUEST_HOSTNAME, machine_id=secrets.token_hex(16))
            handle.hello()
        except ContainError as exc:
            handle.destroy()
            handle.close()
            raise SandboxStartError(
                f"the restored microVM did not answer ({exc.cause}); its console ended with:\n"
                + for_terminal(vm.serial.tail_lines(15)),
                "run `contain microvm snapshot clear` (the template is rebuilt), or use a cold start",
            ) from exc
        except BaseException:
            handle.destroy()
            handle.close()
            raise
        self.last_restore_s = time.monotonic() - began
        self.layer_report = {
            "accelerator": prepared.choice.reason,
            "guest": f"kernel {prepared.image.kernel.release}, {vm_plan.memory_mib} MiB, {vm_plan.vcpus} vCPU, "
            f"restored in {self.last_restore_s:.2f} s",
            "warm start": f"restored from template {key} ({how}); RNG reseeded from the host after the "
            "restore (RNDADDENTROPY + RNDRESEEDCRNG), fresh machine id, boot_id drawn after the reseed",
        }
        return handle

    def _template(self, key: str, vm_plan: VmPlan, *, artefacts: str, plan: BackendPlan) -> tuple[int, str]:
        """Step 3: (a descriptor of the snapshot for ``key``, how it was found)."""
        with self._lock:
            if self._closed:
                raise SandboxStartError("this warm start was closed", "open a new pool")
            fd = self._templates.get(key)
            if fd is not None:
                return fd, "open in this pool"
            dir_fd = open_snapshot_dir()
            try:
                fd = open_cached_snapshot(dir_fd, key)
                how = "cached"
                if fd is None:
                    build = build_template(vm_plan, key=key, artefacts=artefacts, dir_fd=dir_fd, cgroup=plan.cgroup)
                    how = f"built now: boot {build.boot_s:.2f} s, save {build.save_s:.2f} s, {build.size_bytes} bytes"
                    fd = open_cached_snapshot(dir_fd, key)
                    if fd is None:
                        raise SandboxStartError(f"the template {key} vanished right after it was built", "retry")
            finally:
                os.close(dir_fd)
            self._templates[key] = fd
            return fd, how

    def close(self) -> None:
        """Close the snapshot descriptors this warm start held; idempotent. The snapshot files
        stay in the cache (see the module docstring)."""
        with self._lock:
            self._closed = True
            fds, self._templates = list(self._templates.values()), {}
        for fd in fds:
            os.close(fd)
