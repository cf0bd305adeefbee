"""Build (once) everything a microVM guest boots from: kernel, initramfs, userland image.

``ensure_guest_image()`` is the orchestrator, an ordered checklist; each step is cached by the
hash of its inputs under ``<contain cache>/microvm`` (artefacts.py) and does nothing when its
inputs did not change:

1. the kernel and its modules, unpacked from Debian's cloud kernel package (kernel.py);
2. the guest agent, built by ``agent_build`` when that module exists in this tree (None
   otherwise: the guest then boots only in probe and shell mode, and the backend refuses to
   start a sandbox, naming why);
3. the initramfs: busybox, the modules, /init and the agent (initramfs.py);
4. the read-only userland image (userland.py).

``scripts/bootstrap.sh`` calls it through ``contain doctor --build-guest``, so ``make test`` and
``make demo`` build the guest, printing what they do. What it does not do: boot anything (the
accelerator check in accel.py does), or delete older artefacts (they are small next to the
kernel package; remove ``<cache>/microvm`` to reclaim the space).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from contain.runtime.microvm.initramfs import Initramfs, ensure_initramfs
from contain.runtime.microvm.kernel import GuestKernel, ensure_guest_kernel
from contain.runtime.microvm.userland import Userland, ensure_userland

__all__ = ["GuestImage", "ensure_guest_agent", "ensure_guest_image"]


@dataclass(frozen=True)
class GuestImage:
    """The built pieces a VM boots from."""

    kernel: GuestKernel
    initramfs: Initramfs
    userland: Userland


def ensure_guest_agent() -> Path | None:
    """The static guest agent binary, built by ``contain.runtime.microvm.agent_build`` when that
    module is part of this tree; None when it is not."""
    try:
        module = importlib.import_module("contain.runtime.microvm.agent_build")
    except ModuleNotFoundError:
        return None
    path: Path = module.ensure_guest_agent_binary().path
    return path


def ensure_guest_image() -> GuestImage:
    """Build what is missing and return the guest's pieces; see the module docstring.

    Raises:
        UnsupportedHost: a host tool or package the build needs is missing.
        SandboxStartError: a build step failed, or the cache fails its checks.
    """
    kernel = ensure_guest_kernel()
    agent = ensure_guest_agent()
    initramfs = ensure_initramfs(kernel, agent=agent)
    userland = ensure_userland()
    return GuestImage(kernel=kernel, initramfs=initramfs, userland=userland)
