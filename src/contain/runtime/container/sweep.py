"""Removing container sandboxes whose owner died before it could close them.

A container sandbox is named ``contain-<owner pid>-...`` (its cgroup leaf, cgroups.py) and lives
in ``CONTAINER_ROOT/<name>``. When the owning process is killed (SIGKILL, OOM, power loss of the
caller only), its ``close`` never runs: runc's container keeps running (``--detach``), and the
disk tmpfs, the netns pin, the image overlay, the cgroup leaves and the directory stay.
``sweep_stale`` (called at every container start, cheap when there is nothing) finds such
directories and removes them the way ``ContainerSandbox.close`` would.

Decided purely (``plan_stale``): a directory is stale only when its name has the expected shape
and no process with that pid exists. A live pid (even a reused one) keeps the directory: a sweep
that killed another owner's running sandbox would be worse than a leftover. Sweeps serialise on
an ``flock`` in the root; a second sweeper skips.

Does NOT: sweep the process backend's cgroups (cgroup_sweep.py does), or look at directories
outside ``CONTAINER_ROOT``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from contain._log import LazyLogger
from contain.errors import ContainError
from contain.host.facts import HostFacts
from contain.runtime.backend_names import CONTAINER_RUNTIMES
from contain.runtime.cgroup_plan import plan_base_dir
from contain.runtime.container.host_setup import CGROUP_PARENT, remove_empty_parents, run_bounded, umount
from contain.runtime.container.oci_runtime import plan_delete_argv, probe_runtime
from contain.runtime.pids import is_pid_alive

__all__ = ["plan_stale", "sweep_stale"]

log = LazyLogger(__name__)

_NAME_RE = re.compile(r"^contain-(\d+)-[A-Za-z0-9_.-]+$")
_DELETE_TIMEOUT_S = 20.0
_MOUNTS = ("rootfs", "disk", "netns", "userns")  # unmounted in this order: the overlay's upper is on disk


def plan_stale(names: Iterable[str], *, is_alive: Callable[[int], bool]) -> list[str]:
    """The sandbox directories among ``names`` whose owner pid no longer exists."""
    stale = []
    for name in sorted(names):
        match = _NAME_RE.match(name)
        if match is not None and not is_alive(int(match.group(1))):
            stale.append(name)
    return stale


def sweep_stale(root: Path, facts: HostFacts) -> list[str]:
    """Remove every stale sandbox under ``root``; returns their names (empty when another sweeps).

    Never raises for one sandbox: what could not be removed is logged and left for the next sweep.
    """
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    stale = plan_stale(names, is_alive=is_pid_alive)
    if not stale:
        return []
    lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []
        for name in stale:
            try:
                _remove(root / name, name, facts)
            except OSError as exc:  # a start must not fail on someone else's leftovers
                log.warning("could not remove stale container sandbox %s: %s", name, exc)
        remove_empty_parents(facts)
    finally:
        os.close(lock)
    return stale


def _remove(directory: Path, name: str, facts: HostFacts) -> None:
    log.warning("removing container sandbox %s: its owner is gone", name)
    state = directory / "state"
    if state.is_dir() and not state.is_symlink():
        for runtime in CONTAINER_RUNTIMES:  # whichever made it; the other finds no container
            try:
                facts_of = probe_runtime(runtime)
            except ContainError:
                continue
            run_bounded(
                plan_delete_argv(facts_of, state_dir=str(state), log_file=os.devnull, name=name), _DELETE_TIMEOUT_S
            )
    for mount in _MOUNTS:
        umount(str(directory / mount))
    for cgroup_mount in facts.cgroups:
        leaf = os.path.join(plan_base_dir(facts, cgroup_mount), CGROUP_PARENT, name)
        with contextlib.suppress(OSError):
            os.rmdir(leaf)  # empty once the runtime deleted the container; else left for later
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(directory)
