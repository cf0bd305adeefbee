"""Read a file that contain itself wrote into a cache, only if nobody else could have changed it.

Both start-up caches (the validated boundary, the compiled seccomp filter) feed security
decisions, so a copy is used only when it is a regular file (never through a symlink) owned by
this user (or root, where the caller allows it), without the mode bits the caller forbids, and
no larger than the caller expects. Anything else reads as absent: the caller rebuilds it.
"""

from __future__ import annotations

import os
import stat

__all__ = ["read_trusted"]


def read_trusted(
    path: str | os.PathLike[str], *, max_bytes: int, forbidden_modes: int, root_may_own: bool
) -> bytes | None:
    """The whole file, or None when it is missing, unsafe, larger than ``max_bytes`` or unreadable.

    Args:
        path: the file; a symlink in its last component is not followed.
        max_bytes: the largest size accepted.
        forbidden_modes: permission bits the file must not have, e.g. ``stat.S_IWGRP | stat.S_IWOTH``.
        root_may_own: whether a root-owned file is trusted too (a root-built shared cache).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        owners = (os.geteuid(), 0) if root_may_own else (os.geteuid(),)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid not in owners
            or info.st_mode & forbidden_modes
            or info.st_size > max_bytes
        ):
            return None
        data = os.read(fd, max_bytes + 1)
        return data if len(data) == info.st_size else None  # changed while read: treat as absent
    except OSError:
        return None
    finally:
        os.close(fd)
