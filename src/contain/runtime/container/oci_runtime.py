"""The runc and runsc command lines, planned as data, and the one probe of a runtime binary.

Pure planning: ``plan_start_argv``, ``plan_delete_argv`` and ``plan_kill_argv`` turn a
``RuntimeFacts`` and a few paths into the exact argv; every global flag is a row of
``GLOBAL_FLAGS`` with its reason, so a reviewer reads what each runtime is told in one table.
``probe_runtime`` is the only function that runs a binary (``--version``, and for runsc ``help
platforms``); ``container/backend.py`` runs the planned argv.

Enforces (through the flags): runc and runsc keep their state under the backend's own root
(``--root``), never the system default (``/run/runc``, ``/var/run/runsc``); runsc applies the
bundle's ``linux.seccomp`` (``--oci-seccomp``: without it runsc 2022 silently ignores the section,
docs/gvisor-notes.md §3), uses the network namespace the bundle names (``--network=host`` with the
namespace path in the spec: the sentry's sockets are then host sockets in our namespace, where
egress listens), and runs on a platform chosen from the binary (``backend_names.RUNSC_PLATFORMS``).

Does NOT: check that the flags took (the backend checks seccomp after start), decide which runtime
(``backend_names``), or write the bundle (``bundle.py``, ``backend.py``).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass

from contain.errors import UnsupportedHost
from contain.runtime.backend_names import CONTAINER_RUNTIMES, RuntimeFacts, plan_runsc_platform

__all__ = [
    "GLOBAL_FLAGS",
    "GlobalFlag",
    "OciRuntimeView",
    "plan_delete_argv",
    "plan_kill_argv",
    "plan_runtime_view",
    "plan_start_argv",
    "plan_state_argv",
    "probe_runtime",
]

_PROBE_TIMEOUT_S = 10.0
# Where Debian puts the binaries when PATH (e.g. a sudo-less service PATH) lacks /usr/sbin.
_FALLBACK_DIRS = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
_INSTALL_FIX = {"runc": "apt-get install runc", "runsc": "apt-get install runsc (gVisor)"}


@dataclass(frozen=True)
class GlobalFlag:
    """A flag given to a runtime before its subcommand; ``{state}`` and ``{platform}`` are filled in."""

    runtime: str
    flag: str
    why: str


GLOBAL_FLAGS: tuple[GlobalFlag, ...] = (
    GlobalFlag("runc", "--root={state}", "state (and the container's lock) under the sandbox's own 0700 dir"),
    GlobalFlag("runc", "--log={log}", "runc's own log in the bundle dir: the container inherits runc's stdio"),
    GlobalFlag("runsc", "--root={state}", "state under the sandbox's own 0700 dir, swept at close"),
    GlobalFlag("runsc", "--platform={platform}", "systrap where the build has it, else ptrace (RUNSC_PLATFORMS)"),
    GlobalFlag("runsc", "--network=host", "the sentry uses host sockets in the netns the bundle names (ours)"),
    GlobalFlag("runsc", "--oci-seccomp", "apply linux.seccomp; without it runsc ignores the section silently"),
    GlobalFlag("runsc", "--host-uds=none", "no bound host socket is connectable (the control channel is stdin)"),
    GlobalFlag("runsc", "--log={log}", "runsc's own log in the bundle dir, quoted when the start fails"),
)


def _global_flags(facts: RuntimeFacts, *, state_dir: str, log_file: str) -> list[str]:
    platform = plan_runsc_platform(facts.platforms).name if facts.runtime == "runsc" else ""
    return [
        row.flag.format(state=state_dir, platform=platform, log=log_file)
        for row in GLOBAL_FLAGS
        if row.runtime == facts.runtime
    ]


@dataclass(frozen=True)
class OciRuntimeView:
    """What an outside judge may know of a running container's OCI runtime (the container
    handle's ``oci_runtime``; ``Sandbox.oci_runtime``). Read-only values, no handle: the probe's
    OC cases hash ``binary``, snapshot ``state_dir`` and run ``argv_prefix + ["exec", ...]``.
    """

    runtime: str  # "runc" | "runsc"
    binary: str  # host path of the runtime binary every command of this container runs
    state_dir: str  # the runtime's --root for this container (state.json, the exec FIFO, sockets)
    container_name: str  # the container id the runtime knows it by
    argv_prefix: tuple[str, ...]  # the binary and the global flags of every command (GLOBAL_FLAGS)
    rootfs: str  # host path of the bundle's root directory (an image's overlay is mounted there)


def plan_runtime_view(facts: RuntimeFacts, *, state_dir: str, log_file: str, name: str, rootfs: str) -> OciRuntimeView:
    """The ``OciRuntimeView`` of container ``name`` run by ``facts`` with these paths."""
    prefix = (facts.path, *_global_flags(facts, state_dir=state_dir, log_file=log_file))
    return OciRuntimeView(facts.runtime, facts.path, state_dir, name, prefix, rootfs)


def plan_start_argv(
    facts: RuntimeFacts, *, state_dir: str, bundle_dir: str, name: str, pid_file: str, log_file: str
) -> list[str]:
    """The argv that creates and starts the container.

    runc: ``run --detach --preserve-fds 1``: the control socket is the container's fd 3 and runc
    returns once the supervisor runs. runsc: ``run`` in the foreground (no ``--preserve-fds``
    in runsc; the control socket is its stdin, ``--control-fd 0``), whose exit is the sandbox's end.
    """
    argv = [facts.path, *_global_flags(facts, state_dir=state_dir, log_file=log_file), "run"]
    if facts.runtime == "runc":
        argv += ["--detach", "--preserve-fds", "1"]
    return [*argv, "--pid-file", pid_file, "--bundle", bundle_dir, name]


def plan_kill_argv(facts: RuntimeFacts, *, state_dir: str, log_file: str, name: str) -> list[str]:
    """SIGKILL to every process of the container (runc: ``--all``)."""
    argv = [facts.path, *_global_flags(facts, state_dir=state_dir, log_file=log_file), "kill"]
    if facts.runtime == "runc":
        argv.append("--all")
    return [*argv, name, "KILL"]


def plan_delete_argv(facts: RuntimeFacts, *, state_dir: str, log_file: str, name: str) -> list[str]:
    """Delete the container whatever its state: kills what runs, removes state and cgroup leaves."""
    return [facts.path, *_global_flags(facts, state_dir=state_dir, log_file=log_file), "delete", "--force", name]


def plan_state_argv(facts: RuntimeFacts, *, state_dir: str, log_file: str, name: str) -> list[str]:
    """``state``: the container's status and host pid as JSON."""
    return [facts.path, *_global_flags(facts, state_dir=state_dir, log_file=log_file), "state", name]


