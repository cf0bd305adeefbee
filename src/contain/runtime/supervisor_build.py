"""Build (once) and locate the static in-sandbox supervisor binary.

The supervisor (``runtime/supervisor/contain-supervisor.c``) is bind-mounted read-only into every sandbox as
``/.contain/supervisor`` and runs there as pid 1, so whoever can replace the cached binary controls
every sandbox. The build and its checks are ``static_build``'s, shared with the microVM guest agent:

- the binary is named by the sha256 of the source, the header it shares with the guest agent
  (``supervisor/contain-exec.h``, ``shared_exec_headers``) and the compiler flags, so an edited
  source or header never reuses a stale build;
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
import os
from pathlib import Path

from contain.runtime.static_build import StaticProgram, ensure_static_binary, source_digest

__all__ = [
    "SHARED_EXEC_HEADER",
    "SUPERVISOR_CFLAGS",
    "ensure_supervisor_binary",
    "expected_supervisor_path",
    "shared_exec_headers",
    "supervisor_cache_dir",
    "supervisor_source",
]

# -static: the supervisor runs in a root that may hold no libc at all. -Werror: a warning in a pid-1
# program that parses input is a bug, not noise.
SUPERVISOR_CFLAGS: tuple[str, ...] = ("-O2", "-static", "-std=gnu11", "-Wall", "-Wextra", "-Werror")
_SOURCE_PACKAGE = "contain.runtime.supervisor"
_PROGRAM = StaticProgram(
    label="sandbox supervisor",
    source_name="contain-supervisor.c",
    binary_prefix="contain-supervisor-",
    cflags=SUPERVISOR_CFLAGS,
)


SHARED_EXEC_HEADER = "contain-exec.h"  # included by the supervisor and the guest agent


def shared_exec_headers() -> dict[str, bytes]:
    """The header both static programs include (rlimit parsing, item splitting, the PATH search)."""
    beside = Path(__file__).parent / "supervisor" / SHARED_EXEC_HEADER
    if beside.is_file():
        return {SHARED_EXEC_HEADER: beside.read_bytes()}
    import importlib.resources

    return {SHARED_EXEC_HEADER: importlib.resources.files(_SOURCE_PACKAGE).joinpath(SHARED_EXEC_HEADER).read_bytes()}


def supervisor_source() -> bytes:
    """The supervisor's C source, as shipped in the package."""
    beside = Path(__file__).parent / "supervisor" / _PROGRAM.source_name
    if beside.is_file():  # an installed or editable package: skip importing importlib.resources
        return beside.read_bytes()
    import importlib.resources

    return importlib.resources.files(_SOURCE_PACKAGE).joinpath(_PROGRAM.source_name).read_bytes()


@functools.cache
def _build_digest() -> str:
    """``source_digest`` of the flags, the shared header and the source; hashed once per process."""
    return source_digest(SUPERVISOR_CFLAGS, supervisor_source(), shared_exec_headers())


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
    return cache_dir / f"{_PROGRAM.binary_prefix}{_build_digest()}"


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
    target = _supervisor_path_in(cache_dir)
    return ensure_static_binary(
        _PROGRAM, cache_dir=cache_dir, target=target, read_source=supervisor_source, read_headers=shared_exec_headers
    ).path
