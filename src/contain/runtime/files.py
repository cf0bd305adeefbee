"""Moving files into and out of a running sandbox's scratch without following its symlinks.

The host reaches the sandbox's file system through ``/proc/<supervisor pid>/root``. An absolute symlink
planted by the workload would resolve against the *host's* root if followed, so nothing here ever
follows a symlink: every component is opened relative to its parent's descriptor with
``O_NOFOLLOW``, and only regular files and directories are copied. Writes on the host side
(exports) are made the same way under a directory the caller names.

Enforces: paths stay under a scratch root; sizes are capped; exports are capped in bytes, entries
and depth and walk without recursion; symlinks, devices, fifos and sockets are refused or skipped
(and reported). Does not decide which paths are scratch (the sandbox does).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import posixpath
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from contain.errors import FileTransferError
from contain.runtime.fdtree import Entry, WalkLimits, WalkOutcome, walk

__all__ = [
    "ExportDestination",
    "ExportReport",
    "anchor_export_destination",
    "as_sandbox_user",
    "export_entry_limit",
    "export_tree",
    "read_file_in",
    "scratch_relative",
    "write_file_in",
]

T = TypeVar("T")


def as_sandbox_user(uid: int, gid: int, work: Callable[[], T]) -> T:
    """Run ``work`` in a short-lived thread whose file-system ids are the sandbox user's.

    The sandbox's tmpfs mounts belong to its user namespace; the kernel refuses to create files
    there for a host uid that is not mapped into it (EOVERFLOW), and host root is not. fsuid and
    fsgid are per-thread on Linux, so switching them in a throwaway thread leaves the rest of the
    process untouched. Files then also get the right owner without a chown.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.setfsgid(gid)
        libc.setfsuid(uid)
        # setfsuid reports the previous value, never an error: ask again to confirm.
        if libc.setfsuid(uid) != uid or libc.setfsgid(gid) != gid:
            failure.append(
                FileTransferError(
                    f"could not switch file-system ids to {uid}:{gid}", "run contain as root or as the sandbox user"
                )
            )
            return
        try:
            outcome.append(work())
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="contain-fs-as-sandbox-user")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def scratch_relative(path: str, scratch_roots: tuple[str, ...]) -> tuple[str, str]:
    """Split a sandbox path into (scratch root, relative part), refusing anything else.

    Raises:
        FileTransferError: the path is not absolute, not normalised, or outside every scratch root.
    """
    if not path.startswith("/") or posixpath.normpath(path) != path or "\x00" in path:
        raise FileTransferError(
            f"{path!r} is not a normalised absolute sandbox path", "write it like /work/out/result.json"
        )
    for root in scratch_roots:
        if path.startswith(root.rstrip("/") + "/"):
            return root, path[len(root.rstrip("/")) + 1 :]
    raise FileTransferError(
        f"{path} is outside the sandbox's scratch paths ({', '.join(scratch_roots)})",
        "put and get files only under a scratch path of the boundary",
    )


@contextmanager
def _open_dir(base_fd: int, parts: list[str], *, create: bool) -> Iterator[int]:
    fd = os.dup(base_fd)
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _fail(path: str, exc: OSError, action: str) -> FileTransferError:
    if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR:
        return FileTransferError(
            f"cannot {action} {path}: a component is a symlink or not a directory", "use a plain path with no symlinks"
        )
    return FileTransferError(f"cannot {action} {path}: {exc.strerror}", "check the path and the scratch size")


@contextmanager
def _parent_in(root: str, relative: str, *, create: bool, label: str, action: str) -> Iterator[tuple[int, str]]:
    """The directory that holds ``root/relative``, opened one ``O_NOFOLLOW`` component at a time
    (created when ``create``), and the last component's name. An ``OSError`` from opening or from
    the caller's block becomes a ``FileTransferError`` saying it could not ``action`` ``label``."""
    parts = relative.split("/")
    try:
        base = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _fail(label, exc, "open scratch for") from exc
    try:
        with _open_dir(base, parts[:-1], create=create) as parent:
            yield parent, parts[-1]
    except OSError as exc:
        raise _fail(label, exc, action) from exc
    finally:
        os.close(base)


