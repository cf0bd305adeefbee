"""Plan the Landlock layer that the in-sandbox supervisor applies to every workload.

The mount namespace built by bwrap is the first filesystem layer: nothing unlisted is visible,
and read-only binds are read-only. Landlock is the second, independent layer: the supervisor builds
one ruleset at start (``contain-supervisor.c``: handled access = every filesystem right the ABI
knows, including REFER from ABI 2, TRUNCATE from 3 and IOCTL_DEV from 5) and each workload
restricts itself with it before exec. The plan grants:

- read, list and execute beneath ``/`` (``READ_PATHS``): the mount namespace already decides
  what exists, so Landlock only has to keep writes in line;
- every right beneath each writable path the boundary names, plus the rows of
  ``DEVICE_WRITE_PATHS`` (device nodes that programs write as a matter of course).

So a write anywhere else fails with EACCES even where the mount would allow it (a tmpfs mounted
for another purpose, a bind whose read-only flag was lost), and on ABI >= 6 the ruleset also
scopes signals and abstract Unix sockets, so a workload cannot signal the supervisor or reach an
abstract socket outside its domain.

What Landlock does NOT cover here (other layers must):

- metadata: stat, chmod, chown, utimes, setxattr and chdir are not access rights Landlock
  handles; a workload may chmod a file it owns beneath a read-only-granted path when the mount
  is writable;
- fds opened before the restriction (the stdio pipes the host passes are such fds, by design);
- the network: the ABI 4 TCP rights are not used; the network namespace and the egress proxy
  do that job;
- IPC other than abstract sockets: SysV IPC and POSIX message queues (the IPC namespace);
- truncate before ABI 3, device ioctls before ABI 5, signal and abstract-socket scoping
  before ABI 6: an older kernel gives a weaker layer, which ``Ready.landlock_abi`` reports;
- the supervisor itself, which is never restricted (it must not be reachable by the workload).

``plan_landlock`` is pure; the only code that touches the kernel is in the supervisor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contain.boundary.kinds import LayerRequirement
from contain.errors import UnsupportedHost

__all__ = [
    "DEVICE_WRITE_PATHS",
    "READ_PATHS",
    "DeviceWrite",
    "LandlockPlan",
    "plan_landlock",
]

READ_PATHS: tuple[str, ...] = ("/",)


@dataclass(frozen=True)
class DeviceWrite:
    """A device node every workload may write, with the reason."""

    path: str
    why: str


DEVICE_WRITE_PATHS: tuple[DeviceWrite, ...] = (
    DeviceWrite("/dev/null", "shells and build tools redirect output to /dev/null everywhere"),
    DeviceWrite("/dev/zero", "opened O_RDWR for anonymous mappings by older runtimes"),
    DeviceWrite("/dev/full", "harmless (writes fail with ENOSPC); used by test suites"),
)


@dataclass(frozen=True)
class LandlockPlan:
    """The Landlock ruleset the supervisor builds: ABI, paths and whether a failure is fatal."""

    abi: int
    read_paths: tuple[str, ...]
    write_paths: tuple[str, ...]
    required: bool

    def supervisor_args(self) -> list[str]:
        """The contain-supervisor arguments that carry this plan."""
        args = ["--landlock-abi", str(self.abi)]
        args.append("--landlock-required" if self.required else "--landlock-auto")
        for path in self.read_paths:
            args += ["--landlock-read", path]
        for path in self.write_paths:
            args += ["--landlock-write", path]
        return args


def plan_landlock(*, abi: int, write_paths: Sequence[str], requirement: LayerRequirement) -> LandlockPlan | None:
    """Plan the Landlock layer for one sandbox.

    Args:
        abi: the kernel's Landlock ABI (``HostFacts.landlock_abi``; 0 when absent).
        write_paths: absolute paths inside the sandbox the boundary makes writable.
        requirement: ``boundary.hardening.landlock``.

    Returns:
        The plan, or None when Landlock is off, or auto on a kernel without it.

    Raises:
        UnsupportedHost: Landlock is required and the kernel offers no ABI.
        ValueError: a write path is not absolute.
    """
    if requirement is LayerRequirement.OFF:
        return None
    if abi <= 0:
        if requirement is LayerRequirement.AUTO:
            return None
        raise UnsupportedHost(
            "boundary.hardening.landlock is required but this kernel offers no Landlock ABI "
            "(built without CONFIG_SECURITY_LANDLOCK, or 'landlock' is missing from the lsm= "
            "boot parameter / CONFIG_LSM)",
            "boot a kernel with CONFIG_SECURITY_LANDLOCK=y and landlock in lsm=, or set "
            "hardening.landlock: auto in the boundary",
        )
    for path in write_paths:
        if not path.startswith("/"):
            raise ValueError(f"Landlock write path {path!r} must be absolute inside the sandbox")
    writes = dict.fromkeys([*write_paths, *(row.path for row in DEVICE_WRITE_PATHS)])
    return LandlockPlan(
        abi=abi,
        read_paths=READ_PATHS,
        write_paths=tuple(writes),
        required=requirement is LayerRequirement.REQUIRED,
    )
