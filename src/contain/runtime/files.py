"""Moving files into and out of a running sandbox's scratch without following its symlinks.

The host reaches the sandbox's file system through ``/proc/<agent pid>/root``. An absolute symlink
planted by the workload would resolve against the *host's* root if followed, so nothing here ever
follows a symlink: every component is opened relative to its parent's descriptor with
``O_NOFOLLOW``, and only regular files and directories are copied. Writes on the host side
(exports) are made the same way under a directory the caller names.

Enforces: paths stay under a scratch root; sizes are capped; symlinks, devices, fifos and sockets
are refused or skipped (and reported). Does not decide which paths are scratch (the sandbox does).
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

__all__ = ["ExportReport", "as_sandbox_user", "export_tree", "read_file_in", "scratch_relative", "write_file_in"]

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


def write_file_in(root: str, relative: str, data: bytes, *, mode: int, label: str) -> None:
    """Create or replace ``root/relative`` with ``data``; parents are created as needed.

    Raises:
        FileTransferError: a component is a symlink, the target is not a regular file, or I/O fails.
    """
    parts = relative.split("/")
    try:
        base = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _fail(label, exc, "open scratch for") from exc
    try:
        with _open_dir(base, parts[:-1], create=True) as parent:
            fd = os.open(
                parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent
            )
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise FileTransferError(f"{label} is not a regular file", "choose another path")
                os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
    except OSError as exc:
        raise _fail(label, exc, "write") from exc
    finally:
        os.close(base)


def read_file_in(root: str, relative: str, *, max_bytes: int, label: str) -> bytes:
    """Read ``root/relative`` without following symlinks, up to ``max_bytes``.

    Raises:
        FileTransferError: missing, a symlink, not a regular file, or larger than ``max_bytes``.
    """
    parts = relative.split("/")
    try:
        base = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _fail(label, exc, "open scratch for") from exc
    try:
        with _open_dir(base, parts[:-1], create=False) as parent:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
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
    except OSError as exc:
        raise _fail(label, exc, "read") from exc
    finally:
        os.close(base)


@dataclass
class ExportReport:
    """What an export copied and what it refused to copy."""

    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # symlinks, devices, over-limit files


def export_tree(source_root: str, dest: str, *, max_bytes: int) -> ExportReport:
    """Copy regular files and directories from a sandbox scratch into host directory ``dest``.

    Nothing is followed on either side; existing symlinks in ``dest`` are never written through.

    Raises:
        FileTransferError: ``dest`` cannot be created or is a symlink.
    """
    report = ExportReport()
    os.makedirs(dest, mode=0o755, exist_ok=True)
    try:
        src_fd = os.open(source_root, _DIR_FLAGS)
        dst_fd = os.open(dest, _DIR_FLAGS)
    except OSError as exc:
        raise _fail(dest, exc, "export to") from exc
    try:
        _copy_dir(src_fd, dst_fd, "", report, max_bytes)
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    return report


def _copy_dir(src_fd: int, dst_fd: int, prefix: str, report: ExportReport, max_bytes: int) -> None:
    for entry in sorted(os.listdir(src_fd)):
        label = f"{prefix}{entry}"
        info = os.stat(entry, dir_fd=src_fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            with contextlib.suppress(FileExistsError):
                os.mkdir(entry, 0o755, dir_fd=dst_fd)
            try:
                child_src = os.open(entry, _DIR_FLAGS, dir_fd=src_fd)
                child_dst = os.open(entry, _DIR_FLAGS, dir_fd=dst_fd)
            except OSError:
                report.skipped.append(f"{label}/ (not a plain directory on one side)")
                continue
            try:
                _copy_dir(child_src, child_dst, label + "/", report, max_bytes)
            finally:
                os.close(child_src)
                os.close(child_dst)
        elif stat.S_ISREG(info.st_mode):
            if report.bytes + info.st_size > max_bytes:
                report.skipped.append(f"{label} (export limit of {max_bytes} bytes reached)")
                continue
            try:
                src = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_fd)
            except OSError:
                report.skipped.append(f"{label} (could not be opened)")
                continue
            try:
                dst = os.open(
                    entry, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dst_fd
                )
            except OSError:
                os.close(src)
                report.skipped.append(f"{label} (destination is not a plain file)")
                continue
            try:
                copied = 0
                while copied < info.st_size and (chunk := os.read(src, min(1 << 20, info.st_size - copied))):
                    os.write(dst, chunk)
                    copied += len(chunk)
                report.files += 1
                report.bytes += copied
            finally:
                os.close(src)
                os.close(dst)
        else:
            report.skipped.append(f"{label} (not a regular file or directory)")