def write_file_in(root: str, relative: str, data: bytes, *, mode: int, label: str) -> None:
    """Create or replace ``root/relative`` with ``data``; parents are created as needed.

    Raises:
        FileTransferError: a component is a symlink, the target is not a regular file, or I/O fails.
    """
    with _parent_in(root, relative, create=True, label=label, action="write") as (parent, name):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileTransferError(f"{label} is not a regular file", "choose another path")
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def read_file_in(root: str, relative: str, *, max_bytes: int, label: str) -> bytes:
    """Read ``root/relative`` without following symlinks, up to ``max_bytes``.

    Raises:
        FileTransferError: missing, a symlink, not a regular file, or larger than ``max_bytes``.
    """
    with _parent_in(root, relative, create=False, label=label, action="read") as (parent, name):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FileTransferError(f"{label} is not a regular file", "get only regular files")
            if info.st_size > max_bytes:
                raise FileTransferError(
                    f"{label} is {info.st_size} bytes, over the {max_bytes}-byte limit", "pass a larger max_bytes"
                )
            chunks, total = [], 0
            while chunk := os.read(fd, 1 << 20):
                total += len(chunk)
                if total > max_bytes:
                    raise FileTransferError(
                        f"{label} grew past {max_bytes} bytes while reading", "pass a larger max_bytes"
                    )
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)


# Bounds of one export. Every entry costs the host at least one 4 KiB block (an ext4 directory is
# one block even when empty), so counting bytes alone lets 20,000 empty directories cost 79 MiB;
# the entry cap scales with the byte budget so that entries cost at most about as much again.
HOST_BLOCK_BYTES = 4096
EXPORT_MAX_ENTRIES = 100_000  # also bounds the time an export takes
EXPORT_MIN_ENTRIES = 64  # a tiny budget still exports a small result tree
EXPORT_MAX_DEPTH = 64  # one open descriptor per level on each side
_SKIPPED_LINES = 100  # the report lists this many skipped entries, then counts the rest


