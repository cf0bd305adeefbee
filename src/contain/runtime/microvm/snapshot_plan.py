"""MicroVM snapshots as pure plans: the template key, the extra QEMU words, what the cache keeps.

A *template* is a VM booted once, stopped while its guest agent waits for a frame, and saved
with QEMU's migration stream to a file (snapshot.py). Each pooled sandbox is a new QEMU that loads
that file (``-incoming``) and resumes where the template stopped (warm_start.py). QEMU accepts a
migration stream only into a machine with the same devices, memory and CPUs, so the template is
keyed by everything the restored QEMU is started from:

- ``FORMAT`` (bumped when what a template holds changes),
- QEMU's version line and its binary's size and modification time,
- the whole QEMU argv of the VM (``vmm_plan.plan_qemu_argv``) with the descriptor numbers
  replaced by a placeholder. That argv names the kernel, initramfs, userland and read-bind images
  by their content-addressed cache names, the accelerator, guest RAM, vCPUs and the kernel
  command line (the disk budget, the scratch and read-bind paths, the host TSC rate), so a
  change to any guest artefact, a bound directory's content or a budget gives a new key, never a
  stale restore.

So the template depends on the boundary only through what the guest's /init sets up from its
command line and disks (mounts and budgets: no secret). Per restored VM, and never in a
template, come: the host cgroup and network namespace (the restored QEMU's own, ``vmm.VmProcess``),
the RNG state (RESEED), the hostname and machine id (IDENTITY), the kernel's ``boot_id`` (drawn on
first read; nothing reads it before the snapshot), each command's environment (SPAWN). What the
microvm backend refuses (write binds, attachments, network.allow: ``backend.plan_microvm_refusals``)
it refuses on the warm path too.

What this module does not do: touch a file or QEMU (snapshot.py, warm_start.py do).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from contain.runtime.microvm.artefacts import content_digest
from contain.runtime.microvm.vmm_plan import VmPlan, plan_qemu_argv

__all__ = [
    "ABANDONED_AFTER_S",
    "FORMAT",
    "MAX_CACHED_SNAPSHOTS",
    "UNUSED_AFTER_S",
    "CachedSnapshot",
    "QemuIdentity",
    "artefacts_fingerprint",
    "parse_snapshot_file_name",
    "plan_abandoned_temporaries",
    "plan_restore_words",
    "plan_stale_snapshots",
    "plan_template_words",
    "snapshot_file_name",
    "template_key",
]

FORMAT = b"contain-microvm-template-v1"
MAX_CACHED_SNAPSHOTS = 8  # ~100 MB each at 256-416 MiB guest RAM (measured); least recently used go first
UNUSED_AFTER_S = 3600.0  # a template of another guest build unused this long is removed
# A build writes its temporary within its boot budget plus the save (about 100 s at most); one
# this old belongs to a build that was killed (its finally never ran) and is removed.
ABANDONED_AFTER_S = 600.0
_FD_PLACEHOLDER = -1  # the agent descriptor's number differs per start; the key must not
_NAME = re.compile(r"template-([0-9a-f]{24})\.vmstate")

# The template's extra QEMU words, each with its reason:
# - migration.store-global-state=off: the template is stopped before it is saved; with the run
#   state in the stream a restored VM would stay paused until a monitor said `cont`. Without it
#   QEMU starts the restored VM as soon as the stream is loaded, and restored VMs need no monitor.
# - a QMP monitor on a socket the host already holds (``fd=``): no path on any file system, so
#   nothing but this process can reach it; the guest has no device that leads to it.
_TEMPLATE_WORDS = ("-global", "migration.store-global-state=off")


@dataclass(frozen=True)
class QemuIdentity:
    """Which QEMU saves and loads the stream: its version line and its binary's size and mtime."""

    version: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class CachedSnapshot:
    """One snapshot the cache holds, as its sidecar describes it (snapshot.py reads them)."""

    key: str
    artefacts: str  # what ``plan_stale_snapshots`` compares: QEMU identity + guest artefact names
    used_at: float  # last build or restore, seconds since the epoch (the sidecar's mtime)


