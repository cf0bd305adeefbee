"""The host half of a guest export: check each entry the guest announces, write it through descriptors.

The guest agent walks the tree and streams ENTRY frames (docs/guest-agent-protocol.md, "Files");
``GuestSandbox.export`` feeds them to ``ExportWalk`` one by one. The guest may be hostile, so the
walk trusts nothing it says:

- every path is a normalised relative path (no empty, ``.`` or ``..`` component) within the depth
  bound, and its parent is a directory announced earlier on the current walk path (depth-first
  order), so an entry can only land below the destination, where its directory was made;
- the bytes of every announced file count against the byte budget, copied or not; a guest that
  announces past it breaks the rules (``BrokenRule``: the caller then loses the channel);
- skip reasons are codes the host turns into its own text (``SKIP_REASONS``): no guest text
  reaches the report;
- on the host, directories are made and opened with ``O_NOFOLLOW`` under the anchored
  destination, files are created with ``O_NOFOLLOW`` and written only when they are regular files:
  a symlink in the destination is never followed (as ``files.export_tree``).

Does not bound the number of entries (the caller counts ENTRY frames) or read the wire.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator

from contain.runtime.files import ExportReport
from contain.runtime.microvm.guest_channel import MsgType, number, parse_fields

__all__ = ["SKIP_REASONS", "BrokenRule", "ExportWalk"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# What each skip code of the agent means, in the words files.export_tree uses.
SKIP_REASONS = {
    "type": "not a regular file or directory",
    "bytes": "export limit of {max_bytes} bytes reached",
    "open": "could not be opened",
}


def _make_dir(parent_fd: int, name: str, path: str, report: ExportReport) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        report.skip(f"{path}/ (not a plain directory on one side)")
        return -1
    report.dirs += 1
    return child


class BrokenRule(Exception):
    """The guest's export stream broke a rule the host checks (the channel is then lost)."""


class ExportWalk:
    """The host half of an export: checks each entry the guest announces and writes it under the
    destination through ``O_NOFOLLOW`` descriptors, like ``files._copy_tree``."""

    def __init__(self, dst_fd: int, *, max_bytes: int, max_depth: int) -> None:
        self.stack: list[tuple[str, int]] = [("", dst_fd)]  # (relative path, host dir fd or -1: not copied)
        self.report = ExportReport()
        self.too_deep: list[str] = []
        self.announced = 0  # bytes of every file the guest announced, copied or not
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    def entry(self, body: bytes, chunks: Callable[[int], Iterator[bytes]]) -> None:
        """Check and apply one ENTRY (``chunks(size)`` yields a file's data).

        Raises:
            BrokenRule: a path out of order or not normalised, a size past the limit, an unknown kind.
        """
        fields = parse_fields(MsgType.ENTRY, body, frozenset({"kind", "path"}), frozenset({"size", "reason"}))
        kind, path = fields["kind"], fields["path"]
        parts = path.split("/")
        if any(part in ("", ".", "..") for part in parts) or len(parts) > self.max_depth:
            raise BrokenRule(f"the guest sent export path {path[:100]!r}: not normalised or too deep")
        parent = "/".join(parts[:-1])
        while len(self.stack) > 1 and self.stack[-1][0] != parent:
            _, fd = self.stack.pop()
            if fd >= 0:
                os.close(fd)
        if self.stack[-1][0] != parent:
            raise BrokenRule(f"the guest sent export entry {path[:100]!r} outside the walk order")
        parent_fd = self.stack[-1][1]
        if kind == "dir" and fields.keys() == {"kind", "path"}:
            child = _make_dir(parent_fd, parts[-1], path, self.report) if parent_fd >= 0 else -1
            self.stack.append((path, child))
            if child >= 0 and len(parts) >= self.max_depth:
                self.too_deep.append(path)
        elif kind == "file" and fields.keys() == {"kind", "path", "size"}:
            size = number("ENTRY", "size", fields["size"])
            self.announced += size
            if self.announced > self.max_bytes:
                raise BrokenRule(f"the guest exported {path[:100]!r} past the {self.max_bytes}-byte limit")
            self._receive_file(parent_fd, parts[-1], path, chunks(size))
        elif kind == "skip" and fields.keys() == {"kind", "path", "reason"} and fields["reason"] in SKIP_REASONS:
            if parent_fd >= 0:
                self.report.skip(f"{path} ({SKIP_REASONS[fields['reason']].format(max_bytes=self.max_bytes)})")
        else:
            raise BrokenRule(f"the guest sent a malformed export entry (kind {kind[:20]!r})")

    def _receive_file(self, parent_fd: int, name: str, path: str, data: Iterator[bytes]) -> None:
        fd = -1
        if parent_fd >= 0:
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
                fd = os.open(name, flags, 0o644, dir_fd=parent_fd)
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    fd = -1
            except OSError:
                fd = -1
            if fd < 0:
                self.report.skip(f"{path} (destination is not a plain file)")
        copied = 0
        try:
            for chunk in data:  # consumed whole even when not written: it is on the wire
                copied += len(chunk)
                view = memoryview(chunk)
                try:
                    while fd >= 0 and view:
                        view = view[os.write(fd, view) :]
                except OSError as exc:  # ENOSPC, EDQUOT...: the rest of the stream must still be read
                    os.close(fd)
                    fd = -1
                    self.report.skip(f"{path} (could not be written: {exc.strerror})")
        finally:
            if fd >= 0:
                os.close(fd)
        if fd >= 0:
            self.report.files += 1
            self.report.bytes += copied

    def close(self) -> None:
        for _, fd in self.stack:
            if fd >= 0:
                os.close(fd)
        self.stack = []

    def finish(self) -> ExportReport:
        for relative in self.too_deep:
            self.report.skip(f"{relative}/ (deeper than {self.max_depth} levels: its content was not copied)")
        return self.report
