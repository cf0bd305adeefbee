"""Removing the cgroups that contain processes which died left behind.

A contain process removes its sandbox cgroups when it closes them; one that was killed cannot.
``sweep_stale_cgroups`` looks in the shared ``contain`` parent of every mounted hierarchy
(``cgroup_plan.plan_parent_dirs``) and removes what is provably stale.

Decisions:

- **Stale cgroups.** ``sweep_stale_cgroups`` removes only *empty* ``contain-*`` directories whose
  owner pid is dead. It assumes every contain process sharing a parent shares a pid namespace.
  Populated orphans are left alone and logged: killing them is a decision for a human.
- The shared ``contain`` parent is never removed: another process may be creating a sibling.

What is NOT done here: killing anything. A populated orphan stays until a human looks at it.
"""

from __future__ import annotations

import os
import posixpath
import re

from contain._log import LazyLogger
from contain.host.facts import HostFacts, errno_name
from contain.runtime.cgroup_plan import LEAF_PREFIX, plan_parent_dirs
from contain.runtime.cgroups import CgroupOps
from contain.runtime.pids import is_pid_alive

__all__ = ["sweep_stale_cgroups"]

log = LazyLogger(__name__)
_KERNEL_OPS = CgroupOps()  # frozen: the kernel's rmdir

_LEAF_RE = re.compile(rf"^{re.escape(LEAF_PREFIX)}(\d+)-")  # then the owner's pid (cgroups.py names leaves)


def sweep_stale_cgroups(
    facts: HostFacts,
    *,
    ops: CgroupOps = _KERNEL_OPS,
) -> list[str]:
    """Remove empty ``contain-*`` cgroups whose owner process is dead.

    Args:
        facts: the detected host; every mounted hierarchy is swept, supported layout or not.
        ops: rmdir (the kernel's by default).

    Returns:
        The directories removed. Populated ones are left and logged.
    """
    removed: list[str] = []
    for parent in plan_parent_dirs(facts):
        try:
            entries = sorted(os.listdir(parent))
        except OSError:
            continue
        for entry in entries:
            match = _LEAF_RE.match(entry)
            if not match or int(match.group(1)) == os.getpid() or is_pid_alive(int(match.group(1))):
                continue
            path = posixpath.join(parent, entry)
            try:
                ops.rmdir(path)
            except OSError as exc:
                log.warning("stale cgroup %s not removed: %s", path, errno_name(exc.errno or 0))
                continue
            removed.append(path)
    return removed