def _find_binary(runtime: str) -> str:
    found = shutil.which(runtime)
    if found:
        return found
    for directory in _FALLBACK_DIRS:
        candidate = shutil.which(runtime, path=directory)
        if candidate:
            return candidate
    raise UnsupportedHost(
        f"the OCI runtime {runtime!r} is not installed (not on PATH nor in {', '.join(_FALLBACK_DIRS)})",
        f"{_INSTALL_FIX.get(runtime, 'install it')}, or use --backend process",
    )


def _output(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnsupportedHost(
            f"cannot run `{' '.join(argv)}`: {exc}", f"check that {argv[0]} is an executable OCI runtime"
        ) from exc
    if done.returncode != 0:
        raise UnsupportedHost(
            f"`{' '.join(argv)}` failed with status {done.returncode}: "
            f"{done.stderr.decode(errors='replace').strip()[:300]}",
            f"reinstall {argv[0]}",
        )
    return done.stdout.decode(errors="replace")


@functools.lru_cache(maxsize=4)  # a binary's version and platforms do not change while we run
def probe_runtime(runtime: str) -> RuntimeFacts:
    """Find ``runtime`` and read its version (and, for runsc, its platforms) from the binary.

    Raises:
        UnsupportedHost: not installed, not runnable, or (runsc) no platform contain uses.
    """
    if runtime not in CONTAINER_RUNTIMES:
        raise UnsupportedHost(f"OCI runtime {runtime!r} is unknown", f"use one of: {', '.join(CONTAINER_RUNTIMES)}")
    path = _find_binary(runtime)
    version = _output([path, "--version"]).splitlines()
    platforms: tuple[str, ...] = ()
    if runtime == "runsc":
        # sorted: runsc lists its platforms in Go map order, which changes from run to run
        platforms = tuple(
            sorted({line.strip() for line in _output([path, "help", "platforms"]).splitlines() if line.strip()})
        )
        plan_runsc_platform(platforms)  # refuse now, not halfway through a start
    return RuntimeFacts(runtime, path, version[0].strip() if version else "unknown", platforms)
