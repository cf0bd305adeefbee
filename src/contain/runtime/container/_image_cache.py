"""The content-addressed image cache: one lock per digest, temp dirs, a marker written last, rename.

Layout under the cache root (owned by the unpacking user, mode 0700)::

    <root>/sha256-<hex>/rootfs        the read-only tree (directories and files without write bits)
    <root>/sha256-<hex>/image.json    config, tags and the unpack report
    <root>/sha256-<hex>/complete      written last: an entry without it is not used
    <root>/.lock-sha256-<hex>         flock(2) target serialising unpacks of one digest
    <root>/.unpack-sha256-<hex>-<random>   an unpack in progress (removed on failure)

``sha256-`` rather than ``sha256:``: a colon separates overlayfs ``lowerdir`` entries.

Enforces: the cache root is a real directory (not a symlink) owned by the caller and not writable
by group or others; an entry becomes visible only by ``rename(2)`` of a complete tree whose data
was flushed (``syncfs``) before the marker was written. Does not: evict old entries or bound the
cache's total size.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from contain.runtime.container._image_apply import DIR_FLAGS, remove_entry

__all__ = [
    "MARKER",
    "MARKER_VERSION",
    "CacheError",
    "entry_lock",
    "entry_name",
    "new_work_dir",
    "open_cache_root",
    "publish",
    "read_entry",
    "sync_filesystem",
    "write_json",
]

MARKER = "complete"
METADATA = "image.json"
MARKER_VERSION = 1


class CacheError(Exception):
    """The cache root or an entry is unusable; ``image.py`` turns this into an ``ImageError``."""


def entry_name(hexdigest: str) -> str:
    return f"sha256-{hexdigest}"


def open_cache_root(path: str) -> int:
    """Create (0700) and open the cache root; refuse a symlink or a root others could write."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError as exc:
        raise CacheError(f"cache root {path} cannot be opened as a directory: {exc.strerror}") from exc
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise CacheError(f"cache root {path} is owned by uid {info.st_uid} or writable by others")
    return fd


@contextmanager
def entry_lock(root_fd: int, name: str) -> Iterator[None]:
    """Hold an exclusive flock for one entry (separate opens conflict, threads included)."""
    fd = os.open(f".lock-{name}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=root_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read_json_in(dir_fd: int, name: str) -> Any:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read()  # our own file in a 0700 directory; a large report must not be cut
    return json.loads(data)


def read_entry(root_fd: int, name: str) -> dict[str, Any] | None:
    """The metadata of a complete entry, or None when there is none (or it is incomplete)."""
    try:
        entry_fd = os.open(name, DIR_FLAGS, dir_fd=root_fd)
    except FileNotFoundError:
        return None
    try:
        try:
            marker = _read_json_in(entry_fd, MARKER)
            if not isinstance(marker, dict) or marker.get("version") != MARKER_VERSION:
                return None
            metadata = _read_json_in(entry_fd, METADATA)
        except (OSError, ValueError):
            return None  # absent, half-written or unreadable: the entry is unpacked again
        return metadata if isinstance(metadata, dict) else None
    finally:
        os.close(entry_fd)


def new_work_dir(root_fd: int, name: str) -> str:
    """A fresh ``.unpack-<name>-<random>`` directory; leftovers of crashed unpacks of this entry
    are removed first (the caller holds the entry's lock, so none is live)."""
    for old in os.listdir(root_fd):
        if old.startswith(f".unpack-{name}-"):
            remove_entry(root_fd, old)
    work = f".unpack-{name}-{secrets.token_hex(8)}"
    os.mkdir(work, 0o700, dir_fd=root_fd)
    return work


def write_json(dir_fd: int, name: str, value: Any) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444, dir_fd=dir_fd)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(value, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())


def sync_filesystem(fd: int) -> None:
    """syncfs(2): every unpacked file's data reaches the disk before the marker says complete."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syncfs(fd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs failed")


def publish(root_fd: int, work: str, name: str) -> None:
    """Rename the finished work dir to ``name``; an incomplete old entry is moved away first."""
    try:
        os.stat(name, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        pass
    else:
        stale = f".unpack-{name}-stale-{secrets.token_hex(8)}"
        os.rename(name, stale, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        remove_entry(root_fd, stale)
    os.rename(work, name, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    os.fsync(root_fd)
