"""A deterministic ``newc`` cpio writer: the initramfs format the kernel unpacks at boot.

Format: Documentation/driver-api/early-userspace/buffer-format.rst. Each member is a 110-byte
ASCII header (magic ``070701`` and thirteen 8-digit hex fields), the NUL-terminated name, padding
to 4 bytes, the data, padding to 4 bytes; the archive ends with a ``TRAILER!!!`` member.

Deterministic on purpose: every member is owned by 0:0 with mtime 0, inode numbers count up from
1 in the order given, so the same entries always give the same bytes (and the same content hash
in the cache). Pure: no file is read here; callers pass the bytes.

What it does not do: hard links (every member has nlink 1, or 2 for directories), device nodes
(the guest's /init makes those on devtmpfs), or compression (the caller may gzip the result).
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["CpioEntry", "render_newc"]

_MAGIC = b"070701"
_TRAILER = "TRAILER!!!"
_MAX_NAME = 4095  # PATH_MAX - 1: the kernel refuses longer names


@dataclass(frozen=True)
class CpioEntry:
    """One member: ``path`` relative to the archive root (no leading /), its mode (with the
    file-type bits: ``stat.S_IFREG | 0o755``), and for regular files and symlinks the data (a
    symlink's data is its target)."""

    path: str
    mode: int
    data: bytes = b""

    def __post_init__(self) -> None:
        if not self.path or self.path.startswith("/") or ".." in self.path.split("/") or len(self.path) > _MAX_NAME:
            raise ValueError(f"bad cpio member name {self.path!r}")
        kind = stat.S_IFMT(self.mode)
        if kind not in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK):
            raise ValueError(f"cpio member {self.path!r}: only files, directories and symlinks")
        if kind == stat.S_IFDIR and self.data:
            raise ValueError(f"cpio directory {self.path!r} cannot carry data")


def _pad(length: int) -> bytes:
    return b"\0" * (-length % 4)


def _member(ino: int, mode: int, nlink: int, name: str, data: bytes) -> bytes:
    encoded = name.encode() + b"\0"
    # ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor, namesize, check
    fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
    header = _MAGIC + b"".join(b"%08X" % value for value in fields)
    head = header + encoded
    return head + _pad(len(head)) + data + _pad(len(data))


def render_newc(entries: Iterable[CpioEntry]) -> bytes:
    """The archive holding ``entries`` in the order given, padded to a 512-byte multiple.

    Raises:
        ValueError: two members share a path.
    """
    out = bytearray()
    seen: set[str] = set()
    for ino, entry in enumerate(entries, start=1):
        if entry.path in seen:
            raise ValueError(f"cpio member {entry.path!r} appears twice")
        seen.add(entry.path)
        nlink = 2 if stat.S_ISDIR(entry.mode) else 1
        out += _member(ino, entry.mode, nlink, entry.path, entry.data)
    out += _member(0, 0, 1, _TRAILER, b"")
    out += b"\0" * (-len(out) % 512)
    return bytes(out)
