"""The newc writer: byte layout, determinism, refusals."""

from __future__ import annotations

import stat

import pytest

from contain.runtime.microvm.cpio import CpioEntry, render_newc


def _members(archive: bytes) -> list[tuple[str, int, bytes]]:
    """A tiny reader written from buffer-format.rst, independent of the writer."""
    out, at = [], 0
    while True:
        header = archive[at : at + 110]
        assert header[:6] == b"070701"
        fields = [int(header[6 + 8 * i : 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = archive[at + 110 : at + 110 + namesize - 1].decode()
        at += 110 + namesize
        at += -at % 4
        data = archive[at : at + size]
        at += size
        at += -at % 4
        if name == "TRAILER!!!":
            return out
        out.append((name, mode, data))


def test_members_round_trip_through_an_independent_reader():
    entries = [
        CpioEntry("bin", stat.S_IFDIR | 0o755),
        CpioEntry("bin/busybox", stat.S_IFREG | 0o755, b"\x7fELF..."),
        CpioEntry("init", stat.S_IFREG | 0o755, b"#!/bin/busybox sh\n"),
        CpioEntry("bin/sh", stat.S_IFLNK | 0o777, b"busybox"),
    ]
    archive = render_newc(entries)
    assert len(archive) % 512 == 0
    assert _members(archive) == [(e.path, e.mode, e.data) for e in entries]


def test_the_same_entries_give_the_same_bytes_and_owners_and_times_are_zero():
    entries = [CpioEntry("a", stat.S_IFREG | 0o644, b"x")]
    archive = render_newc(entries)
    assert archive == render_newc(entries)
    header = archive[:110]
    uid, gid, mtime = (int(header[6 + 8 * i : 14 + 8 * i], 16) for i in (2, 3, 5))
    assert (uid, gid, mtime) == (0, 0, 0)


@pytest.mark.parametrize("path", ["/abs", "a/../b", "", "x" * 5000])
def test_names_the_kernel_would_misplace_are_refused(path):
    with pytest.raises(ValueError, match="bad cpio member name"):
        CpioEntry(path, stat.S_IFREG | 0o644)


def test_devices_and_duplicate_members_are_refused():
    with pytest.raises(ValueError, match="only files, directories and symlinks"):
        CpioEntry("dev/sda", stat.S_IFBLK | 0o600)
    with pytest.raises(ValueError, match="appears twice"):
        render_newc([CpioEntry("a", stat.S_IFREG), CpioEntry("a", stat.S_IFREG)])
