"""Reading one layer's bytes once: decompress, hash what was read, bound what it expands to.

The layer is hashed *as it is unpacked* (``LayerReader``), not in a separate pass, so the digest
that is verified is the digest of exactly the bytes that were extracted: a file that changes
between a check and a use cannot slip different content in. The caller compares the digests after
the tar stream ends and discards the unpacked tree on a mismatch.

Enforces: gzip or uncompressed only (zstd, bzip2 and xz are refused with a clear error); the
uncompressed stream is capped (``max_plain_bytes``), so a gzip bomb stops at the cap; nothing but
NUL padding may follow the tar end-of-archive marker (a corrupt header must not silently end a
layer early). Does not: parse tar (``tarfile`` does) or decide anything about members.
"""

from __future__ import annotations

import enum
import hashlib
import zlib
from typing import IO

__all__ = ["Compression", "LayerReader", "StreamError", "sniff_compression"]

_CHUNK = 256 * 1024
_TAIL_KEEP = 256 * 1024  # tarfile's stream buffer (RECORDSIZE, 10 KiB) lags well behind this


class StreamError(Exception):
    """The layer's bytes are unusable: unsupported compression, corrupt gzip, over the cap."""


class Compression(enum.Enum):
    NONE = "none"
    GZIP = "gzip"
    DETECT = "detect"  # look at the magic bytes (docker-save layers, plain rootfs tarballs)


# Magic numbers: RFC 1952 (gzip), RFC 8878 (zstd), bzip2 and xz file formats.
_REFUSED_MAGIC = ((b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"))


def sniff_compression(head: bytes) -> Compression:
    """The compression of a stream from its first bytes; raises StreamError for refused ones."""
    if head.startswith(b"\x1f\x8b"):
        return Compression.GZIP
    for magic, name in _REFUSED_MAGIC:
        if head.startswith(magic):
            raise StreamError(f"{name}-compressed layers are not supported (only gzip and uncompressed tar)")
    return Compression.NONE


class LayerReader:
    """A ``read(n)`` source for ``tarfile`` stream mode over a raw layer, hashing both forms.

    ``raw_sha256`` covers the bytes as stored (the OCI descriptor digest), ``plain_sha256`` the
    uncompressed tar (the config's diff_id). Concatenated gzip members are supported.
    """

    def __init__(self, raw: IO[bytes], *, compression: Compression, max_plain_bytes: int) -> None:
        self._raw = raw
        self._max_plain = max_plain_bytes
        self.raw_hash = hashlib.sha256()
        self.plain_hash = hashlib.sha256()
        self.raw_bytes = 0
        self.plain_bytes = 0
        self._buffer = bytearray()
        self._tail = bytearray()  # the last plain bytes handed out, to check what follows the tar
        self._pending = b""  # raw bytes read but not yet decompressed
        self._raw_eof = False
        self._done = False
        if compression is Compression.DETECT:
            head = self._read_raw(_CHUNK)
            compression = sniff_compression(head)
            self._pending = head
        self._gzip = compression is Compression.GZIP
        self._inflater = zlib.decompressobj(wbits=31) if self._gzip else None
        self._member_started = False

    def _read_raw(self, size: int) -> bytes:
        chunk = self._raw.read(size)
        if not chunk:
            self._raw_eof = True
        self.raw_hash.update(chunk)
        self.raw_bytes += len(chunk)
        return chunk

    def _emit(self, data: bytes) -> None:
        self.plain_bytes += len(data)
        if self.plain_bytes > self._max_plain:
            raise StreamError(f"layer expands past {self._max_plain} bytes (decompression bomb or budget)")
        self.plain_hash.update(data)
        self._buffer += data

    def _fill(self) -> None:
        """Add at least one step of plain data to the buffer, or mark the end."""
        if not self._pending and not self._raw_eof:
            self._pending = self._read_raw(_CHUNK)
        if self._inflater is None:
            if not self._pending:
                self._done = True
            self._emit(self._pending)
            self._pending = b""
            return
        self._inflate()

    def _inflate(self) -> None:
        assert self._inflater is not None
        if not self._pending:
            if self._member_started and not self._inflater.eof:
                raise StreamError("gzip stream is truncated")
            self._done = True
            return
        self._member_started = True
        data = self._inflater.decompress(self._pending, _CHUNK)  # bounded output per step
        self._pending = self._inflater.unconsumed_tail
        if self._inflater.eof:
            rest = self._inflater.unused_data
            self._pending = rest + self._pending
            self._inflater = zlib.decompressobj(wbits=31)  # a concatenated gzip member may follow
            self._member_started = False
            if self._pending.strip(b"\x00") == b"" and self._raw_eof:
                self._pending = b""
        self._emit(data)

    def read(self, size: int = -1) -> bytes:
        try:
            while (size < 0 or len(self._buffer) < size) and not self._done:
                self._fill()
        except zlib.error as exc:
            raise StreamError(f"corrupt gzip data: {exc}") from exc
        count = len(self._buffer) if size < 0 else min(size, len(self._buffer))
        out = bytes(self._buffer[:count])
        del self._buffer[:count]
        self._tail += out
        if len(self._tail) > 2 * _TAIL_KEEP:
            del self._tail[: len(self._tail) - _TAIL_KEEP]
        return out

    def finish(self, *, tar_end_offset: int) -> None:
        """Read to the end; everything from ``tar_end_offset`` on must be NUL padding.

        Raises:
            StreamError: non-NUL data after the archive's last member (a corrupt or truncated
                header ended ``tarfile``'s iteration early), or the stream cannot be read.
        """
        handed_out = self.plain_bytes - len(self._buffer)
        start_in_tail = len(self._tail) - (handed_out - tar_end_offset)
        if start_in_tail < 0:
            raise StreamError("cannot check the end of the tar stream (internal buffer too small)")
        if bytes(self._tail[start_in_tail:]).strip(b"\x00"):
            raise StreamError("data after the last tar member is not padding (corrupt or cut header)")
        while True:
            chunk = self.read(_CHUNK)
            if not chunk:
                return
            if chunk.strip(b"\x00"):
                raise StreamError("data after the end of the tar archive is not padding")
