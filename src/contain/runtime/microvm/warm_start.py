"""The microVM warm start: each pooled sandbox is a QEMU restored from one saved template VM.

``MicroVMWarmStart`` is what ``MicroVMBackend.open_warm_start()`` returns to a ``SandboxPool``
(``runtime/backend.py``: ``WarmStart``). ``start(plan)`` is the checklist, per sandbox:

1. ``MicroVMBackend.prepare(plan)``: the same refusals, guest build, accelerator choice and
   read-bind images as a cold start (a bound directory is imaged, by content, at every start;
   the guest build, QEMU's facts and the accelerator are looked up at the first start only);
2. plan the VM exactly as a cold start would (``backend.plan_vm``) and key it
   (``snapshot_plan.template_key``): a boundary, bound content, guest build or QEMU that differs
   gives another key, so a restore never resumes a guest set up for something else;
3. find the template for that key: already open in this warm start, else in the cache
   (``snapshot.open_cached_snapshot``), else build it now (``snapshot.build_template``: in this
   sandbox's cgroup; the first sandbox of a pool pays for it, about one cold boot);
4. start a new QEMU from the same plan with ``-incoming fd:N`` on a fresh read-only open of the
   snapshot, as this sandbox's leased host uid, in its own host cgroup and an empty network
   namespace (``vmm.VmProcess``, as cold), on a new agent socket pair; QEMU resumes the guest once the stream is loaded;
5. over the agent channel, before anything else: RESEED with 64 fresh host bytes (the agent adds
   them with RNDADDENTROPY and then forces a CRNG reseed with RNDRESEEDCRNG, so the restored
   kernel stops drawing from the template's RNG state), IDENTITY (hostname, and a fresh random
   machine id), then HELLO (version check; its READY reads ``boot_id`` for the first time in this
   guest's life, after the reseed, so every restored VM draws its own);
6. warm up: run ``/bin/true`` once (``WARM_UP``: contain's command, as the workload user, no
   input, output to /dev/null, nothing written) and require exit 0. A restored QEMU starts with
   an empty TCG translation cache, so the first exec in it translates the guest kernel's
   fork/exec/page-fault paths and the agent's anew: measured here 0.4-1.7 s under load, against
   50-130 ms for the next one. The cache is per QEMU process and holds no guest data; the
   warm-up leaves what any finished command leaves (a pid number used, its run cgroup removed).
   In a pool this runs in the refill thread, off the task's path.

Any failure kills the VM and fails the start with the console's tail (``SandboxStartError``);
the pool retries. When QEMU ended before the guest's first answer (the snapshot did not load: a
truncated or damaged file), the template is also removed, so the retry rebuilds it.

Why a restored VM holds nothing of another task: the template never ran a command, never received
a file, an environment or an attachment (step 2 of ``snapshot.build_template``); each restore is
its own QEMU process whose guest RAM (scratch, /tmp, /dev/shm are tmpfs in it) is private to it;
its disks are the cached images opened ``readonly=on``. So no overlay or disk copy is needed, and
none is left behind.

What it does NOT make fresh (shared by every VM restored from one template, as after any VM
snapshot; the whole list is docs/microvm.md "What a snapshot shares"): the guest kernel's own
secrets drawn at boot (KASLR offsets, the ``%p`` hashing key, SLUB's per-cache freelist keys and
orders, boot-time hash seeds), the canaries of tasks that existed in the template (the agent,
pid 1, and kernel threads) and the agent's address layout; every workload process is forked and
exec'd after the reseed, so its canary, layout and ``AT_RANDOM`` are its own. The guest's monotonic
clock and kernel timers resume at the template's save time; its wall clock is set from the host's
by IDENTITY (``realtime_ns``) before the first command, and nothing keeps it in step afterwards.
``close()`` leaves the content-keyed snapshot in the cache
(like the kernel and images; ``contain microvm snapshot clear`` removes it) and nothing else.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import threading
import time

from contain.errors import ContainError, SandboxStartError
from contain.runtime.backend import BackendPlan, CommandRequest, RunningSandbox
from contain.runtime.microvm.backend import MicroVMBackend, PreparedGuest, guest_seccomp_filter, plan_vm
from contain.runtime.microvm.guest_channel import GuestChannel
from contain.runtime.microvm.guest_handle import GuestSandbox
from contain.runtime.microvm.handle import MicroVMHandle
from contain.runtime.microvm.snapshot import (
    build_template,
    mark_used,
    open_cached_snapshot,
    open_snapshot_dir,
    qemu_identity,
    remove_snapshot,
)
from contain.runtime.microvm.snapshot_plan import (
    artefacts_fingerprint,
    plan_restore_words,
    snapshot_file_name,
    template_key,
)
from contain.runtime.microvm.vmm import VmProcess
from contain.runtime.microvm.vmm_plan import VmPlan
from contain.runtime.supervisor_channel import SpawnFailed
from contain.visible_text import for_terminal

__all__ = ["GUEST_HOSTNAME", "MicroVMWarmStart"]

GUEST_HOSTNAME = "contain"  # as a cold microVM's (backend.py); the machine id is what is per VM
RESEED_BYTES = 64  # 512 bits from the host's CSPRNG; the agent accepts 32..512 bytes
# Step 6: contain's own command (no input, output to /dev/null, writes nothing), run once in each
# restored VM before it is handed out; see the module docstring for why.
WARM_UP = CommandRequest(argv=("/bin/true",), env={}, cwd="/", rlimits=())
WARM_UP_TIMEOUT_S = 60.0
QEMU_EXIT_GRACE_S = 1.0  # after the channel broke: whether QEMU ended (the stream did not load)


def _warm_up(handle: GuestSandbox, request: CommandRequest = WARM_UP) -> None:
    """Step 6: run ``request`` (``WARM_UP`` unless the warm start was given another) once and
    require it to exit 0.

    Raises:
        SandboxStartError: it could not start, failed, or outlived ``WARM_UP_TIMEOUT_S``.
        SandboxLost: the agent stopped answering.
    """
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        started = handle.spawn(request, (null, null, null))
    finally:
        os.close(null)
    if isinstance(started, SpawnFailed):
        raise SandboxStartError(f"the warm-up command could not start ({started})", "rebuild the guest")
    exited = handle.wait_exited(WARM_UP_TIMEOUT_S)
    if exited is None:
        handle.kill()
        raise SandboxStartError(f"the warm-up command did not end within {WARM_UP_TIMEOUT_S:g} s", "retry")
    if exited.status != 0:
        raise SandboxStartError(f"the warm-up command ended with wait status {exited.status}", "rebuild the guest")


class MicroVMWarmStart:
    """Restores pooled microVMs from a template; see the module docstring.

    ``layer_report`` holds the lines of the last ``start`` (``Sandbox`` adds them to the
    sandbox's layers through ``pool.WarmBackend``). ``last_restore_s`` is QEMU start to the
    agent's READY for the last restore, for the bench.
    """

    def __init__(self, backend: MicroVMBackend, *, warm_up: CommandRequest = WARM_UP) -> None:
        self._backend = backend
        # step 6's command: contain's own, never a task's (the probe warms Python: what it runs next)
        self._warm_up_request = warm_up
        self._lock = threading.Lock()
        self._templates: dict[str, int] = {}  # key -> read-only descriptor of its snapshot
        self._prepared: PreparedGuest | None = None
        self._closed = False
        self.layer_report: dict[str, str] = {}
        self.last_restore_s = 0.0
        self.last_warm_up_s = 0.0

    def start(self, plan: BackendPlan) -> RunningSandbox:
        """Restore one VM for ``plan`` (see the module docstring).

        Raises:
            UnsupportedHost: as ``MicroVMBackend.start``.
            SandboxStartError: the template could not be built, or the restored guest did not answer.
        """
        prepared = self._prepare(plan)
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
                connector=shutil.which("socat"),
            )
            limits = limits._replace(seccomp_bpf=guest_seccomp_filter(plan.facts))  # the agent needs it to SPAWN
            qemu = qemu_identity(prepared.facts)
            key = template_key(vm_plan, qemu)
            snapshot_fd, how = self._template(key, vm_plan, artefacts=artefacts_fingerprint(vm_plan, qemu), plan=plan)
            clock_behind_s = max(0.0, time.time() - os.fstat(snapshot_fd).st_mtime)  # saved when written
            restore_fd = os.open(f"/proc/self/fd/{snapshot_fd}", os.O_RDONLY | os.O_CLOEXEC)  # own offset
        except BaseException:
            os.close(guest_fd)
            host_end.close()
            raise
        vm = VmProcess(
            vm_plan,
            cgroup=plan.cgroup,
            guest_fd=guest_fd,
            run_as=plan.host_ids,
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
        answered = False
        try:
            handle.reseed(secrets.token_bytes(RESEED_BYTES))
            answered = True
            handle.set_identity(hostname=GUEST_HOSTNAME, machine_id=secrets.token_hex(16), realtime_ns=time.time_ns())
            handle.hello()
            restored_s = time.monotonic() - began
            _warm_up(handle, self._warm_up_request)
        except ContainError as exc:
            # QEMU ending before the guest's first answer: the stream did not load (a truncated or
            # foreign file); drop the template so the next start rebuilds it instead of failing
            # the same way for ever. A guest that answered and then failed keeps its template.
            unloadable = not answered and vm.wait(QEMU_EXIT_GRACE_S) is not None
            handle.destroy()
            handle.close()
            if unloadable:
                self._drop_template(key, snapshot_fd)
            raise SandboxStartError(
                f"the restored microVM failed its start ({exc.cause})"
                + (
                    "; QEMU could not load the template, which was removed (the next start rebuilds it)"
                    if unloadable
                    else ""
                )
                + "; its console ended with:\n"
                + for_terminal(vm.serial.tail_lines(15)),
                "retry (a pool retries by itself); `contain microvm snapshot clear` rebuilds every template",
            ) from exc
        except BaseException:
            handle.destroy()
            handle.close()
            raise
        self.last_restore_s = restored_s
        self.last_warm_up_s = time.monotonic() - began - restored_s
        network = vm_plan.network is not None
        self.layer_report = {
            "accelerator": prepared.choice.reason,
            "guest": f"kernel {prepared.image.kernel.release}, {vm_plan.memory_mib} MiB, {vm_plan.vcpus} vCPU, "
            f"restored in {self.last_restore_s:.2f} s, warmed up in {self.last_warm_up_s:.2f} s",
            "warm start": f"restored from template {key} ({how}); RNG reseeded from the host after the "
            "restore (RNDADDENTROPY + RNDRESEEDCRNG), fresh machine id, boot_id drawn after the reseed; "
            f"the guest wall clock set from the host's (IDENTITY realtime_ns; the template's was "
            f"{clock_behind_s:.0f} s behind)",
        }
        return MicroVMHandle(handle, serial_tail=vm.serial.tail_lines, network=network)

    def _prepare(self, plan: BackendPlan) -> PreparedGuest:
        """Step 1. The guest build, QEMU's facts and the accelerator are looked up once per warm
        start (a pool's boundary and guest are fixed when it opens; the template names the very
        files it restores with, which the cache never changes in place); refusals and read-bind
        images are decided for every plan, because a bound directory's content may change."""
        prepared = self._backend.prepare(plan, reuse=self._prepared)
        self._prepared = prepared
        return prepared

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
                mark_used(dir_fd, key)
                if fd is None:
                    build = build_template(
                        vm_plan, key=key, artefacts=artefacts, dir_fd=dir_fd, cgroup=plan.cgroup, run_as=plan.host_ids
                    )
                    how = f"built now: boot {build.boot_s:.2f} s, save {build.save_s:.2f} s, {build.size_bytes} bytes"
                    fd = open_cached_snapshot(dir_fd, key)
                    if fd is None:
                        raise SandboxStartError(f"the template {key} vanished right after it was built", "retry")
            finally:
                os.close(dir_fd)
            self._templates[key] = fd
            return fd, how

    def _drop_template(self, key: str, snapshot_fd: int) -> None:
        """Forget ``key`` and remove its file, only if the file is still the one ``snapshot_fd``
        reads (a concurrent build may have replaced it with a good one)."""
        with self._lock:
            if self._templates.get(key) == snapshot_fd:
                del self._templates[key]
            ours = os.fstat(snapshot_fd)
            os.close(snapshot_fd)
            dir_fd = open_snapshot_dir()
            try:
                current = os.stat(snapshot_file_name(key), dir_fd=dir_fd, follow_symlinks=False)
                if (current.st_dev, current.st_ino) == (ours.st_dev, ours.st_ino):
                    remove_snapshot(dir_fd, key)
            except FileNotFoundError:
                pass
            finally:
                os.close(dir_fd)

    def close(self) -> None:
        """Close the snapshot descriptors this warm start held; idempotent. The snapshot files
        stay in the cache (see the module docstring)."""
        with self._lock:
            self._closed = True
            fds, self._templates = list(self._templates.values()), {}
        for fd in fds:
            os.close(fd)
