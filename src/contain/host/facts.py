"""What this host offers, detected once and returned as a frozen value.

Planning functions take ``HostFacts`` as an argument, so every decision that depends on the host is
a pure function that tests can drive with a constructed value. Detection is cheap on purpose (a few
/proc reads and one syscall): it runs on the start-up path of every sandbox.

Does not decide anything: whether a missing layer is fatal is the runtime's decision
(``contain.runtime.plan``), and ``contain doctor`` renders the facts with fixes.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "CGROUP_ROOT_ENV",
    "CgroupMount",
    "HostFacts",
    "detect_host",
    "detect_landlock_abi",
    "parse_cgroup_mounts",
    "parse_own_cgroups",
    "read_host_file",
]

# A cgroup delegated to this user (e.g. systemd ``Delegate=yes``), as /proc/self/cgroup spells it.
# Read once, by ``detect_host``; the runtime and doctor take it from ``HostFacts.cgroup_root``.
CGROUP_ROOT_ENV = "CONTAIN_CGROUP_ROOT"

# landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) returns the ABI version.
_SYS_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}
_LANDLOCK_CREATE_RULESET_VERSION = 1


@dataclass(frozen=True)
class CgroupMount:
    """One mounted cgroup hierarchy and where this process sits in it."""

    version: int  # 1 or 2
    mountpoint: str
    controllers: tuple[str, ...]  # v1: the hierarchy's controllers; v2: cgroup.controllers
    own_path: str  # this process's cgroup inside the hierarchy, e.g. /user.slice


@dataclass(frozen=True)
class HostFacts:
    """Everything the runtime plans from. Construct one by hand in tests."""

    arch: str
    is_root: bool
    uid: int
    gid: int
    bwrap_path: str | None
    user_namespaces: bool  # max_user_namespaces > 0 and not disabled by sysctl
    seccomp: bool
    landlock_abi: int  # 0 when unavailable
    cgroups: tuple[CgroupMount, ...] = field(default=())
    libseccomp_path: str | None = None
    # $CONTAIN_CGROUP_ROOT as given (None when unset or empty). Not checked here: the runtime's
    # cgroup plan refuses a path that is not absolute and normalised.
    cgroup_root: str | None = None

    def cgroup_for(self, controller: str) -> CgroupMount | None:
        """The hierarchy that offers ``controller`` (a v1 mount, or v2 with it enabled)."""
        for mount in self.cgroups:
            if controller in mount.controllers:
                return mount
        return None


def detect_landlock_abi(arch: str | None = None) -> int:
    """Ask the kernel for its Landlock ABI version; 0 when Landlock is absent or disabled."""
    number = _SYS_LANDLOCK_CREATE_RULESET.get(arch or os.uname().machine)
    if number is None:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    flags = ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION)
    abi = libc.syscall(number, None, ctypes.c_size_t(0), flags)
    return int(abi) if abi > 0 else 0


def read_host_file(path: str) -> str | None:
    """The text of a host file (/proc, /sys, cgroupfs), or None when it cannot be read.

    For detection only: None means "this host does not offer it", never an error to raise.
    Bytes that are not UTF-8 become U+FFFD.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _user_namespaces_enabled() -> bool:
    max_ns = read_host_file("/proc/sys/user/max_user_namespaces")
    if max_ns is not None and max_ns.strip() == "0":
        return False
    # Debian/Ubuntu knobs; absent on mainline kernels.
    for knob in ("/proc/sys/kernel/unprivileged_userns_clone",):
        value = read_host_file(knob)
        if value is not None and value.strip() == "0" and os.geteuid() != 0:
            return False
    return os.path.exists("/proc/self/ns/user")


def _seccomp_available() -> bool:
    status = read_host_file("/proc/self/status") or ""
    return any(line.startswith("Seccomp:") for line in status.splitlines())


_V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct", "freezer")


