"""Whether a process id names a live process: the owner check of every stale-state sweep.

The sweeps that remove what a dead sandbox left behind name that state after its owner's pid
(``runtime/cgroup_sweep.py``: cgroup leaves, ``runtime/container/sweep.py``: bundle directories,
``runtime/idmap.py``: idmapped staging directories) and remove it only once ``is_pid_alive`` says
the owner is gone. One definition, so the sweeps cannot disagree about what "alive" means.

Does NOT guard against pid reuse: a pid recycled by an unrelated process reads as alive, and the
state is left for a later sweep. That is the safe direction (a leak, never removing the state of a
sandbox that is still running).
"""

from __future__ import annotations

import os

__all__ = ["is_pid_alive"]


def is_pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists: signal 0 is delivered, or refused with EPERM (another
    user's process is alive too); False only on ESRCH.

    Args:
        pid: the owner's pid as read from a name (not checked against pid_max).

    Returns:
        Whether the kernel knows a process with that id.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
