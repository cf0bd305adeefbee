"""Processes, daemon sockets and capabilities a process started here could use.

``gather_process_facts`` reads ``/proc`` (process owners, ``/proc/net/unix``, CapEff and Uid of
``/proc/self/status``) and stats the daemon sockets of ``DAEMON_SOCKETS`` under the given root
and the ones named by environment variables; ``classify_processes`` is pure.

A daemon socket is worth more than a file: docker, containerd and podman sockets are root on the
host, ssh-agent signs with the user's keys without revealing them, X11 allows keystroke
injection. Abstract Unix sockets have no file at all and are reachable from anywhere in the
network namespace, which is why a sandbox needs its own.

Sockets named by environment variables (``SSH_AUTH_SOCK``, ``DBUS_SESSION_BUS_ADDRESS``,
``DOCKER_HOST``, ``XDG_RUNTIME_DIR``) are absolute paths as the process sees them; they are not
re-rooted under ``root``.

Not covered: TCP-exposed daemons (see ``network``), processes in other PID namespaces, and what
each visible process could leak through ``/proc/<pid>/environ`` (the count and owners are named).
"""

from __future__ import annotations

import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from contain.inventory.items import Group, InventoryItem, Verdict

__all__ = [
    "CAPABILITY_NAMES",
    "DAEMON_SOCKETS",
    "DaemonSocket",
    "ProcessFacts",
    "classify_processes",
    "decode_capabilities",
    "gather_process_facts",
    "parse_unix_listeners",
]

# include/uapi/linux/capability.h, bit number -> name (Linux 6.x defines 0..40).
CAPABILITY_NAMES: tuple[str, ...] = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)
# Capabilities that alone are enough to leave a sandbox or own the host.
_HOST_LEVEL_CAPS = (
    "CAP_SYS_ADMIN",
    "CAP_SYS_MODULE",
    "CAP_SYS_PTRACE",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_SYS_RAWIO",
    "CAP_NET_ADMIN",
    "CAP_BPF",
)
_SO_ACCEPTCON = 0x00010000  # /proc/net/unix Flags column: the socket is listening


@dataclass(frozen=True)
class DaemonSocket:
    """A well-known daemon socket and what a client of it can do."""

    kind: str
    paths: tuple[str, ...]  # relative to root; "{runtime}/x" is under $XDG_RUNTIME_DIR
    why: str


DAEMON_SOCKETS: tuple[DaemonSocket, ...] = (
    DaemonSocket(
        "docker",
        ("var/run/docker.sock", "run/docker.sock", "{runtime}/docker.sock"),
        "root on the host: a client can start a privileged container that mounts /",
    ),
    DaemonSocket(
        "containerd",
        ("run/containerd/containerd.sock",),
        "root on the host: a client can run any image with host mounts",
    ),
    DaemonSocket(
        "podman",
        ("run/podman/podman.sock", "{runtime}/podman/podman.sock"),
        "runs containers as the socket's owner, with that user's files",
    ),
    DaemonSocket(
        "cri-o",
        ("var/run/crio/crio.sock", "run/crio/crio.sock"),
        "root on the host through the Kubernetes runtime interface",
    ),
    DaemonSocket(
        "libvirt",
        ("var/run/libvirt/libvirt-sock", "run/libvirt/libvirt-sock"),
        "starts virtual machines with host devices and disks",
    ),
    DaemonSocket(
        "dbus-system",
        ("run/dbus/system_bus_socket", "var/run/dbus/system_bus_socket"),
        "talks to systemd, NetworkManager, polkit and other system services",
    ),
    DaemonSocket(
        "dbus-session",
        ("{runtime}/bus",),
        "talks to the user's session services (secrets, notifications, systemd --user)",
    ),
    DaemonSocket("gpg-agent", ("{runtime}/gnupg/S.gpg-agent",), "signs and decrypts with the user's GPG keys"),
    DaemonSocket("wayland", ("{runtime}/wayland-0",), "the user's display: screen contents and input"),
    DaemonSocket("systemd-user", ("{runtime}/systemd/private",), "starts services as the user, outside any sandbox"),
)
# Environment variables that point at a daemon socket, and the kind they name.
_SOCKET_VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("SSH_AUTH_SOCK", "ssh-agent", "signs with the user's SSH keys: push to git, log in to hosts"),
    (
        "DBUS_SESSION_BUS_ADDRESS",
        "dbus-session",
        "talks to the user's session services (secrets, notifications, systemd --user)",
    ),
    ("DOCKER_HOST", "docker", "root on the host: a client can start a privileged container"),
)
_X11_WHY = "the user's X display: keystroke injection, screen capture, clipboard"


@dataclass(frozen=True)
class FoundSocket:
    """A daemon socket that exists."""

    kind: str
    path: str
    why: str


@dataclass(frozen=True)
class ProcessFacts:
    """What ``classify_processes`` needs."""

    process_owners: tuple[str, ...]  # one user name (or uid) per visible process
    sockets: tuple[FoundSocket, ...]
    unix_listeners: tuple[str, ...]  # paths from /proc/net/unix; abstract ones start with @
    cap_eff: int | None
    euid: int | None


