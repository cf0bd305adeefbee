"""Build (once) and locate the static in-sandbox supervisor binary.

The supervisor (``runtime/supervisor/contain-supervisor.c``) is bind-mounted read-only into every sandbox as
``/.contain/supervisor`` and runs there as pid 1, so whoever can replace the cached binary controls
every sandbox. What this module enforces:

- the binary is named by the sha256 of the source and the compiler flags, so an edited source
  never reuses a stale build;
- it is compiled to a temporary name in the cache directory and renamed into place (atomic: a
  concurrent builder sees either no file or a complete one);
- before use, the cache directory must be a real directory (not a symlink) owned by the current
  user or root and not group/world writable, and the binary a regular file owned by the current
  user with mode 0755 exactly; anything else is refused (``SandboxStartError``) rather than
  trusted or silently rebuilt.

What it does not check: the ancestors of the cache directory (a writable parent could rename
the directory away; keep the cache under a directory only you can write, which the defaults
are), or that the compiler itself is trustworthy. The result is cached per cache directory for
the life of the process: after the first call, a later call costs one environment lookup.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import subprocess
from pathlib import Path

from contain.errors import SandboxStartError, UnsupportedHost

__all__ = [
    "SUPERVISOR_CFLAGS",
    "ensure_supervisor_binary",
    "expected_supervisor_path",
    "supervisor_cache_dir",
    "supervisor_source",
]

# -static: the supervisor runs in a root that may hold no libc at all. -Werror: a warning in a pid-1
# program that parses input is a bug, not noise.
SUPERVISOR_CFLAGS: tuple[str, ...] = ("-O2", "-static", "-std=gnu11", "-Wall", "-Wextra", "-Werror")
_SOURCE_PACKAGE = "contain.runtime.supervisor"
_SOURCE_NAME = "contain-supervisor.c"
_COMPILERS = ("cc", "gcc", "clang")
_COMPILER_FIX = "apt-get install gcc libc6-dev, or run `make setup`"
_COMPILE_TIMEOUT_S = 120


def supervisor_source() -> bytes:
    """The supervisor's C source, as shipped in the package."""
    beside = Path(__file__).parent / "supervisor" / _SOURCE_NAME
    if beside.is_file():  # an installed or editable package: skip importing importlib.resources
        return beside.read_bytes()
    import importlib.resources

    return importlib.resources.files(_SOURCE_PACKAGE).joinpath(_SOURCE_NAME).read_bytes()


@functools.cache
def _build_digest() -> str:
    """First 16 hex digits of sha256(flags, source); hashed once per process."""
    digest = hashlib.sha256()
    digest.update("\0".join(SUPERVISOR_CFLAGS).encode() + b"\0\0")
    digest.update(supervisor_source())
    return digest.hexdigest()[:16]


def supervisor_cache_dir() -> Path:
    """Where built supervisors live: $CONTAIN_CACHE_DIR, else /var/cache/contain for root, else
    $XDG_CACHE_HOME/contain or ~/.cache/contain."""
    explicit = os.environ.get("CONTAIN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return Path("/var/cache/contain")
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "contain"


def expected_supervisor_path() -> Path:
    """Where ``ensure_supervisor_binary`` puts (or finds) the supervisor for this source; builds nothing.

    For ``contain doctor``: whether the file exists, and its owner and mode, tell whether a
    sandbox start will have to compile it first.
    """
    return _supervisor_path_in(supervisor_cache_dir().absolute())


def _supervisor_path_in(cache_dir: Path) -> Path:
    return cache_dir / f"contain-supervisor-{_build_digest()}"


def ensure_supervisor_binary() -> Path:
    """Return the path of a trusted, built supervisor binary, compiling it if needed.

    Returns:
        An absolute path, ``<cache dir>/contain-supervisor-<digest>``.

    Raises:
        UnsupportedHost: no C compiler, or it cannot link a static binary.
        SandboxStartError: the cache directory or an existing binary fails the ownership and
            mode checks, or the build failed for another reason.
    """
    return _ensure_in(supervisor_cache_dir().absolute())


@functools.cache
def _ensure_in(cache_dir: Path) -> Path:
    _prepare_cache_dir(cache_dir)
    target = _supervisor_path_in(cache_dir)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        _compile_into(cache_dir, target)
        info = os.lstat(target)
    _check_binary(target, info)
    return target


def _prepare_cache_dir(cache_dir: Path) -> None:
    try:
        if not os.path.lexists(cache_dir):
            cache_dir.mkdir(mode=0o755, parents=True)
            # Explicit, not left to the umask: the launcher may run bwrap as another uid, which
            # must be able to reach the binary to bind-mount it.
            os.chmod(cache_dir, 0o755)
        info = os.lstat(cache_dir)
    except OSError as exc:
        raise SandboxStartError(
            f"cannot create the supervisor cache directory {cache_dir}: {exc.strerror}",
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
        f"supervisor cache directory {cache_dir} {problem}: someone else could swap the supervisor",
        f"run `chmod go-w {cache_dir}` if it is yours, or set CONTAIN_CACHE_DIR elsewhere",
    )


def _check_binary(target: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif info.st_uid != os.geteuid():
        problem = f"is owned by uid {info.st_uid}, not by you ({os.geteuid()})"
    elif stat.S_IMODE(info.st_mode) != 0o755:
        problem = f"has mode {stat.S_IMODE(info.st_mode):o}, not 755"
    else:
        return
    raise SandboxStartError(
        f"supervisor binary {target} {problem}: it may have been swapped",
        f"delete {target}; contain rebuilds it on the next start",
    )


def _find_compiler() -> str:
    import shutil  # build path only; sandbox start-up stays lean

    for name in _COMPILERS:
        found = shutil.which(name)
        if found:
            return found
    raise UnsupportedHost("no C compiler (cc, gcc, clang) to build the sandbox supervisor", _COMPILER_FIX)


def _compile_into(cache_dir: Path, target: Path) -> None:
    import tempfile  # build path only

    compiler = _find_compiler()
    fd, tmp_name = tempfile.mkstemp(prefix=".contain-supervisor-", dir=cache_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with tempfile.TemporaryDirectory(prefix="contain-supervisor-src-") as src_dir:
            source = Path(src_dir) / _SOURCE_NAME
            source.write_bytes(supervisor_source())
            try:
                done = subprocess.run(
                    [compiler, *SUPERVISOR_CFLAGS, "-o", str(tmp), str(source)],
                    capture_output=True,
                    text=True,
                    timeout=_COMPILE_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxStartError(
                    f"could not run {compiler} to build the sandbox supervisor: {exc}", _COMPILER_FIX
                ) from exc
        if done.returncode != 0:
            _raise_compile_failure(compiler, done.stderr)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic; a concurrent builder's identical file is fine
    finally:
        tmp.unlink(missing_ok=True)


def _raise_compile_failure(compiler: str, stderr: str) -> None:
    tail = stderr.strip()[-800:]
    # A missing static libc shows up as a link error; everything else is our bug.
    if "cannot find -lc" in stderr or "crt1.o" in stderr or "No such file" in stderr:
        raise UnsupportedHost(
            f"{compiler} cannot build a static binary for the sandbox supervisor: {tail}", _COMPILER_FIX
        )
    raise SandboxStartError(
        f"building the sandbox supervisor with {compiler} failed: {tail}",
        "report this with the compiler output above",
    )
