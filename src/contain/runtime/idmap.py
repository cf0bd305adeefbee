"""Idmapped bind sources: a sandbox's leased uid acts as the owner of the trees it binds.

Why: when contain runs as root, each sandbox runs as a host uid leased for it alone (RE-09, per-user
kernel limits are not shared). Without this module, a leased uid can read only what "other" may
read (a project under /root, mode 0700, is refused), and sandboxes with write binds had to share
uid 65534 so that the files they write get an owner the host user can use. An idmapped mount
(Linux >= 5.12, ``mount_setattr(MOUNT_ATTR_IDMAP)``) shows the bind's owner as the leased uid, and
files the sandbox creates land on disk owned by that owner. No host permission is changed.

How, for one bind (``StagedBinds.stage``):
  1. ``open_tree(OPEN_TREE_CLONE)`` detaches a copy of the mount at the bind's real path;
  2. a user namespace whose uid_map/gid_map is ``<owner> <leased id> 1`` becomes the mount's
     idmapping, together with nosuid, nodev (and read-only for read binds);
  3. ``move_mount`` attaches it at ``/run/contain/idmap/<sandbox>/<n>``: a directory owned by the
     leased uid, mode 0700, so no other host user can walk into the staged view;
  4. bubblewrap binds the staged path instead of the original one.
Teardown detaches the mounts (``umount2(MNT_DETACH)``) and removes the staging directory; a staging
directory whose creating process is gone is swept at the next start.

Enforced: only the bind root's owning uid and gid are mapped. Files of other owners in the tree
appear as the overflow id (nobody): readable through their "other" bits, never modifiable. Mounts
below the bind root are not part of the clone (not recursive), so they are not visible inside.

Not enforced / fallbacks: a file system that cannot be idmapped (or a kernel without the
syscalls) raises ``IdmapUnsupported``; the caller then keeps the previous behaviour and reports it
(read binds must be readable by the leased uid as they are; write binds run as the shared uid
65534). Only root can create these mounts: an unprivileged caller runs as itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from contain.runtime.pids import is_pid_alive

__all__ = [
    "IDMAP_DIR",
    "IdmapUnsupported",
    "StagedBinds",
    "sweep_stale_staging",
]

IDMAP_DIR = Path("/run/contain/idmap")

# Syscall numbers: the mount API was added after the syscall tables were unified, so these are the
# same on x86_64 and aarch64 (include/uapi/asm-generic/unistd.h).
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_AT_EMPTY_PATH = 0x1000
_AT_SYMLINK_NOFOLLOW = 0x100
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MOUNT_ATTR_IDMAP = 0x0010_0000
_MNT_DETACH = 2
_CLONE_NEWUSER = 0x1000_0000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
# One helper child at a time per process. A child forked while another thread's helper pipes are
# open inherits their write ends (fork keeps every fd; O_CLOEXEC acts only at exec), so that
# other helper never sees EOF and both starting threads hang (found with sandboxes starting on
# several threads of one process, as contain fleet's pool actor does).
_HELPER_FORK = threading.Lock()


class IdmapUnsupported(Exception):
    """The kernel or the bind's file system cannot make an idmapped mount (the caller falls back)."""


