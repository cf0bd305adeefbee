"""What ``runc delete`` does to a *stopped* container, planned from runc's own state, so that
close can do it without starting runc a second time.

Why: after the supervisor (the container's pid 1) has exited, the kernel has already ended every
other process of its pid namespace, and ``runc delete`` (runc 1.1 ``destroy``) only removes the
container's cgroup directories (``cgroup_paths`` in ``<root>/<id>/state.json``) and its state
directory, then runs poststop hooks. Starting runc for that costs a Go process start on every
close (8-25 ms on the 2-CPU host, about a tenth of a fresh runc sandbox's life).

``plan_stopped_removal`` (pure) accepts only a state it fully understands and returns the
directories to ``rmdir``; anything else (another id, hooks, Intel RDT, a path outside the cgroup
mount or not named after the container) returns None and the backend runs ``runc delete
--force`` exactly as before. The backend also falls back when any ``rmdir`` fails (a busy cgroup
is runc's to retry), and it uses this only when the supervisor's pidfd said it exited and the
bundle gave the container its own pid namespace.

Does NOT: kill anything (the pid namespace's end did), decide whether the container stopped
(``backend.py`` does, from the pidfd), or read a state of a running container.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

__all__ = ["CGROUP_MOUNT_ROOT", "plan_stopped_removal"]

CGROUP_MOUNT_ROOT = "/sys/fs/cgroup"  # where runc's cgroupfs manager finds every hierarchy


def plan_stopped_removal(state: Mapping[str, Any], *, name: str) -> tuple[str, ...] | None:
    """The cgroup directories runc's destroy would remove for stopped container ``name``.

    Args:
        state: runc's ``state.json`` for the container, parsed.
        name: the container id the backend gave it.

    Returns:
        The directories, deepest first, or None when runc must delete the container itself.
    """
    if state.get("id") != name or state.get("intel_rdt_path"):
        return None
    config = state.get("config")
    if not isinstance(config, Mapping) or any(config.get("hooks") or ()):
        return None
    paths = state.get("cgroup_paths")
    if not isinstance(paths, Mapping) or not paths:
        return None
    found = set()
    for path in paths.values():
        if (
            not isinstance(path, str)
            or not path.startswith(CGROUP_MOUNT_ROOT + "/")
            or posixpath.normpath(path) != path
            or posixpath.basename(path) != name
        ):
            return None
        found.add(path)
    return tuple(sorted(found, key=lambda p: (-p.count("/"), p)))
