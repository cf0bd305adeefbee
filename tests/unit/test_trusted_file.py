"""read_trusted: a cache file is used only when it is a regular file this user owns, without the
forbidden mode bits and within the size; anything else reads as absent."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from contain.trusted_file import read_trusted

STRICT = {"max_bytes": 64, "forbidden_modes": stat.S_IWGRP | stat.S_IWOTH, "root_may_own": False}


def _file(tmp_path: Path, data: bytes = b"cached", mode: int = 0o600) -> Path:
    path = tmp_path / "cache.bin"
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_a_private_regular_file_within_the_size_is_read_whole(tmp_path):
    assert read_trusted(_file(tmp_path), **STRICT) == b"cached"


def test_a_missing_file_reads_as_absent(tmp_path):
    assert read_trusted(tmp_path / "nothing", **STRICT) is None


def test_a_group_or_world_writable_file_reads_as_absent(tmp_path):
    assert read_trusted(_file(tmp_path, mode=0o620), **STRICT) is None
    assert read_trusted(_file(tmp_path, mode=0o602), **STRICT) is None


def test_a_file_larger_than_expected_reads_as_absent(tmp_path):
    assert read_trusted(_file(tmp_path, b"x" * 65), **STRICT) is None
    assert read_trusted(_file(tmp_path, b"x" * 64), **STRICT) == b"x" * 64


def test_a_symlink_is_never_followed_even_to_a_trusted_file(tmp_path):
    target = _file(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_trusted(link, **STRICT) is None


def test_a_directory_or_fifo_reads_as_absent(tmp_path):
    assert read_trusted(tmp_path, **STRICT) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a writer, so opening the FIFO cannot block
    try:
        assert read_trusted(fifo, **STRICT) is None
    finally:
        os.close(fd)


def test_a_file_owned_by_someone_else_reads_as_absent(tmp_path):
    path = _file(tmp_path)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)  # nobody
        assert read_trusted(path, **STRICT) is None
        assert read_trusted(path, **{**STRICT, "root_may_own": True}) is None
        os.chown(path, 0, 0)
        assert read_trusted(path, **{**STRICT, "root_may_own": True}) == b"cached"
    else:
        assert read_trusted(path, **STRICT) == b"cached"  # the owner is this user: trusted
