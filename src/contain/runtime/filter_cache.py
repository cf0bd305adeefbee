"""The compiled seccomp filter, kept on disk beside the supervisor so a new process need not rebuild it.

Compiling the filter means importing ``contain.runtime.seccomp`` (the rule table, ctypes
bindings) and 121 libseccomp calls: several milliseconds that every ``contain run`` would pay
for the same bytes. The program is a pure function of the rule table and the compiler (the
sources in ``KEY_SOURCES``: ``seccomp_rules.py`` holds the table, ``seccomp.py`` turns it into
BPF), the architecture and the libseccomp build that compiles it, so it is stored under a key made
of exactly those. A unit test checks that every contain module ``seccomp.py`` imports is a key
source: a table moved to a new module must not leave the key blind to it (it once was: the key
hashed ``seccomp.py`` only after the table had moved to ``seccomp_rules.py``, so an edited table
kept the old compiled filter). The key is computed once per process.

Trust is the supervisor binary's: the file must be a regular file (not a symlink) owned by this user
or root, writable by nobody else, in the directory ``ensure_supervisor_binary`` already checked. A
file that fails a check, or is not a whole number of BPF instructions, is ignored and rebuilt.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
from pathlib import Path

from contain.trusted_file import read_trusted

__all__ = ["KEY_SOURCES", "filter_for"]

# Every source file the compiled program depends on (beside arch and libseccomp).
KEY_SOURCES: tuple[Path, ...] = (
    Path(__file__).with_name("seccomp_rules.py"),  # SECCOMP_RULES, BAD_ARCH_ACTION, the arch table
    Path(__file__).with_name("seccomp.py"),  # plan_filter / compile_filter: how rows become BPF
)
_MAX_BYTES = 64 * 1024  # far above any filter the table makes; the pipe to bwrap holds less
_INSTRUCTION_BYTES = 8


def filter_for(*, arch: str, libseccomp_path: str | None, cache_dir: Path) -> bytes:
    """The BPF program for ``arch``: from ``cache_dir`` when a trusted copy exists, else compiled
    (``contain.runtime.seccomp.compile_filter``) and stored.

    Raises:
        UnsupportedHost: as ``compile_filter`` (only when it has to compile).
    """
    key = _key(arch, libseccomp_path)
    return _load_or_compile(cache_dir / f"seccomp-{arch}-{key}.bpf", arch, libseccomp_path)


@functools.cache
def _key(arch: str, libseccomp_path: str | None) -> str:
    digest = hashlib.sha256()
    for source in KEY_SOURCES:
        content = source.read_bytes()
        digest.update(f"{source.name}\0{len(content)}\0".encode() + content)
    digest.update(f"\0{arch}\0{libseccomp_path}".encode())
    if libseccomp_path is not None:
        with contextlib.suppress(OSError):  # gone: the key still differs, and compiling will say why
            info = os.stat(libseccomp_path)
            digest.update(f"\0{info.st_ino}\0{info.st_size}\0{info.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=8)
def _load_or_compile(path: Path, arch: str, libseccomp_path: str | None) -> bytes:
    cached = _read_trusted(path)
    if cached is not None:
        return cached
    from contain.runtime.seccomp import compile_filter

    bpf = compile_filter(arch=arch, libseccomp_path=libseccomp_path)
    _store(path, bpf)
    return bpf


def _read_trusted(path: Path) -> bytes | None:
    data = read_trusted(path, max_bytes=_MAX_BYTES, forbidden_modes=stat.S_IWGRP | stat.S_IWOTH, root_may_own=True)
    if not data or len(data) % _INSTRUCTION_BYTES:
        return None  # empty, or not whole instructions
    return data


def _store(path: Path, bpf: bytes) -> None:
    """Write atomically; a failure only means the next process compiles again."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, bpf)
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
