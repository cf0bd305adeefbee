"""The thin apply step of image unpacking: create, replace and remove entries under an image root.

Nothing here follows a symlink. Every path is walked from the image root's descriptor one
component at a time with ``O_NOFOLLOW | O_DIRECTORY``; a symlink or a file where a directory is
expected raises ``UnsafeOnDisk`` (the planner refuses those members first, so this is the second,
independent check). Final components are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` after the
old entry is removed, so even a planted symlink at the final name is never written through.

Directories are created ``0700`` while unpacking; ``finalize_tree`` sets their image modes
without write bits once every layer is applied. Files get their final mode (no write bits) as
they are written.

Does not: decide anything (``_image_plan`` does), set owners (everything belongs to the
unpacking user) or extended attributes.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from contain.runtime.container._image_plan import ImageTree

__all__ = [
    "UnsafeOnDisk",
    "finalize_tree",
    "make_directory",
    "make_hardlink",
    "make_symlink",
    "open_directory",
    "remove_entry",
    "write_file",
]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1024 * 1024
WRITE_BITS = 0o222


class UnsafeOnDisk(Exception):
    """The file system holds something other than what the walk expects (symlink, file, missing)."""


def _walk_error(parts: tuple[str, ...], depth: int, exc: OSError) -> UnsafeOnDisk:
    where = "/".join(parts[: depth + 1])
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return UnsafeOnDisk(f"{where!r} is a symlink or not a directory; refusing to walk through it")
    return UnsafeOnDisk(f"cannot open {where!r}: {exc.strerror}")


def _check_components(parts: tuple[str, ...]) -> None:
    """O_NOFOLLOW stops symlinks but not "..": refuse it here too, whatever the planner decided."""
    for name in parts:
        if name in ("", ".", "..") or "/" in name or "\x00" in name:
            raise UnsafeOnDisk(f"path component {name!r} would not stay below the image root")


@contextmanager
def open_directory(root_fd: int, parts: tuple[str, ...], *, create: bool) -> Iterator[int]:
    """A descriptor of the directory ``parts`` under ``root_fd``, creating missing ones (0700) if
    ``create``; raises ``FileNotFoundError`` for a missing one otherwise."""
    _check_components(parts)
    fd = os.dup(root_fd)
    try:
        for depth, name in enumerate(parts):
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o700, dir_fd=fd)
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _walk_error(parts, depth, exc) from exc
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _clear_directory(fd: int) -> None:
    os.fchmod(fd, 0o700)  # a finalized (0555) tree must be removable by a non-root owner too
    for name in os.listdir(fd):
        remove_entry(fd, name)


def remove_entry(dir_fd: int, name: str) -> None:
    """Remove ``name`` (a whole tree for a directory) without following symlinks; absent is fine."""
    _check_components((name,))
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        try:
            _clear_directory(child)
        finally:
            os.close(child)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _set_times(fd: int, mtime: int) -> None:
    os.utime(fd, (mtime, mtime))


def write_file(dir_fd: int, name: str, source: IO[bytes], *, size: int, mode: int, mtime: int) -> None:
    """Replace ``name`` with exactly ``size`` bytes from ``source``; the mode loses its write bits."""
    _check_components((name,))
    remove_entry(dir_fd, name)
    fd = os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        written = 0
        while written < size:
            chunk = source.read(min(_COPY_CHUNK, size - written))
            if not chunk:
                raise UnsafeOnDisk(f"member data ended after {written} of {size} bytes")
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            written += len(chunk)
        os.fchmod(fd, mode & ~WRITE_BITS)
        _set_times(fd, mtime)
    finally:
        os.close(fd)


def make_directory(dir_fd: int, name: str) -> None:
    """Make ``name`` a directory: an existing directory is kept (layers merge), anything else replaced."""
    _check_components((name,))
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        return
    remove_entry(dir_fd, name)
    os.mkdir(name, 0o700, dir_fd=dir_fd)


def make_symlink(dir_fd: int, name: str, target: str, *, mtime: int) -> None:
    """Replace ``name`` with a symlink to ``target`` (never resolved here)."""
    _check_components((name,))
    remove_entry(dir_fd, name)
    os.symlink(target, name, dir_fd=dir_fd)
    os.utime(name, (mtime, mtime), dir_fd=dir_fd, follow_symlinks=False)


def make_hardlink(root_fd: int, target: tuple[str, ...], dir_fd: int, name: str) -> None:
    """Replace ``name`` with a hard link to the regular file ``target`` under the image root."""
    _check_components((*target, name))
    with open_directory(root_fd, target[:-1], create=False) as source_dir:
        info = os.stat(target[-1], dir_fd=source_dir, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeOnDisk(f"hard link target {'/'.join(target)!r} is not a regular file on disk")
        remove_entry(dir_fd, name)
        os.link(target[-1], name, src_dir_fd=source_dir, dst_dir_fd=dir_fd, follow_symlinks=False)


def finalize_tree(root_fd: int, tree: ImageTree) -> None:
    """Give every directory its image mode without write bits and its image mtime.

    Runs after the last layer: creating an entry changes its directory's mtime, and the 0700
    working mode is what lets unpacking proceed without relying on root's DAC override.
    """
    for parts, mode, mtime in tree.directories():
        with open_directory(root_fd, parts, create=False) as fd:
            os.fchmod(fd, stat.S_IMODE(mode) & ~WRITE_BITS & ~stat.S_ISUID)
            _set_times(fd, mtime)
