"""Build (once) and locate the static guest agent binary that becomes a microVM's pid 1.

The guest image (initramfs) embeds this binary; whoever can replace it controls every microVM
sandbox. The build and its checks are ``runtime.static_build``'s, shared with the supervisor
(``supervisor_build``), applied to the agent's source:

- the binary is named by the sha256 of the source, the header it shares with the supervisor
  (``supervisor/contain-exec.h``) and the compiler flags, so an edited source or header is
  never served by a stale build, and the guest image (cached by content) changes with it;
- it is compiled to a temporary name in the cache directory and renamed into place (atomic);
- before use, the cache directory must be a real directory owned by the current user or root and
  not group/world writable, and the binary a regular file owned by the current user, mode 0755;
  anything else is refused (``SandboxStartError``), not trusted or silently rebuilt.

Does not check the compiler, or the ancestors of the cache directory (``static_build`` says
why). Results are cached per cache directory for the life of the process.
"""

from __future__ import annotations

import functools
from pathlib import Path

from contain.runtime.static_build import StaticBuild, StaticProgram, ensure_static_binary, source_digest
from contain.runtime.supervisor_build import shared_exec_headers, supervisor_cache_dir

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
_PROGRAM = StaticProgram(
    label="guest agent",
    source_name="contain-guest-agent.c",
    binary_prefix="contain-guest-agent-",
    cflags=GUEST_AGENT_CFLAGS,
)

AgentBuild = StaticBuild
"""Where the agent binary is (``path``) and whether this call compiled it (``built_now``)."""


def guest_agent_source() -> bytes:
    """The agent's C source, as shipped in the package."""
    return (Path(__file__).parent / "agent" / _PROGRAM.source_name).read_bytes()


@functools.cache
def _digest() -> str:
    return source_digest(GUEST_AGENT_CFLAGS, guest_agent_source(), shared_exec_headers())


def expected_guest_agent_path() -> Path:
    """Where ``ensure_guest_agent_binary`` puts (or finds) the agent for this source; builds nothing."""
    return supervisor_cache_dir().absolute() / f"{_PROGRAM.binary_prefix}{_digest()}"


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
    target = cache_dir / f"{_PROGRAM.binary_prefix}{_digest()}"
    return ensure_static_binary(
        _PROGRAM, cache_dir=cache_dir, target=target, read_source=guest_agent_source, read_headers=shared_exec_headers
    )