def gather_process_facts(
    *, environ: Mapping[str, str], root: Path = Path("/"), proc_root: Path = Path("/proc")
) -> ProcessFacts:
    """Read /proc and stat daemon sockets (I/O only).

    Args:
        environ: for socket variables and ``XDG_RUNTIME_DIR``.
        root: the file system root the table's socket paths are under (and ``etc/passwd``).
        proc_root: where procfs is mounted.
    """
    users = _read_passwd(root / "etc" / "passwd")
    owners: list[str] = []
    try:
        entries = list(proc_root.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
            except OSError:
                continue  # exited between listing and stat
            owners.append(users.get(uid, str(uid)))
    status = _read(proc_root / "self" / "status")
    return ProcessFacts(
        process_owners=tuple(sorted(owners)),
        sockets=tuple(_find_sockets(environ, root)),
        unix_listeners=parse_unix_listeners(_read(proc_root / "net" / "unix")),
        cap_eff=_status_field(status, "CapEff", base=16),
        euid=_status_field(status, "Uid", base=10, column=1),
    )


def parse_unix_listeners(text: str) -> tuple[str, ...]:
    """Paths of listening sockets in /proc/net/unix (``@name`` for abstract ones)."""
    found: list[str] = []
    for line in text.splitlines()[1:]:
        cols = line.split(maxsplit=7)
        if len(cols) < 8:
            continue
        try:
            flags = int(cols[3], 16)
        except ValueError:
            continue
        if flags & _SO_ACCEPTCON:
            found.append(cols[7].strip())
    return tuple(dict.fromkeys(found))


def decode_capabilities(mask: int) -> tuple[str, ...]:
    """Capability names for the bits set in ``mask`` (unknown bits as CAP_<n>)."""
    names: list[str] = []
    for bit in range(64):
        if mask >> bit & 1:
            names.append(CAPABILITY_NAMES[bit] if bit < len(CAPABILITY_NAMES) else f"CAP_{bit}")
    return tuple(names)


def classify_processes(facts: ProcessFacts) -> tuple[InventoryItem, ...]:
    """Turn process facts into items; pure."""
    items: list[InventoryItem] = []
    if facts.process_owners:
        counts = Counter(facts.process_owners)
        users = ", ".join(f"{user} ({n})" for user, n in counts.most_common(6))
        items.append(
            InventoryItem(
                Group.PROCESSES,
                "processes",
                f"{len(facts.process_owners)} visible processes",
                Verdict.BLOCK,
                f"owners: {users}; a task can read their command lines, signal or trace those of "
                "its own user; a sandbox gets its own PID namespace",
            )
        )
    known = {s.path for s in facts.sockets}
    for sock in facts.sockets:
        items.append(
            InventoryItem(
                Group.PROCESSES,
                f"socket:{sock.kind}",
                sock.path,
                Verdict.BLOCK,
                f"{sock.why}; never bind it into a sandbox",
            )
        )
    abstract = [p for p in facts.unix_listeners if p.startswith("@")]
    for path in facts.unix_listeners:
        if path.startswith("@") or path in known:
            continue
        items.append(
            InventoryItem(
                Group.PROCESSES,
                "socket:unix",
                path,
                Verdict.BLOCK,
                "a listening Unix socket of some daemon; the sandbox sees none unless the manifest binds its directory",
            )
        )
    if abstract:
        shown = ", ".join(abstract[:5]) + (", …" if len(abstract) > 5 else "")
        items.append(
            InventoryItem(
                Group.PROCESSES,
                "socket:abstract",
                f"{len(abstract)} abstract Unix socket(s)",
                Verdict.BLOCK,
                f"{shown}: reachable by name from this network namespace with no file permission "
                "check; a sandbox needs its own network namespace",
            )
        )
    if facts.cap_eff:
        caps = decode_capabilities(facts.cap_eff)
        strong = [c for c in _HOST_LEVEL_CAPS if c in caps]
        items.append(
            InventoryItem(
                Group.PROCESSES,
                "capabilities",
                f"CapEff={facts.cap_eff:016x}",
                Verdict.BLOCK,
                f"{len(caps)} capabilities held"
                + (f", including {', '.join(strong)}" if strong else "")
                + "; a sandbox drops all of them",
            )
        )
    if facts.euid == 0:
        items.append(
            InventoryItem(
                Group.PROCESSES,
                "root-user",
                "uid 0",
                Verdict.BLOCK,
                "running as root: every file permission check passes; the sandbox maps the task to "
                "an unprivileged user",
            )
        )
    return tuple(items)


def _find_sockets(environ: Mapping[str, str], root: Path) -> list[FoundSocket]:
    found: dict[str, FoundSocket] = {}
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    for row in DAEMON_SOCKETS:
        for template in row.paths:
            if template.startswith("{runtime}"):
                if not runtime:
                    continue
                path = Path(runtime) / template.removeprefix("{runtime}/")
            else:
                path = root / template
            _add_socket(found, row.kind, path, row.why)
    for variable, kind, why in _SOCKET_VARIABLES:
        value = environ.get(variable, "")
        for prefix in ("unix://", "unix:path="):
            if value.startswith(prefix):
                value = value.removeprefix(prefix).split(",")[0]
        if value.startswith("/"):
            _add_socket(found, kind, Path(value), f"{why} (named by ${variable})")
    x11 = root / "tmp" / ".X11-unix"
    try:
        displays = sorted(x11.iterdir())
    except OSError:
        displays = []
    for display in displays:
        _add_socket(found, "x11", display, _X11_WHY)
    return list(found.values())


def _add_socket(found: dict[str, FoundSocket], kind: str, path: Path, why: str) -> None:
    try:
        is_socket = stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return
    if is_socket and str(path) not in found:
        found[str(path)] = FoundSocket(kind, str(path), why)


def _status_field(status: str, name: str, *, base: int, column: int = 0) -> int | None:
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key == name:
            parts = rest.split()
            try:
                return int(parts[column], base)
            except (IndexError, ValueError):
                return None
    return None


def _read_passwd(path: Path) -> dict[int, str]:
    users: dict[int, str] = {}
    for line in _read(path).splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit():
            users.setdefault(int(fields[2]), fields[0])
    return users


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