def parse_own_cgroups(text: str) -> dict[str, str]:
    """/proc/self/cgroup -> {controller: path}; the v2 entry (``0::/path``) is under "".

    A v1 line names every controller of its hierarchy (``4:cpu,cpuacct:/x``), so each one maps
    to the path on its own: a hierarchy co-mounting a controller we do not use still resolves.
    """
    own: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            own[name] = parts[2]
    return own


def _inside_mount(path: str, mount_root: str) -> str:
    # mountinfo's 4th field is the cgroup the mount shows as its root (e.g. /docker/<id> when a
    # container sees only its own subtree); our path in /proc/self/cgroup is from the hierarchy
    # root, so strip the mount root to get a path under the mountpoint.
    if mount_root in ("", "/"):
        return path
    if path == mount_root:
        return "/"
    if path.startswith(mount_root.rstrip("/") + "/"):
        return path[len(mount_root.rstrip("/")) :]
    return path


def parse_cgroup_mounts(mountinfo: str, own_cgroups: str, read: Callable[[str], str | None]) -> tuple[CgroupMount, ...]:
    """cgroup and cgroup2 mounts from /proc/self/mountinfo, with our own path in each.

    ``read`` reads ``<mountpoint>/cgroup.controllers`` for v2 (injected so tests need no host).
    """
    own = parse_own_cgroups(own_cgroups)
    mounts: list[CgroupMount] = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        rest = right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        fstype, options, mount_root, mountpoint = rest[0], rest[2], fields[3], fields[4]
        if fstype == "cgroup2":
            enabled = (read(os.path.join(mountpoint, "cgroup.controllers")) or "").split()
            own_path = _inside_mount(own.get("", "/"), mount_root)
            mounts.append(CgroupMount(2, mountpoint, tuple(enabled), own_path))
        elif fstype == "cgroup":
            controllers = tuple(opt for opt in options.split(",") if opt in _V1_CONTROLLERS)
            if controllers:
                own_path = _inside_mount(own.get(controllers[0], "/"), mount_root)
                mounts.append(CgroupMount(1, mountpoint, controllers, own_path))
    return tuple(mounts)


def _cgroup_mounts() -> tuple[CgroupMount, ...]:
    mountinfo = read_host_file("/proc/self/mountinfo") or ""
    return parse_cgroup_mounts(mountinfo, read_host_file("/proc/self/cgroup") or "", read_host_file)


@functools.cache
def bwrap_version(path: str | None) -> str | None:
    """``bwrap --version`` (for doctor and reports). Not part of ``detect_host``: running bwrap
    costs a process start on every sandbox start, and nothing there depends on the version."""
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().removeprefix("bubblewrap ").strip() or None


def _find_libseccomp() -> str | None:
    for candidate in (
        "/usr/lib/x86_64-linux-gnu/libseccomp.so.2",
        "/usr/lib/aarch64-linux-gnu/libseccomp.so.2",
        "/usr/lib64/libseccomp.so.2",
        "/usr/lib/libseccomp.so.2",
        "/lib/x86_64-linux-gnu/libseccomp.so.2",
    ):
        if os.path.exists(candidate):
            return candidate
    return None


@functools.cache
def detect_host() -> HostFacts:
    """Detect what this host offers, once per process (cached); cheap enough for every sandbox start.

    Environment read here and nowhere else: ``CONTAIN_CGROUP_ROOT`` (``HostFacts.cgroup_root``).
    Being cached, a change to it later in the same process is not seen.
    """
    arch = os.uname().machine
    bwrap = shutil.which("bwrap")
    return HostFacts(
        arch=arch,
        is_root=os.geteuid() == 0,
        uid=os.getuid(),
        gid=os.getgid(),
        bwrap_path=bwrap,
        user_namespaces=_user_namespaces_enabled(),
        seccomp=_seccomp_available(),
        landlock_abi=detect_landlock_abi(arch),
        cgroups=_cgroup_mounts(),
        libseccomp_path=_find_libseccomp(),
        cgroup_root=os.environ.get(CGROUP_ROOT_ENV) or None,
    )


def errno_name(code: int) -> str:
    """``errno.EPERM`` -> ``"EPERM"``, for messages."""
    return errno.errorcode.get(code, str(code))