def template_key(plan: VmPlan, qemu: QemuIdentity) -> str:
    """The template's cache key for a VM planned as ``plan`` (pure; see the module docstring)."""
    argv = plan_qemu_argv(replace(plan, agent_fd=_FD_PLACEHOLDER if plan.agent_fd is not None else None))
    parts = [FORMAT, qemu.version.encode(), str(qemu.size).encode(), str(qemu.mtime_ns).encode()]
    return content_digest([*parts, *(word.encode() for word in argv)])


def artefacts_fingerprint(plan: VmPlan, qemu: QemuIdentity) -> str:
    """What every template of this build shares (QEMU and the guest's boot artefacts, not the
    boundary's budgets or read binds): a cached template with another fingerprint can never be
    restored by this build again."""
    parts = [FORMAT, qemu.version.encode(), str(qemu.size).encode(), str(qemu.mtime_ns).encode()]
    parts += [plan.kernel.encode(), plan.initramfs.encode(), plan.userland_image.encode()]
    return content_digest(parts)


def snapshot_file_name(key: str) -> str:
    """``template-<key>.vmstate`` (the sidecar is the same name with ``.json``)."""
    if not re.fullmatch(r"[0-9a-f]{24}", key):
        raise ValueError(f"not a template key: {key!r}")
    return f"template-{key}.vmstate"


def parse_snapshot_file_name(name: str) -> str | None:
    """The key in a snapshot file's name, or None for any other name."""
    match = _NAME.fullmatch(name)
    return match.group(1) if match else None


def plan_template_words(*, monitor_fd: int) -> list[str]:
    """QEMU words the template VM gets beside its VM plan's argv (see ``_TEMPLATE_WORDS``)."""
    return [*_TEMPLATE_WORDS, "-chardev", f"socket,id=monitor,fd={monitor_fd}", "-mon", "chardev=monitor,mode=control"]


def plan_restore_words(*, snapshot_fd: int) -> list[str]:
    """QEMU words a restored VM gets: load the migration stream from an inherited read-only fd."""
    return ["-incoming", f"fd:{snapshot_fd}"]


def plan_stale_snapshots(
    cached: Sequence[CachedSnapshot],
    *,
    current_artefacts: str,
    keep_key: str,
    now: float,
    keep_at_most: int = MAX_CACHED_SNAPSHOTS,
    unused_after_s: float = UNUSED_AFTER_S,
) -> list[str]:
    """The keys to remove after ``keep_key`` was built (pure).

    Removed: every snapshot of other artefacts (another QEMU or guest build) not used for
    ``unused_after_s`` (one cache serves every checkout and venv on the host, and another build
    may still restore its own; an unused one will not be), then the least recently used beyond
    ``keep_at_most``. ``keep_key`` is never removed.
    """
    others = [c for c in cached if c.key != keep_key]
    stale = [c.key for c in others if c.artefacts != current_artefacts and c.used_at < now - unused_after_s]
    rest = sorted((c for c in others if c.key not in stale), key=lambda c: c.used_at)
    excess = len(rest) + 1 - keep_at_most
    if excess > 0:
        stale += [c.key for c in rest[:excess]]
    return stale


def plan_abandoned_temporaries(
    temporaries: Sequence[tuple[str, float]], *, now: float, older_than_s: float = ABANDONED_AFTER_S
) -> list[str]:
    """The temporaries of killed template builds to remove (pure): ``(name, mtime)`` pairs of
    ``.template-*`` files last written more than ``older_than_s`` ago. A live build's file is
    younger (it writes while it saves), so it is never taken."""
    return [name for name, mtime in temporaries if name.startswith(".template-") and mtime < now - older_than_s]
