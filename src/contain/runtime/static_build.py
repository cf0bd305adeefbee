"""Compile a shipped C program (once) into a static binary in a cache directory, and trust it only
after ownership and mode checks.

Two programs use this: the in-sandbox supervisor (``supervisor_build``, pid 1 of every process and
container sandbox) and the microVM guest agent (``microvm.agent_build``, pid 1 of every guest).
Whoever can replace either cached binary controls every sandbox of that kind, so what this module
enforces is the same for both:

- the binary's name carries ``source_digest(cflags, source, headers)``, so an edited source, an
  edited shared header (``supervisor/contain-exec.h``, included by both programs) or changed flags
  never reuse a stale build (the caller names the file; see ``StaticProgram.binary_prefix``);
  the headers are written beside the source for the compile, nothing is read from elsewhere;
- it is compiled to a temporary name inside the cache directory (same filesystem) and renamed into
  place with ``os.replace``: a concurrent builder sees either no file or a complete one;
- before use, the cache directory must be a real directory (a symlink is refused) owned by the
  current user or root and not group/world writable, and the binary a regular file owned by the
  current user with mode 0755 exactly. Anything else is refused (``SandboxStartError``), never
  trusted and never silently rebuilt;
- a cache directory this module creates gets mode 0755 explicitly, not whatever the umask leaves:
  the launcher may run bwrap as another uid, which must be able to reach the binary;
- a compiler that is missing, or that cannot link a static binary (``STATIC_LIBC_MISSING`` rows),
  is ``UnsupportedHost`` with the package to install; any other compile failure is our bug and is
  ``SandboxStartError``.

What it does not check: the ancestors of the cache directory (a writable parent could rename the
directory away; keep the cache under a directory only you can write, as the defaults are), the
compiler itself, or the binary's content after it was built (the checks are owner and mode, not a
hash of the file). Callers cache the result per process; this module keeps no state.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from contain.errors import SandboxStartError, UnsupportedHost

__all__ = [
    "COMPILERS",
    "COMPILER_FIX",
    "STATIC_LIBC_MISSING",
    "MissingLibcMarker",
    "StaticBuild",
    "StaticProgram",
    "compile_failure",
    "ensure_static_binary",
    "source_digest",
]

# Tried in this order; the first one on PATH is used.
COMPILERS: tuple[str, ...] = ("cc", "gcc", "clang")
COMPILER_FIX = "apt-get install gcc libc6-dev, or run `make setup`"
# A cold compile of either program takes about a second; 120 s allows for a loaded 2-core host.
_COMPILE_TIMEOUT_S = 120
# The last characters of the compiler's stderr that go into the error (a link error's tail says it).
_STDERR_TAIL_CHARS = 800


@dataclass(frozen=True)
class MissingLibcMarker:
    """One compiler message that means the host cannot build static binaries (not our bug)."""

    text: str
    why: str


STATIC_LIBC_MISSING: tuple[MissingLibcMarker, ...] = (
    MissingLibcMarker("cannot find -lc", "ld found no libc.a: libc6-dev (or the static libc) is not installed"),
    MissingLibcMarker("crt1.o", "the C start-up objects are missing: libc6-dev is not installed"),
    MissingLibcMarker("No such file", "a libc header or object is missing: libc6-dev is not installed"),
)


@dataclass(frozen=True)
class StaticProgram:
    """What to build: one C source file compiled with fixed flags.

    ``label`` names the program in every message ("sandbox supervisor", "guest agent").
    """

    label: str
    source_name: str
    binary_prefix: str
    cflags: tuple[str, ...]


class StaticBuild(NamedTuple):
    """Where the binary is and whether this call compiled it."""

    path: Path
    built_now: bool


def source_digest(cflags: tuple[str, ...], source: bytes, headers: Mapping[str, bytes] | None = None) -> str:
    """First 16 hex digits of sha256 over the flags, the headers and the source: the binary's name suffix.

    The flags are NUL-separated and end with two NULs; each header (by name, sorted) is its name,
    a NUL, its length as 8 big-endian bytes and its content, before the source. So no flag list,
    header set and source can be re-split into another triple with the same digest, and with no
    headers the digest is what it was before headers existed.
    """
    import hashlib

    digest = hashlib.sha256()
    digest.update("\0".join(cflags).encode() + b"\0\0")
    for name in sorted(headers or {}):
        content = (headers or {})[name]
        digest.update(name.encode() + b"\0" + len(content).to_bytes(8, "big") + content)
    digest.update(source)
    return digest.hexdigest()[:16]


def ensure_static_binary(
    program: StaticProgram,
    *,
    cache_dir: Path,
    target: Path,
    read_source: Callable[[], bytes],
    read_headers: Callable[[], Mapping[str, bytes]] = dict,
) -> StaticBuild:
    """Return ``target`` once it is a trusted build of ``program``, compiling it if it is missing.

    Args:
        program: what to build, and its name in messages.
        cache_dir: absolute cache directory; created (0755) when missing, checked always.
        target: the binary's path inside ``cache_dir`` (named by ``source_digest``).
        read_source: returns the C source; called only when a build is needed.
        read_headers: returns the headers the source includes by plain name (``#include "x.h"``),
            written beside it for the compile; the caller hashed them into ``target``'s name.

    Returns:
        ``target`` and whether this call compiled it.

    Raises:
        UnsupportedHost: no C compiler, or it cannot link a static binary.
        SandboxStartError: the cache directory or an existing binary fails the ownership and
            mode checks, or the build failed for another reason.
    """
    _prepare_cache_dir(program, cache_dir)
    built_now = False
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        _compile_into(program, cache_dir, target, read_source(), read_headers())
        built_now = True
        info = os.lstat(target)
    _check_binary(program, target, info)
    return StaticBuild(target, built_now)


def _prepare_cache_dir(program: StaticProgram, cache_dir: Path) -> None:
    try:
        try:
            cache_dir.mkdir(mode=0o755, parents=True)
        except FileExistsError:
            pass  # made earlier, or by a concurrent builder: checked below like any other
        else:
            os.chmod(cache_dir, 0o755)  # explicit, not left to the umask (see the module docstring)
        info = os.lstat(cache_dir)
    except OSError as exc:
        raise SandboxStartError(
            f"cannot create the cache directory {cache_dir} for the {program.label}: {exc.strerror}",
            "set CONTAIN_CACHE_DIR to a directory you own",
        ) from exc
    uid = os.geteuid()
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory (a symlink is refused)"
    elif info.st_uid not in (uid, 0):
        problem = f"is owned by uid {info.st_uid}, not by you ({uid}) or root"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"is group or world writable (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return
    raise SandboxStartError(
        f"cache directory {cache_dir} {problem}: someone else could swap the {program.label}",
        f"run `chmod go-w {cache_dir}` if it is yours, or set CONTAIN_CACHE_DIR elsewhere",
    )


def _check_binary(program: StaticProgram, target: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif info.st_uid != os.geteuid():
        problem = f"is owned by uid {info.st_uid}, not by you ({os.geteuid()})"
    elif stat.S_IMODE(info.st_mode) != 0o755:
        problem = f"has mode {stat.S_IMODE(info.st_mode):o}, not 755"
    else:
        return
    raise SandboxStartError(
        f"{program.label} binary {target} {problem}: it may have been swapped",
        f"delete {target}; contain rebuilds it the next time it is needed",
    )


def _find_compiler(program: StaticProgram) -> str:
    import shutil  # build path only; sandbox start-up stays lean

    for name in COMPILERS:
        found = shutil.which(name)
        if found:
            return found
    raise UnsupportedHost(f"no C compiler ({', '.join(COMPILERS)}) to build the {program.label}", COMPILER_FIX)


def _compile_into(
    program: StaticProgram, cache_dir: Path, target: Path, source: bytes, headers: Mapping[str, bytes]
) -> None:
    import tempfile  # build path only

    compiler = _find_compiler(program)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{program.binary_prefix}", dir=cache_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with tempfile.TemporaryDirectory(prefix=f"{program.binary_prefix}src-") as src_dir:
            source_path = Path(src_dir) / program.source_name
            source_path.write_bytes(source)
            for name, content in headers.items():
                if "/" in name or name in ("", ".", "..", program.source_name):
                    raise ValueError(f"header name {name!r} is not a plain file name")
                (Path(src_dir) / name).write_bytes(content)
            try:
                done = subprocess.run(
                    [compiler, *program.cflags, "-o", str(tmp), str(source_path)],
                    capture_output=True,
                    text=True,
                    timeout=_COMPILE_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxStartError(
                    f"could not run {compiler} to build the {program.label}: {exc}", COMPILER_FIX
                ) from exc
        if done.returncode != 0:
            raise compile_failure(program, compiler, done.stderr)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic; a concurrent builder's identical file is fine
    finally:
        tmp.unlink(missing_ok=True)


def compile_failure(program: StaticProgram, compiler: str, stderr: str) -> UnsupportedHost | SandboxStartError:
    """The error for a compiler that exited non-zero: ``UnsupportedHost`` when its stderr carries a
    ``STATIC_LIBC_MISSING`` marker (the host lacks the static libc), else ``SandboxStartError``."""
    tail = stderr.strip()[-_STDERR_TAIL_CHARS:]
    if any(marker.text in stderr for marker in STATIC_LIBC_MISSING):
        return UnsupportedHost(f"{compiler} cannot build a static binary for the {program.label}: {tail}", COMPILER_FIX)
    return SandboxStartError(
        f"building the {program.label} with {compiler} failed: {tail}",
        "report this with the compiler output above",
    )
