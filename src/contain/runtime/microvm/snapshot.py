"""MicroVM template snapshots: build one (boot, quiesce, save, stop) and keep it in the cache.

``build_template`` is the checklist, run once per template key (snapshot_plan.py says what the
key covers):

1. start the template VM exactly as the sandboxes restored from it will be started (the same
   ``VmPlan``), plus a QMP monitor on a socket pair and ``store-global-state=off``
   (``plan_template_words``), as the leased host uid and in the cgroup of the sandbox that asked
   for it (so the template is counted against, and limited by, that sandbox's budget);
2. wait for /init's ``READY_MARKER`` on the console, then for the agent's answer to a RESEED: the
   agent is in its frame loop, waiting, with no command and no transfer. Nothing else is asked:
   no HELLO (its READY reads ``/proc/sys/kernel/random/boot_id``, which the kernel draws on first
   read; read here it would be the same in every restored VM), no IDENTITY, no SPAWN, no file;
3. quiesce: QMP ``stop`` (no vCPU runs while the state is saved, so the stream is one pass);
4. save: a new file ``O_CREAT|O_EXCL|O_NOFOLLOW`` mode 0600 under the snapshot directory,
   handed to QEMU with ``getfd`` and written by ``migrate fd:``; wait for the MIGRATION event
   ``completed``;
5. stop the template (QMP ``quit``, then kill and reap), write the sidecar (what it was built
   from, 0600) and rename both into place (atomic: a concurrent reader sees no file or a whole
   one);
6. remove the snapshots of another QEMU or guest build that nobody restored for
   ``UNUSED_AFTER_S`` (one cache serves every checkout on the host: another build may still use
   its own), then the least recently used beyond ``MAX_CACHED_SNAPSHOTS``
   (``plan_stale_snapshots``; a restore marks its template used: ``mark_used``).

What the snapshot directory enforces (``open_snapshot_dir``): ``<contain cache>/microvm/snapshots``
is a real directory, owned by the current user, mode 0700; a snapshot is used only when it is a
regular file owned by the current user with no group or other permission bits
(``open_cached_snapshot``); anything else is refused (``SandboxStartError``), never silently
rebuilt, because whoever can write a snapshot controls every VM restored from it. Every file
operation goes through the directory's descriptor with ``O_NOFOLLOW``.

What it does not do: restore (warm_start.py); check a cached snapshot's bytes against its key (as
for the other guest artefacts, the name says what it was built from); remove a snapshot a pool
still restores from (a pool holds its snapshot open; an unlinked file stays readable to it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import socket
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from contain._log import LazyLogger
from contain.errors import ContainError, SandboxLost, SandboxStartError
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.microvm.artefacts import guest_cache_dir, prepare_private_dir
from contain.runtime.microvm.guest_channel import GuestChannel
from contain.runtime.microvm.guest_handle import GuestSandbox
from contain.runtime.microvm.initramfs import READY_MARKER
from contain.runtime.microvm.monitor import Monitor
from contain.runtime.microvm.snapshot_plan import (
    CachedSnapshot,
    QemuIdentity,
    parse_snapshot_file_name,
    plan_abandoned_temporaries,
    plan_stale_snapshots,
    plan_template_words,
    snapshot_file_name,
)
from contain.runtime.microvm.vmm import VmmFacts, VmProcess
from contain.runtime.microvm.vmm_plan import VmPlan
from contain.visible_text import for_terminal

__all__ = [
    "AGENT_START_MIN_S",
    "TEMPLATE_BOOT_TIMEOUT_S",
    "TemplateBuild",
    "agent_answer_budget_s",
    "build_template",
    "clear_snapshots",
    "list_snapshots",
    "mark_used",
    "open_cached_snapshot",
    "open_snapshot_dir",
    "qemu_identity",
    "remove_snapshot",
    "remove_stale_snapshots",
    "snapshot_dir",
]

log = LazyLogger(__name__)

TEMPLATE_BOOT_TIMEOUT_S = 90.0  # TCG boots here take 6-11 s on a loaded 2-core host; generous
# After the marker: the agent's exec and start (one small static binary); the boot's remaining
# budget is used when it is larger.
AGENT_START_MIN_S = 30.0
MONITOR_TIMEOUT_S = 30.0  # one QMP reply (stop, getfd, quit answer at once)
SAVE_TIMEOUT_S = 120.0  # the migration stream: 0.7 s for 100 MB measured
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MIGRATION_END = frozenset({"completed", "failed", "cancelled"})
_FIX = "run `contain microvm snapshot clear` and retry; rerun with CONTAIN_DEBUG=1 to see more"


@dataclass(frozen=True)
class TemplateBuild:
    """What building a template measured."""

    key: str
    boot_s: float  # QEMU start to the agent's first answer
    save_s: float  # stop + migrate to the file
    size_bytes: int


def snapshot_dir() -> Path:
    """``<contain cache>/microvm/snapshots`` (not created here)."""
    return guest_cache_dir() / "snapshots"


def qemu_identity(facts: VmmFacts) -> QemuIdentity:
    """The QEMU that saves and loads templates (its version line, size and mtime).

    Raises:
        SandboxStartError: QEMU cannot be stat'ed.
    """
    if facts.qemu is None:
        raise SandboxStartError("qemu-system-x86_64 is not installed", "apt-get install qemu-system-x86")
    try:
        info = os.stat(facts.qemu)
    except OSError as exc:
        raise SandboxStartError(f"cannot stat {facts.qemu}: {exc.strerror}", "reinstall qemu-system-x86") from exc
    return QemuIdentity(version=facts.qemu_version, size=info.st_size, mtime_ns=info.st_mtime_ns)


def open_snapshot_dir(*, create: bool = True) -> int:
    """A descriptor of the snapshot directory, checked (see the module docstring).

    Raises:
        SandboxStartError: it cannot be created, or is not a 0700 directory of the current user.
    """
    parent = prepare_private_dir(guest_cache_dir())
    parent_fd = os.open(parent, _DIR_FLAGS)
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir("snapshots", 0o700, dir_fd=parent_fd)
        try:
            fd = os.open("snapshots", _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            raise SandboxStartError(
                f"cannot open the snapshot directory {snapshot_dir()}: {exc.strerror} (a symlink is refused)",
                f"remove {snapshot_dir()}; contain recreates it",
            ) from exc
    finally:
        os.close(parent_fd)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
        os.close(fd)
        raise SandboxStartError(
            f"snapshot directory {snapshot_dir()} is owned by uid {info.st_uid} with mode "
            f"{stat.S_IMODE(info.st_mode):o}; it must be yours and 0700 (a snapshot holds a whole guest's memory)",
            f"remove {snapshot_dir()}; contain recreates it",
        )
    return fd


def open_cached_snapshot(dir_fd: int, key: str) -> int | None:
    """A read-only descriptor of the cached snapshot for ``key``, or None when there is none.

    Raises:
        SandboxStartError: the file is not a regular 0600-or-stricter file of the current user.
    """
    name = snapshot_file_name(key)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SandboxStartError(
            f"cannot open the cached snapshot {snapshot_dir() / name}: {exc.strerror} (a symlink is refused)",
            f"delete {snapshot_dir() / name}; contain rebuilds it",
        ) from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077 or info.st_size == 0:
        os.close(fd)
        raise SandboxStartError(
            f"cached snapshot {snapshot_dir() / name} is not an owner-only regular file of yours: it may have "
            "been swapped",
            f"delete {snapshot_dir() / name}; contain rebuilds it",
        )
    os.set_blocking(fd, True)
    return fd


def agent_answer_budget_s(elapsed_s: float) -> float:
    """How long the template's first request (RESEED) may wait, ``elapsed_s`` into its boot.

    What is left of ``TEMPLATE_BOOT_TIMEOUT_S``, and never less than ``AGENT_START_MIN_S``: the
    serial marker comes before the agent runs, so its start counts as boot, not as one reply.
    """
    return max(TEMPLATE_BOOT_TIMEOUT_S - elapsed_s, AGENT_START_MIN_S)


def build_template(
    plan: VmPlan,
    *,
    key: str,
    artefacts: str,
    dir_fd: int,
    cgroup: SandboxCgroup | None,
    run_as: tuple[int, int],
) -> TemplateBuild:
    """Boot, quiesce and save the template for ``plan`` as ``key``; see the module docstring.

    Args:
        plan: the VM every restore starts (its ``agent_fd`` is replaced by the template's own).
        artefacts: ``snapshot_plan.artefacts_fingerprint`` of this build (kept in the sidecar).
        dir_fd: ``open_snapshot_dir()``.
        cgroup: where the template's QEMU runs (the asking sandbox's cgroup).
        run_as: the host uid and gid it runs as (the asking sandbox's leased ids; never root).

    Raises:
        SandboxStartError: the template did not come up, or QEMU did not save it; the VM is killed
            and no partial file is left.
    """
    host_end, guest_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    monitor_host, monitor_guest = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    guest_fd, monitor_fd = guest_end.detach(), monitor_guest.detach()
    vm = VmProcess(
        replace(plan, agent_fd=guest_fd),
        cgroup=cgroup,
        guest_fd=guest_fd,
        run_as=run_as,
        extra_argv=plan_template_words(monitor_fd=monitor_fd),
        extra_fds=(monitor_fd,),
    )
    tmp_name = f".{snapshot_file_name(key)}.{secrets.token_hex(6)}"
    handle: GuestSandbox | None = None
    began = time.monotonic()
    try:
        try:
            vm.start()
        finally:
            os.close(monitor_fd)
        monitor = Monitor(monitor_host)
        monitor.greet(timeout_s=MONITOR_TIMEOUT_S)
        handle = GuestSandbox(GuestChannel.from_socket(host_end), vm)
        if not vm.serial.wait_for(READY_MARKER, timeout_s=TEMPLATE_BOOT_TIMEOUT_S):
            raise SandboxStartError(f"the template guest did not reach {READY_MARKER!r}", _FIX)
        # The marker is printed by init *before* it looks up the port and execs the agent: the
        # agent's own start is still part of the boot, so its first answer gets what is left of
        # the boot budget, not the 30 s of one reply. RESEED stays the only request (no HELLO:
        # its READY would draw boot_id before the save, shared by every restore).
        budget_s = agent_answer_budget_s(time.monotonic() - began)
        try:
            handle.reseed(secrets.token_bytes(64), timeout_s=budget_s)
        except SandboxLost as exc:
            raise SandboxStartError(
                exc.cause,
                f"the agent gets the rest of the {TEMPLATE_BOOT_TIMEOUT_S:g} s boot budget ({budget_s:.0f} s here; "
                "TCG boots measured 6-11 s on a loaded 2-core host): check the host's load, then retry",
            ) from exc
        boot_s = time.monotonic() - began
        size, save_s = _save(monitor, dir_fd=dir_fd, tmp_name=tmp_name)
        with contextlib.suppress(ContainError):
            monitor.execute("quit", timeout_s=MONITOR_TIMEOUT_S)
        sidecar = {
            "key": key,
            "artefacts": artefacts,
            "built_at": time.time(),
            "qemu": plan.qemu,
            "accel": plan.accel.value,
            "memory_mib": plan.memory_mib,
            "vcpus": plan.vcpus,
            "cmdline": " ".join(plan.cmdline),
            "read_images": list(plan.read_images),
            "boot_s": round(boot_s, 3),
            "save_s": round(save_s, 3),
            "bytes": size,
        }
        _write_private(dir_fd, snapshot_file_name(key).replace(".vmstate", ".json"), json.dumps(sidecar).encode())
        os.rename(tmp_name, snapshot_file_name(key), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except ContainError as exc:
        tail = vm.serial.tail_lines(15)
        raise SandboxStartError(
            f"building the microVM template failed ({exc.cause}); its console ended with:\n" + for_terminal(tail),
            exc.fix or _FIX,
        ) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name, dir_fd=dir_fd)
        if handle is not None:
            handle.destroy()  # the VM is stopped or gone: no SHUTDOWN to wait for
            handle.close()
        else:
            host_end.close()
        vm.close(grace_s=0)
        monitor_host.close()
    try:
        remove_stale_snapshots(dir_fd, keep_key=key, current_artefacts=artefacts)
    except OSError as exc:  # the template is built and usable; old ones stay until the next build
        log.debug("could not remove stale microVM templates: %r", exc)
    return TemplateBuild(key=key, boot_s=boot_s, save_s=save_s, size_bytes=size)


def _save(monitor: Monitor, *, dir_fd: int, tmp_name: str) -> tuple[int, float]:
    """Steps 3-4: stop the VM and migrate it into a new 0600 file; (bytes, seconds)."""
    began = time.monotonic()
    monitor.execute(
        "migrate-set-capabilities",
        {"capabilities": [{"capability": "events", "state": True}]},
        timeout_s=MONITOR_TIMEOUT_S,
    )
    monitor.execute("stop", timeout_s=MONITOR_TIMEOUT_S)
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        monitor.execute("getfd", {"fdname": "snapshot"}, timeout_s=MONITOR_TIMEOUT_S, fds=[fd])
        monitor.execute("migrate", {"uri": "fd:snapshot"}, timeout_s=MONITOR_TIMEOUT_S)
        deadline = time.monotonic() + SAVE_TIMEOUT_S
        status = ""
        while status not in _MIGRATION_END:
            status = str(monitor.wait_event("MIGRATION", timeout_s=max(0.0, deadline - time.monotonic())).get("status"))
        if status != "completed":
            info = monitor.execute("query-migrate", timeout_s=MONITOR_TIMEOUT_S)
            raise SandboxStartError(f"QEMU could not save the template: migration {status} ({info})", _FIX)
        os.fsync(fd)
        return os.fstat(fd).st_size, time.monotonic() - began
    finally:
        os.close(fd)


def _write_private(dir_fd: int, name: str, data: bytes) -> None:
    tmp = f".{name}.{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def list_snapshots(dir_fd: int) -> list[dict[str, Any]]:
    """Every snapshot in the directory with its sidecar (``{"key": ...}`` alone when that is
    missing or unreadable), oldest first."""
    found: list[dict[str, Any]] = []
    for name in sorted(os.listdir(dir_fd)):
        key = parse_snapshot_file_name(name)
        if key is None:
            continue
        entry: dict[str, Any] = {"key": key}
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(name.replace(".vmstate", ".json"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                loaded = json.loads(os.read(fd, 1 << 16))
            finally:
                os.close(fd)
            if isinstance(loaded, dict) and loaded.get("key") == key:
                entry = loaded
        with contextlib.suppress(OSError):
            entry["bytes"] = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
        with contextlib.suppress(OSError):
            side = name.replace(".vmstate", ".json")
            entry["used_at"] = os.stat(side, dir_fd=dir_fd, follow_symlinks=False).st_mtime
        found.append(entry)
    return sorted(found, key=lambda e: float(e.get("built_at", 0.0)))


def remove_stale_snapshots(dir_fd: int, *, keep_key: str, current_artefacts: str) -> list[str]:
    """Step 6; returns the keys removed. Also removes temporaries killed builds left
    (``plan_abandoned_temporaries``)."""
    cached = [
        CachedSnapshot(key=e["key"], artefacts=str(e.get("artefacts", "")), used_at=float(e.get("used_at", 0.0)))
        for e in list_snapshots(dir_fd)
    ]
    now = time.time()
    stale = plan_stale_snapshots(cached, current_artefacts=current_artefacts, keep_key=keep_key, now=now)
    for key in stale:
        remove_snapshot(dir_fd, key)
    temporaries = []
    for name in os.listdir(dir_fd):
        with contextlib.suppress(FileNotFoundError):
            temporaries.append((name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime))
    for name in plan_abandoned_temporaries(temporaries, now=now):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
    return stale


def mark_used(dir_fd: int, key: str) -> None:
    """Record a restore from ``key`` (the sidecar's mtime: what ``plan_stale_snapshots`` orders by)."""
    with contextlib.suppress(OSError):
        os.utime(snapshot_file_name(key).replace(".vmstate", ".json"), dir_fd=dir_fd, follow_symlinks=False)


def clear_snapshots(dir_fd: int) -> list[str]:
    """Remove every snapshot (and leftover temporaries of interrupted builds); the keys removed."""
    removed = []
    for name in os.listdir(dir_fd):
        key = parse_snapshot_file_name(name)
        if key is not None:
            remove_snapshot(dir_fd, key)
            removed.append(key)
        elif name.startswith(".template-"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
    return removed


def remove_snapshot(dir_fd: int, key: str) -> None:
    """Remove the snapshot for ``key`` and its sidecar (either may be missing)."""
    for name in (snapshot_file_name(key), snapshot_file_name(key).replace(".vmstate", ".json")):
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