def _syscall(number: int, *args: object) -> int:
    result = _libc.syscall(number, *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def _idmapping_userns(uid: int, gid: int, *, leased_uid: int, leased_gid: int) -> int:
    """An fd of a fresh user namespace mapping ``uid``/``gid`` (inside) to the leased ids (outside).

    A child process creates the namespace and waits while we write its maps; the namespace lives
    on through the returned fd after the child exits.
    """
    with _HELPER_FORK:
        return _idmapping_userns_locked(uid, gid, leased_uid=leased_uid, leased_gid=leased_gid)


def _idmapping_userns_locked(uid: int, gid: int, *, leased_uid: int, leased_gid: int) -> int:
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only async-signal-safe work, then _exit
        try:
            os.close(ready_r)
            os.close(done_w)
            status = 0 if _libc.unshare(_CLONE_NEWUSER) == 0 else 1
            os.write(ready_w, bytes([status]))
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"\x00":
            raise IdmapUnsupported("could not create a user namespace for the idmapping")
        Path(f"/proc/{pid}/uid_map").write_text(f"{uid} {leased_uid} 1\n")
        Path(f"/proc/{pid}/gid_map").write_text(f"{gid} {leased_gid} 1\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(done_w)
        os.waitpid(pid, 0)


@dataclass
class StagedBinds:
    """The staging directory of one sandbox and the idmapped mounts attached below it.

    ``staged`` maps each bind's host real path to its staged path. ``close()`` detaches them all
    (idempotent); call it only after the sandbox is gone and the host-side clean-up that walks the
    binds is done.
    """

    root: Path
    leased_uid: int
    leased_gid: int
    staged: dict[str, str] = field(default_factory=dict)
    _userns: dict[tuple[int, int], int] = field(default_factory=dict)

    @classmethod
    def create(cls, *, leased_uid: int, leased_gid: int, base: Path = IDMAP_DIR) -> StagedBinds:
        base.mkdir(mode=0o711, parents=True, exist_ok=True)
        info = os.lstat(base)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
            raise IdmapUnsupported(f"{base} is not a root-owned directory writable by root alone")
        root = base / f"{os.getpid()}-{os.urandom(8).hex()}"
        root.mkdir(mode=0o700)
        os.chown(root, leased_uid, leased_gid)  # only the sandbox's uid (and root) may walk in
        return cls(root, leased_uid, leased_gid)

    def stage(self, host_realpath: str, *, read_only: bool) -> str:
        """Attach an idmapped clone of ``host_realpath``; returns the staged path to bind instead.

        Raises:
            IdmapUnsupported: the kernel or the file system refused the idmapping.
        """
        if host_realpath in self.staged:
            return self.staged[host_realpath]
        info = os.stat(host_realpath)
        target = self.root / str(len(self.staged))
        if stat.S_ISDIR(info.st_mode):
            target.mkdir(mode=0o700)
        else:
            target.touch(mode=0o600)
        userns = self._userns_for(info.st_uid, info.st_gid)
        attrs = _MOUNT_ATTR_IDMAP | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV | (_MOUNT_ATTR_RDONLY if read_only else 0)
        mount_attr = ctypes.create_string_buffer(struct.pack("=QQQQ", attrs, 0, 0, userns))
        tree = -1
        try:
            tree = _syscall(
                _SYS_OPEN_TREE,
                ctypes.c_int(-100),  # AT_FDCWD
                host_realpath.encode(),
                ctypes.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_SYMLINK_NOFOLLOW),
            )
            _syscall(_SYS_MOUNT_SETATTR, tree, b"", ctypes.c_uint(_AT_EMPTY_PATH), mount_attr, ctypes.c_size_t(32))
            _syscall(
                _SYS_MOVE_MOUNT,
                tree,
                b"",
                ctypes.c_int(-100),
                str(target).encode(),
                ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
            )
        except OSError as exc:
            with contextlib.suppress(OSError):
                target.rmdir() if target.is_dir() else target.unlink()
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS, errno.EPERM):
                raise IdmapUnsupported(
                    f"cannot idmap {host_realpath}: {exc.strerror} (needs Linux >= 5.12 and a file system "
                    "that supports idmapped mounts)"
                ) from exc
            raise
        finally:
            if tree >= 0:
                os.close(tree)
        self.staged[host_realpath] = str(target)
        return str(target)

    def _userns_for(self, uid: int, gid: int) -> int:
        key = (uid, gid)
        if key not in self._userns:
            self._userns[key] = _idmapping_userns(uid, gid, leased_uid=self.leased_uid, leased_gid=self.leased_gid)
        return self._userns[key]

    def close(self) -> None:
        """Detach every staged mount and remove the staging directory (idempotent)."""
        for fd in self._userns.values():
            os.close(fd)
        self._userns.clear()
        _detach_and_remove(self.root)
        self.staged.clear()


def _detach_and_remove(root: Path) -> None:
    """Detach whatever is mounted directly below ``root``, then remove it (never crossing mounts)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for name in names:
        target = root / name
        if _libc.umount2(str(target).encode(), _MNT_DETACH) != 0 and ctypes.get_errno() not in (errno.EINVAL,):
            continue  # still mounted: leave it rather than remove through it
        with contextlib.suppress(FileNotFoundError):
            if os.path.isdir(target) and not os.path.islink(target):
                os.rmdir(target)  # an empty mount point; rmdir never deletes content
            else:
                os.unlink(target)
    with contextlib.suppress(FileNotFoundError, OSError):
        os.rmdir(root)


def sweep_stale_staging(base: Path = IDMAP_DIR) -> list[str]:
    """Detach and remove staging directories whose creating process has exited.

    Returns:
        The staging directories removed.
    """
    removed: list[str] = []
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return removed
    for name in names:
        pid_text = name.split("-", 1)[0]
        if not pid_text.isascii() or not pid_text.isdigit() or is_pid_alive(int(pid_text)):
            continue
        _detach_and_remove(base / name)
        if not (base / name).exists():
            removed.append(str(base / name))
    return removed
