"""Build (once) and locate the static guest agent binary that becomes a microVM's pid 1.

The guest image (initramfs) embeds this binary; whoever can replace it controls every microVM
sandbox. The rules are the supervisor's (``supervisor_build``), applied to the agent's source:

- the binary is named by the sha256 of the source and the compiler flags, so an edited source is
  never served by a stale build, and the guest image (cached by content) changes with it;
- it is compiled to a temporary name in the cache directory and renamed into place (atomic);
- before use, the cache directory must be a real directory owned by the current user or root and
  not group/world writable, and the binary a regular file owned by the current user, mode 0755;
  anything else is refused (``SandboxStartError``), not trusted or silently rebuilt.

Does not check the compiler, or the ancestors of the cache directory (``supervisor_build`` says
why). Results are cached per cache directory for the life of the process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import subprocess
from pathlib import Path
from typing import NamedTuple

from contain.errors import SandboxStartError, UnsupportedHost
from contain.runtime.supervisor_build import supervisor_cache_dir

__all__ = [
    "GUEST_AGENT_CFLAGS",
    "AgentBuild",
    "ensure_guest_agent_binary",
    "expected_guest_agent_path",
    "guest_agent_source",
]

# -static: the guest's initramfs has no libc. -Werror: a warning in a pid-1 program that parses
# host input is a bug, not noise.
GUEST_AGENT_CFLAGS: tuple[str, ...] = ("-O2", "-static", "-std=gnu11", "-Wall", "-Wextra", "-Werror")
_SOURCE_NAME = "contain-guest-agent.c"
_BINARY_PREFIX = "contain-guest-agent-"
_COMPILERS = ("cc", "gcc", "clang")
_COMPILER_FIX = "apt-get install gcc libc6-dev, or run `make setup`"
_COMPILE_TIMEOUT_S = 120


class AgentBuild(NamedTuple):
    """Where the agent binary is and whether this call compiled it."""

    path: Path
    built_now: bool


def guest_agent_source() -> bytes:
    """The agent's C source, as shipped in the package."""
    return (Path(__file__).parent / "agent" / _SOURCE_NAME).read_bytes()


@functools.cache
def _digest() -> str:
    digest = hashlib.sha256()
    digest.update("\0".join(GUEST_AGENT_CFLAGS).encode() + b"\0\0")
    digest.update(guest_agent_source())
    return digest.hexdigest()[:16]


def expected_guest_agent_path() -> Path:
    """Where ``ensure_guest_agent_binary`` puts (or finds) the agent for this source; builds nothing."""
    return supervisor_cache_dir().absolute() / f"{_BINARY_PREFIX}{_digest()}"


def ensure_guest_agent_binary() -> AgentBuild:
    """Return a trusted, built agent binary, compiling it if needed.

    Returns:
        The binary's absolute path (``<cache dir>/contain-guest-agent-<digest>``) and whether it
        was compiled now.

    Raises:
        UnsupportedHost: no C compiler, or it cannot link a static binary.
        SandboxStartError: the cache directory or an existing binary fails the ownership and mode
            checks, or the build failed.
    """
    return _ensure_in(supervisor_cache_dir().absolute())


@functools.cache
def _ensure_in(cache_dir: Path) -> AgentBuild:
    _check_cache_dir(cache_dir)
    target = cache_dir / f"{_BINARY_PREFIX}{_digest()}"
    built = False
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        _compile_into(cache_dir, target)
        built = True
        info = os.lstat(target)
    problem = _binary_problem(info)
    if problem:
        raise SandboxStartError(
            f"guest agent binary {target} {problem}: it may have been swapped",
            f"delete {target}; contain rebuilds it on the next build",
        )
    return AgentBuild(target, built)


def _check_cache_dir(cache_dir: Path) -> None:
    try:
        cache_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        info = os.lstat(cache_dir)
    except OSError as exc:
        raise SandboxStartError(
            f"cannot create the cache directory {cache_dir}: {exc.strerror}",
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
        f"cache directory {cache_dir} {problem}: someone else could swap the guest agent",
        f"run `chmod go-w {cache_dir}` if it is yours, or set CONTAIN_CACHE_DIR elsewhere",
    )


def _binary_problem(info: os.stat_result) -> str:
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != os.geteuid():
        return f"is owned by uid {info.st_uid}, not by you ({os.geteuid()})"
    if stat.S_IMODE(info.st_mode) != 0o755:
        return f"has mode {stat.S_IMODE(info.st_mode):o}, not 755"
    return ""


def _compile_into(cache_dir: Path, target: Path) -> None:
    import shutil
    import tempfile

    compiler = next((found for name in _COMPILERS if (found := shutil.which(name))), None)
    if compiler is None:
        raise UnsupportedHost("no C compiler (cc, gcc, clang) to build the guest agent", _COMPILER_FIX)
    fd, tmp_name = tempfile.mkstemp(prefix=".contain-guest-agent-", dir=cache_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with tempfile.TemporaryDirectory(prefix="contain-guest-agent-src-") as src_dir:
            source = Path(src_dir) / _SOURCE_NAME
            source.write_bytes(guest_agent_source())
            try:
                done = subprocess.run(
                    [compiler, *GUEST_AGENT_CFLAGS, "-o", str(tmp), str(source)],
                    capture_output=True,
                    text=True,
                    timeout=_COMPILE_TIMEOUT_S,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxStartError(
                    f"could not run {compiler} to build the guest agent: {exc}", _COMPILER_FIX
                ) from exc
        if done.returncode != 0:
            tail = done.stderr.strip()[-800:]
            if "cannot find -lc" in done.stderr or "crt1.o" in done.stderr:
                raise UnsupportedHost(f"{compiler} cannot build a static guest agent: {tail}", _COMPILER_FIX)
            raise SandboxStartError(f"building the guest agent with {compiler} failed: {tail}", "report this bug")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
