"""The guest's read-only userland: a squashfs image of the host's interpreters, tools and libraries.

What is in it (``USERLAND_PROGRAMS`` and ``USERLAND_TREES``, one row per entry with its reason):
python3 and its standard library (without ``USERLAND_EXCLUDED`` parts such as the test suite,
IDLE, tkinter and ensurepip), a POSIX shell and bash, coreutils and the few usual tools listed,
every shared library those programs and python's extension modules load (their ``ldd`` closure,
with the dynamic loader), the host's CA bundle and loader cache, and a generated ``/etc``
(``passwd``/``group`` with root, the workload user 1000 and nobody; ``hosts``; ``nsswitch.conf``).
What is NOT in it: anything else of the host: no /home, /root, /var, /etc secrets (shadow, ssh
keys, machine-id), no site-packages (``dist-packages`` is left out: a task that needs a package
brings it into scratch), no compilers. A program the table does not list is not there.

The image is squashfs (read-only by format; the guest mounts it ``ro`` and QEMU opens the file
``readonly=on``), built by ``mksquashfs`` with every owner 0:0 and every timestamp 0 (so the same
inputs give the same bytes). Symlinks along a host path (``/bin -> usr/bin``, ``python3 ->
python3.11``) are recreated as symlinks, so the guest resolves names as the host does.

Cache key: the image is named by a hash of the ``stat`` (size, mtime, mode) of every seed path
(programs, trees walked to their files) and of every library directory: a package upgrade replaces
files by rename, which changes their directory's mtime, so an upgraded library gives a new key.
``plan_userland`` (pure: facts in, file list out) and the ``ldd`` closure run only when building.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from contain.errors import SandboxStartError, UnsupportedHost
from contain.runtime.microvm.artefacts import content_digest, ensure_artefact, guest_cache_dir

__all__ = [
    "GENERATED_ETC",
    "USERLAND_EXCLUDED",
    "USERLAND_PROGRAMS",
    "USERLAND_TREES",
    "Userland",
    "ensure_userland",
    "parse_ldd",
    "plan_userland",
]

_TOOL_TIMEOUT_S = 300
MKSQUASHFS = "mksquashfs"
# lz4: the guest decompresses every page it reads, in emulated instructions under TCG, and lz4 is
# the cheapest of the kernel's squashfs decompressors to run; the image is larger (29.5 MB here,
# about 18 MB with zstd). Not measured against zstd on this loaded host: the boot noise is larger
# than the difference could be (docs/microvm.md).
SQUASHFS_COMPRESSION = "lz4"
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
# Part of the cache key: bump it whenever this module changes what goes into the image (the key
# is otherwise made of the host files' stat, which a change here does not touch).
USERLAND_FORMAT = b"userland-v2"


_COREUTILS = (
    "env", "cat", "ls", "cp", "mv", "rm", "mkdir", "rmdir", "echo", "true", "false", "head", "tail",
    "wc", "sort", "uniq", "id", "sleep", "uname", "date", "chmod", "touch", "ln", "readlink",
    "dirname", "basename", "printf", "test", "stat", "tr", "cut", "tee", "pwd", "du", "df",
    "mktemp", "seq", "sha256sum", "md5sum", "base64", "whoami", "yes", "nproc", "timeout",
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    """A host path the userland holds, and why."""

    path: str
    why: str


USERLAND_PROGRAMS: tuple[Row, ...] = (
    Row("/usr/bin/python3", "the interpreter most agent tasks run"),
    Row("/bin/sh", "POSIX shell: scripts and subprocess(shell=True)"),
    Row("/bin/bash", "scripts that need bash"),
    *(Row(f"/usr/bin/{name}", "coreutils: the usual tools a script expects") for name in _COREUTILS),
    Row("/usr/bin/grep", "text search"),
    Row("/usr/bin/sed", "stream editing"),
    Row("/usr/bin/find", "file search"),
    Row("/usr/bin/xargs", "argument lists"),
    Row("/usr/bin/diff", "comparing files"),
    Row("/usr/bin/tar", "archives"),
    Row("/usr/bin/gzip", "compression"),
)
USERLAND_TREES: tuple[Row, ...] = (
    Row("/usr/lib/python3.11", "python's standard library and extension modules"),
    Row("/etc/python3.11", "Debian's sitecustomize, which the stdlib links to"),
    Row("/etc/ssl/certs/ca-certificates.crt", "CA bundle for TLS through the egress proxy"),
    Row("/etc/ld.so.cache", "the loader cache, so library lookups match the host's"),
)
# Never copied, with why: size and attack surface the agent tasks do not need.
USERLAND_EXCLUDED: tuple[Row, ...] = (
    Row("/usr/lib/python3.11/test", "CPython's own test suite (tens of MB)"),
    Row("/usr/lib/python3.11/idlelib", "the IDLE GUI"),
    Row("/usr/lib/python3.11/tkinter", "Tk GUI bindings (no display in the guest)"),
    Row("/usr/lib/python3.11/turtledemo", "GUI demos"),
    Row("/usr/lib/python3.11/ensurepip", "bundled pip wheels: installing packages is not the guest's job"),
    Row("/usr/lib/python3.11/lib2to3/tests", "lib2to3's test data"),
    Row("/usr/lib/python3.11/config-3.11-x86_64-linux-gnu", "static libpython and build files"),
)
GENERATED_ETC: Mapping[str, str] = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/work:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "etc/group": "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n",
    "etc/hosts": "127.0.0.1 localhost contain\n::1 localhost\n",
    "etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
}
_LDD_LINE = re.compile(r"(?:=>\s*)?(/[^\s]+)\s+\(0x[0-9a-f]+\)")


@dataclass(frozen=True)
class Userland:
    """A built userland image in the cache."""

    path: Path
    key: str


def parse_ldd(output: str) -> tuple[str, ...]:
    """The absolute library paths in ``ldd`` output (``libc.so.6 => /lib/.../libc.so.6 (0x...)``
    and the loader line), in order; ``linux-vdso`` and "not a dynamic executable" give none."""
    return tuple(match.group(1) for match in _LDD_LINE.finditer(output))


def _is_excluded(path: str) -> bool:
    return any(path == row.path or path.startswith(row.path + "/") for row in USERLAND_EXCLUDED)


def plan_userland(seed_files: Iterable[str], libraries: Iterable[str]) -> tuple[str, ...]:
    """Every host path the image holds (sorted, de-duplicated, exclusions applied).

    Args:
        seed_files: the programs and the files of the trees (already walked).
        libraries: their ``ldd`` closure.
    """
    return tuple(sorted({p for p in (*seed_files, *libraries) if not _is_excluded(p)}))


def _walk(root: str) -> list[str]:
    if not os.path.isdir(root) or os.path.islink(root):
        return [root] if os.path.lexists(root) else []
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not _is_excluded(os.path.join(directory, d)))
        found += [os.path.join(directory, f) for f in sorted(files)]
        # os.walk does not descend into symlinked dirs; list them as entries so they are recreated
        found += [os.path.join(directory, d) for d in dirs if os.path.islink(os.path.join(directory, d))]
    return found


def _seed_files() -> list[str]:
    missing = [row.path for row in USERLAND_PROGRAMS if not os.path.exists(row.path)]
    if missing:
        raise UnsupportedHost(
            f"the microVM userland needs host programs that are missing: {', '.join(missing)}",
            "install them (python3, bash, coreutils, grep, sed, findutils, diffutils, tar, gzip)",
        )
    files = [row.path for row in USERLAND_PROGRAMS]
    for row in USERLAND_TREES:
        files += _walk(row.path)
    return files


def _stat_key(paths: Iterable[str]) -> str:
    parts: list[bytes] = [USERLAND_FORMAT, SQUASHFS_COMPRESSION.encode()]
    parts += [f"{k}\0{v}".encode() for k, v in sorted(GENERATED_ETC.items())]
    for path in paths:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            parts.append(f"{path}\0missing".encode())
            continue
        parts.append(f"{path}\0{info.st_mode:o}\0{info.st_size}\0{info.st_mtime_ns}".encode())
    return content_digest(parts)


def _ldd_closure(files: Iterable[str]) -> set[str]:
    elves = sorted({os.path.realpath(f) for f in files if _is_elf(os.path.realpath(f))})
    libraries: set[str] = set()
    for chunk in range(0, len(elves), 64):
        try:
            done = subprocess.run(
                ["ldd", *elves[chunk : chunk + 64]],
                capture_output=True,
                text=True,
                timeout=_TOOL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise UnsupportedHost(f"cannot run ldd for the microVM userland: {exc}", "install libc-bin") from exc
        if "not found" in done.stdout:
            lines = [line.strip() for line in done.stdout.splitlines() if "not found" in line]
            raise SandboxStartError(f"ldd reports missing libraries: {lines[:5]}", "install the missing libraries")
        libraries.update(parse_ldd(done.stdout))
    return libraries


def _is_elf(path: str) -> bool:
    try:
        if os.path.islink(path) or not os.path.isfile(path):
            return False
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _copy_into(stage: Path, host_path: str) -> None:
    """Copy ``host_path`` into ``stage`` under the same name, recreating each symlink on the way."""
    current = "/"
    parts = [p for p in host_path.split("/") if p]
    for _depth in range(40):  # bounded: a symlink loop on the host cannot hang the build
        if not parts:
            return
        name = parts.pop(0)
        host = os.path.join(current, name)
        staged = stage / host.lstrip("/")
        if os.path.islink(host):
            target = os.readlink(host)
            if not os.path.lexists(staged):
                staged.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(target, staged)
            resolved = target if target.startswith("/") else os.path.join(current, target)
            parts = [p for p in os.path.normpath(resolved).split("/") if p] + parts
            current = "/"
            continue
        if parts:
            staged.mkdir(parents=True, exist_ok=True)
            current = host
            continue
        if os.path.isdir(host):
            staged.mkdir(parents=True, exist_ok=True)
        elif not os.path.lexists(staged):
            staged.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(host, staged)
        return
    raise SandboxStartError(f"more than 40 symlinks resolving {host_path}", "fix the host's links")


@functools.cache
def ensure_userland() -> Userland:
    """The userland image, built once per input key (see the module docstring).

    Raises:
        UnsupportedHost: a program is missing on the host, or mksquashfs is not installed.
        SandboxStartError: the build failed or the cache fails its checks.
    """
    seeds = _seed_files()
    key = _stat_key([*seeds, *LIBRARY_DIRS])

    def build(out: Path) -> None:
        files = plan_userland(seeds, _ldd_closure(seeds))
        with tempfile.TemporaryDirectory(prefix="contain-userland-") as tmp:
            stage = Path(tmp) / "root"
            stage.mkdir()
            for path in files:
                _copy_into(stage, path)
            for relative, text in GENERATED_ETC.items():
                (stage / relative).parent.mkdir(parents=True, exist_ok=True)
                (stage / relative).write_text(text)
            for directory in ("proc", "dev", "tmp", "work", "root", "etc", "run"):
                (stage / directory).mkdir(exist_ok=True)
            (stage / "etc" / "resolv.conf").write_text("")  # replaced per VM by /init (an overlay write)
            (stage / "etc" / "hostname").write_text("contain\n")
            _mksquashfs(stage, out)

    path, _ = ensure_artefact(guest_cache_dir(), f"userland-{key}.squashfs", build)
    return Userland(path=path, key=key)


def _mksquashfs(stage: Path, out: Path) -> None:
    if shutil.which(MKSQUASHFS) is None:
        raise UnsupportedHost(
            "mksquashfs is not installed (needed for microVM images)", "apt-get install squashfs-tools"
        )
    argv = [
        MKSQUASHFS, str(stage), str(out), "-noappend", "-quiet", "-no-progress", "-comp", SQUASHFS_COMPRESSION,
        "-all-root", "-no-xattrs", "-mkfs-time", "0", "-all-time", "0", "-processors", "2",
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxStartError(f"mksquashfs failed to run: {exc}", "check squashfs-tools") from exc
    if done.returncode != 0:
        raise SandboxStartError(f"mksquashfs failed: {done.stderr.strip()[-500:]}", "check the cache's free space")
    os.chmod(out, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
