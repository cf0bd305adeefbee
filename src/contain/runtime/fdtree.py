"""Walking and changing a host directory tree through descriptors, never through path strings.

Once a workload has run, anything it could write may now be a symlink, a different directory
renamed into place, or a tree deep enough to overflow a recursive walk. Every helper here starts
from a directory descriptor the caller opened *before* the workload ran, opens each component
relative to its parent with ``O_NOFOLLOW``, and walks with an explicit stack bounded in entries and
depth (no recursion, so a 100,000-deep tree cannot raise ``RecursionError``).

Enforces: no symlink is followed; no operation leaves the tree of the starting descriptor; walks
stop at their limits and say so. Does not decide what to remove or keep (``write_binds`` and
``files`` do), and does not guard against a *live* process changing the tree concurrently beyond
the identity checks the callers make (callers run these after the sandbox is dead).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "DIR_FLAGS",
    "Entry",
    "WalkLimits",
    "WalkOutcome",
    "identity",
    "open_dir_at",
    "remove_tree_at",
    "walk",
]


class _Scandir(Protocol):
    """os.scandir's iterator (its class is not importable by name)."""

    def __next__(self) -> os.DirEntry[str]: ...

    def close(self) -> None: ...


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def identity(info: os.stat_result) -> tuple[int, int]:
    """The (device, inode) pair that says an entry is still the one recorded earlier."""
    return (info.st_dev, info.st_ino)


def open_dir_at(parent_fd: int, name: str) -> int:
    """Open directory ``name`` under ``parent_fd`` without following a symlink.

    Raises:
        OSError: ELOOP/ENOTDIR when ``name`` is a symlink or not a directory, ENOENT when missing.
    """
    if "/" in name or name in ("", ".", ".."):
        raise OSError(22, f"not a single path component: {name!r}")
    return os.open(name, DIR_FLAGS, dir_fd=parent_fd)


@dataclass(frozen=True)
class WalkLimits:
    """How far a walk goes. Both bounds exist because each costs the host something different:
    entries cost inodes and time, depth costs one open descriptor per level."""

    max_entries: int
    max_depth: int


class Entry:
    """One entry met by ``walk``. ``parent_fd`` is valid only until the walk moves on.

    ``is_dir`` comes from the directory listing (d_type, no system call, never following a
    link); ``info`` is the entry's lstat, taken on first use and kept.
    """

    __slots__ = ("_dirent", "_info", "depth", "name", "parent_fd", "relative")

    def __init__(self, relative: str, dirent: os.DirEntry[str], parent_fd: int, depth: int) -> None:
        self.relative = relative
        self.name = dirent.name
        self.parent_fd = parent_fd
        self.depth = depth  # 1 for entries directly under the root
        self._dirent = dirent
        self._info: os.stat_result | None = None

    @property
    def info(self) -> os.stat_result:
        if self._info is None:
            self._info = os.stat(self.name, dir_fd=self.parent_fd, follow_symlinks=False)
        return self._info

    @property
    def is_dir(self) -> bool:
        return self._dirent.is_dir(follow_symlinks=False)


@dataclass
class WalkOutcome:
    """What a walk could not look at: it stopped at the entry limit, or left deep directories out."""

    entries: int = 0
    stopped_at_limit: bool = False
    too_deep: list[str] = field(default_factory=list)  # relative paths of directories not entered

    @property
    def complete(self) -> bool:
        return not self.stopped_at_limit and not self.too_deep


def walk(
    root_fd: int,
    limits: WalkLimits,
    outcome: WalkOutcome,
    *,
    descend: Callable[[Entry], bool] = lambda entry: True,
) -> Iterator[Entry]:
    """Yield every entry under ``root_fd`` depth-first (parents before children), never following links.

    A directory is entered when ``descend(entry)`` is true, it is a real directory (not a symlink)
    and its depth is below ``limits.max_depth``; a directory left out for depth is recorded in
    ``outcome.too_deep``. The walk stops after ``limits.max_entries`` entries and sets
    ``outcome.stopped_at_limit``. A directory that vanished or turned into something else between
    listing and opening is skipped (it is not there to act on).

    Args:
        root_fd: a directory descriptor; not closed here.
        limits: entry and depth bounds.
        outcome: filled in as the walk goes (the caller reads it afterwards).
        descend: whether to enter a directory entry.
    """
    stack: list[tuple[int, str, int, _Scandir]] = []
    first = os.dup(root_fd)
    stack.append((first, "", 0, os.scandir(first)))
    try:
        while stack:
            fd, prefix, depth, names = stack[-1]
            item = next(names, None)
            if item is None:
                stack.pop()
                names.close()
                os.close(fd)
                continue
            if outcome.entries >= limits.max_entries:
                outcome.stopped_at_limit = True
                return
            outcome.entries += 1
            entry = Entry(prefix + item.name, item, fd, depth + 1)
            yield entry
            if not entry.is_dir or not descend(entry):
                continue
            if depth + 1 >= limits.max_depth:
                outcome.too_deep.append(entry.relative)
                continue
            try:
                expected = identity(entry.info)
                child = open_dir_at(fd, item.name)
            except OSError:
                continue
            if identity(os.fstat(child)) != expected:
                os.close(child)  # swapped between stat and open: not the entry we yielded
                continue
            stack.append((child, entry.relative + "/", depth + 1, os.scandir(child)))
    finally:
        for fd, _, _, names in stack:
            names.close()
            os.close(fd)


def remove_tree_at(parent_fd: int, name: str, *, max_entries: int) -> bool:
    """Remove ``name`` under ``parent_fd`` and everything below it, without following symlinks.

    Symlinks are unlinked themselves, never their targets. Iterative, so depth costs no recursion;
    each level holds one descriptor, so a pathologically deep tree is removed in several passes
    of bounded depth.

    Returns:
        True when ``name`` is gone; False when the entry limit stopped the removal first.

    Raises:
        OSError: an entry could not be removed (permission, a mount point).
    """
    info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return True
    budget = max_entries
    while True:
        top = open_dir_at(parent_fd, name)
        try:
            emptied, budget = _empty_directory(top, budget)
        finally:
            os.close(top)
        if emptied:
            os.rmdir(name, dir_fd=parent_fd)
            return True
        if budget <= 0:
            return False


_REMOVE_DEPTH = 64  # descriptors held at once while removing; deeper directories are lifted up


def _empty_directory(top: int, budget: int) -> tuple[bool, int]:
    """Remove everything under ``top``. Returns (empty now, entry budget left).

    Holds at most ``_REMOVE_DEPTH`` descriptors: a non-empty directory met at that depth is
    renamed up into ``top`` (same file system, so rename(2) works) and removed on a later pass.
    """
    stack: list[int] = [os.dup(top)]
    try:
        while stack:
            fd = stack[-1]
            pushed = False
            for child_name in os.listdir(fd):
                if budget <= 0:
                    return False, 0
                budget -= 1
                try:
                    child_info = os.stat(child_name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(child_info.st_mode):
                    os.unlink(child_name, dir_fd=fd)
                    continue
                try:
                    os.rmdir(child_name, dir_fd=fd)
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                if len(stack) >= _REMOVE_DEPTH:
                    lifted = f".contain-removing-{os.urandom(6).hex()}"
                    os.rename(child_name, lifted, src_dir_fd=fd, dst_dir_fd=top)
                    continue
                stack.append(open_dir_at(fd, child_name))
                pushed = True
                break
            if not pushed:
                os.close(stack.pop())  # the parent lists again and removes this one, now empty
        return True, budget
    finally:
        for fd in stack:
            os.close(fd)
