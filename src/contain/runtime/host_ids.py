"""A host uid of its own for each sandbox, leased for the sandbox's life.

The kernel counts some limits per host user across every namespace: inotify instances and
watches, user namespaces, mqueue bytes, the RLIMIT_NPROC of the host user (ESCAPE_CATALOG RE-09).
If every sandbox ran as the same host uid, one task could exhaust them for every other task. When
contain runs as root, each sandbox without write binds therefore runs as a uid leased from a
reserved range, never shared with a concurrent sandbox.

A lease is an exclusive ``flock`` on ``<lock dir>/<uid>`` held for the sandbox's life. The lock
file is removed when released; a new holder re-checks after locking that the path still names
the inode it locked, which closes the unlink-then-create race.

Does not apply to sandboxes with write binds: files they write must be owned by a uid the host
user can use afterwards, so those run as nobody (65534), and the result's layers say so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from contain.errors import SandboxStartError

__all__ = ["LEASE_DIR", "UID_RANGE", "HostIdLease", "lease_host_ids"]

# 2^20 uids starting at 0x60000000: above every allocator's range in common use (system and
# login users < 65536, systemd dynamic users 61184-65519, /etc/subuid ranges from 100000 up in
# steps of 65536), below 2^31 so no tool reads them as negative.
UID_RANGE = range(0x6000_0000, 0x6000_0000 + (1 << 20))
LEASE_DIR = Path("/run/contain/host-ids")
_ATTEMPTS = 64


@dataclass
class HostIdLease:
    """A held lease; ``release()`` ends it (idempotent)."""

    uid: int
    gid: int
    path: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is None:
            return
        # Unlink while still holding the lock, so nobody can lock this inode after we let go.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = None


def _lock_dir(base: Path) -> Path:
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(base)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077 or not os.path.isdir(base) or os.path.islink(base):
        raise SandboxStartError(
            f"host-id lease directory {base} is not a private directory of this user",
            f"remove {base}; contain recreates it with mode 0700",
        )
    return base


def lease_host_ids(*, lock_dir: Path = LEASE_DIR, uid_range: range = UID_RANGE) -> HostIdLease:
    """Lease a host uid (and the same gid) no other running sandbox holds.

    Raises:
        SandboxStartError: the lease directory is unsafe, or no free uid was found.
    """
    base = _lock_dir(lock_dir)
    for _ in range(_ATTEMPTS):
        uid = uid_range.start + _random_index(len(uid_range))
        path = base / str(uid)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.lstat(path).st_ino:
                raise BlockingIOError  # released and unlinked between our open and our lock
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            continue
        return HostIdLease(uid, uid, path, fd)
    raise SandboxStartError(
        f"no free host uid found in {_ATTEMPTS} tries in {uid_range.start}-{uid_range.stop - 1}",
        "too many sandboxes are running at once; close some",
    )


def _random_index(n: int) -> int:
    # Random picks spread concurrent sandboxes over the range; modulo bias does not matter here,
    # and os.urandom keeps the ``secrets`` import (random, hmac, base64) off the start-up path.
    return int.from_bytes(os.urandom(4), "little") % n