def export_entry_limit(max_bytes: int) -> int:
    """Entries an export of a ``max_bytes`` budget may create on the host (see HOST_BLOCK_BYTES)."""
    return min(EXPORT_MAX_ENTRIES, max(EXPORT_MIN_ENTRIES, max_bytes // HOST_BLOCK_BYTES))


@dataclass
class ExportReport:
    """What an export copied and what it refused to copy (symlinks, devices, over-limit entries)."""

    files: int = 0
    dirs: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # the first _SKIPPED_LINES, one line each
    skipped_count: int = 0  # all of them, listed or not
    stopped: str = ""  # why the export stopped early (a limit, an error), or "" when it finished

    def skip(self, line: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < _SKIPPED_LINES:
            self.skipped.append(line)

    def lines(self) -> list[str]:
        """Human-readable lines for the CLI: what stopped the export and what was skipped."""
        out = [f"stopped: {self.stopped}"] if self.stopped else []
        out += [f"skipped {line}" for line in self.skipped]
        if self.skipped_count > len(self.skipped):
            out.append(f"... and {self.skipped_count - len(self.skipped)} more skipped")
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "dirs": self.dirs,
            "bytes": self.bytes,
            "skipped": list(self.skipped),
            "skipped_count": self.skipped_count,
            "stopped": self.stopped,
        }


@dataclass
class ExportDestination:
    """A host export directory anchored before the workload ran.

    The destination may lie inside a write bind, where the workload could replace a component
    with a symlink; so its deepest existing directory is opened (after ``realpath``: symlinks in
    the configured path are the user's) before the run, and the rest is created below that
    descriptor at export time, one ``O_NOFOLLOW`` component at a time.
    """

    label: str
    fd: int
    missing: tuple[str, ...]

    def open_for_export(self) -> int:
        """A descriptor of the destination, creating the missing components.

        Raises:
            FileTransferError: a component is now a symlink or not a directory.
        """
        fd = os.dup(self.fd)
        try:
            for part in self.missing:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except OSError as exc:
            os.close(fd)
            raise _fail(self.label, exc, "export to") from exc
        return fd

    def close(self) -> None:
        os.close(self.fd)


def anchor_export_destination(dest: str) -> ExportDestination:
    """Open the deepest existing directory of ``dest`` now; see ``ExportDestination``.

    Raises:
        FileTransferError: a component of ``dest`` exists but is not a directory.
    """
    parts = [p for p in os.path.realpath(dest).split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    for index, part in enumerate(parts):
        try:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return ExportDestination(dest, fd, tuple(parts[index:]))
        except OSError as exc:
            os.close(fd)
            raise _fail(dest, exc, "export to") from exc
        os.close(fd)
        fd = child
    return ExportDestination(dest, fd, ())


def export_tree(
    source_root: str,
    dest: str | ExportDestination,
    *,
    max_bytes: int,
    max_entries: int | None = None,
    max_depth: int = EXPORT_MAX_DEPTH,
) -> ExportReport:
    """Copy regular files and directories from a sandbox scratch into host directory ``dest``.

    Nothing is followed on either side; existing symlinks in ``dest`` are never written through.
    The walk is iterative and bounded: past ``max_entries`` entries it stops, directories deeper
    than ``max_depth`` are not entered, files past ``max_bytes`` are left out; each is reported.

    Args:
        source_root: the scratch directory as the host reaches it (``/proc/<pid>/root/...``).
        dest: the host directory to copy into (created if missing), or its anchor taken before
            the workload ran (what ``Sandbox`` passes).
        max_bytes: total bytes of file content to copy.
        max_entries: entries to create on the host (default ``export_entry_limit(max_bytes)``).
        max_depth: directory levels to enter.

    Raises:
        FileTransferError: ``dest`` cannot be created or is a symlink, or the source cannot be opened.
    """
    limits = WalkLimits(export_entry_limit(max_bytes) if max_entries is None else max_entries, max_depth)
    report = ExportReport()
    anchor = dest if isinstance(dest, ExportDestination) else anchor_export_destination(dest)
    try:
        dst_fd = anchor.open_for_export()
    finally:
        if anchor is not dest:
            anchor.close()
    try:
        src_fd = os.open(source_root, _DIR_FLAGS)
    except OSError as exc:
        os.close(dst_fd)
        raise _fail(source_root, exc, "export from") from exc
    try:
        _copy_tree(src_fd, dst_fd, limits, report, max_bytes)
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    return report


def _copy_tree(src_fd: int, dst_fd: int, limits: WalkLimits, report: ExportReport, max_bytes: int) -> None:
    outcome = WalkOutcome()
    dst_dirs: list[int] = [dst_fd]  # dst_dirs[d] is the destination of the directory at depth d
    not_copied: set[str] = set()  # directories whose destination could not be made: skip their content

    def descend(entry: Entry) -> bool:
        return entry.relative not in not_copied

    try:
        for entry in walk(src_fd, limits, outcome, descend=descend):
            while len(dst_dirs) > entry.depth:
                os.close(dst_dirs.pop())
            parent = dst_dirs[-1]
            if entry.is_dir:
                child = _make_dest_dir(parent, entry, report)
                if child is None:
                    not_copied.add(entry.relative)
                    continue
                dst_dirs.append(child)
            elif stat.S_ISREG(entry.info.st_mode):
                _copy_file(entry, parent, report, max_bytes)
            else:
                report.skip(f"{entry.relative} (not a regular file or directory)")
    finally:
        for fd in dst_dirs[1:]:
            os.close(fd)
    for relative in outcome.too_deep:
        report.skip(f"{relative}/ (deeper than {limits.max_depth} levels: its content was not copied)")
    if outcome.stopped_at_limit:
        report.stopped = f"the export limit of {limits.max_entries} entries was reached; the rest was not copied"


def _make_dest_dir(parent: int, entry: Entry, report: ExportReport) -> int | None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(entry.name, 0o755, dir_fd=parent)
    try:
        child = os.open(entry.name, _DIR_FLAGS, dir_fd=parent)
    except OSError:
        report.skip(f"{entry.relative}/ (not a plain directory on one side)")
        return None
    report.dirs += 1
    return child


def _copy_file(entry: Entry, parent: int, report: ExportReport, max_bytes: int) -> None:
    size = entry.info.st_size
    if report.bytes + size > max_bytes:
        report.skip(f"{entry.relative} (export limit of {max_bytes} bytes reached)")
        return
    try:
        src = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=entry.parent_fd)
    except OSError:
        report.skip(f"{entry.relative} (could not be opened)")
        return
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        dst = os.open(entry.name, flags, 0o644, dir_fd=parent)
    except OSError:
        os.close(src)
        report.skip(f"{entry.relative} (destination is not a plain file)")
        return
    try:
        copied = 0
        while copied < size and (chunk := os.read(src, min(1 << 20, size - copied))):
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]
            copied += len(chunk)
        report.files += 1
        report.bytes += copied
    finally:
        os.close(src)
        os.close(dst)
