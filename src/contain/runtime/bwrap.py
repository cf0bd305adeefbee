"""The bubblewrap command line for a process sandbox, planned from facts without touching disk.

What the argv enforces:
- every namespace (user, mount, pid, ipc, uts, net, cgroup) is new; no `-try` variants, so a
  host that cannot create one makes bwrap fail instead of running with less;
- the root is an empty tmpfs, remounted read-only at the end; the only host paths inside are
  /usr (read-only), the loader symlinks, a short table of non-secret /etc files, the supervisor, and
  the binds the boundary names. /etc/passwd, group, hosts, resolv.conf are generated;
- /proc is fresh (pid namespace), /dev is bwrap's minimal set remounted read-only; /tmp,
  /dev/shm and each scratch path are directories of ONE tmpfs of ``disk_bytes`` and an inode
  cap, which the launcher mounted before bwrap ran (disk_budget.py says why and how), owned by
  the sandbox user;
- binds are emitted parent-first, then the protected subpaths of write binds (re-bound read-only
  or masked by an empty read-only placeholder), then `block` masks, so protections win;
- `--disable-userns`, `--new-session`, `--die-with-parent`, `--as-pid-1` (the supervisor reaps).

What it does not do: seccomp, Landlock and cgroups are separate layers (seccomp.py, landlock.py,
cgroups.py), network policy is egress's. The file descriptors named here (seccomp, data files,
info, control) are opened by the launcher; this module only places their numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from contain.boundary.kinds import FileAccess
from contain.boundary.plain import PlainBoundary
from contain.runtime.disk_budget import default_scratch_paths, plan_disk_places
from contain.runtime.paths import PathFacts, is_under_write_bind

__all__ = [
    "ETC_PASSTHROUGH",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "SUPERVISOR_SANDBOX_PATH",
    "BwrapInputs",
    "EtcFile",
    "default_scratch_paths",
    "generated_etc_files",
    "plan_bwrap_argv",
]

SANDBOX_UID = 1000
SANDBOX_GID = 1000
SUPERVISOR_SANDBOX_PATH = "/.contain/supervisor"


@dataclass(frozen=True)
class EtcFile:
    """A host /etc entry passed through read-only, with the reason it is safe and needed."""

    path: str
    why: str


# Non-secret host files programs need to start. Nothing that names users, hosts or secrets.
ETC_PASSTHROUGH: tuple[EtcFile, ...] = (
    EtcFile("/etc/ld.so.cache", "the dynamic loader finds shared libraries through it"),
    EtcFile("/etc/ld.so.conf", "read by the loader and ldconfig -p"),
    EtcFile("/etc/ld.so.conf.d", "included by ld.so.conf"),
    EtcFile("/etc/alternatives", "Debian's command symlinks (awk, editor, ...) point through it"),
    EtcFile("/etc/ssl/certs", "CA certificates for TLS to allowed hosts"),
    EtcFile("/etc/ca-certificates", "CA certificate configuration"),
    EtcFile("/etc/ssl/openssl.cnf", "OpenSSL refuses to start some operations without it"),
    EtcFile("/etc/localtime", "time zone for logs; a symlink into /usr/share/zoneinfo"),
    EtcFile("/etc/protocols", "getprotobyname() used by socket libraries"),
    EtcFile("/etc/services", "getservbyname() used by socket libraries"),
    EtcFile("/etc/mime.types", "content types for Python's mimetypes and others"),
    EtcFile("/etc/python3.11", "Debian's python3 reads sitecustomize from here"),
    EtcFile("/etc/inputrc", "readline configuration; no secrets"),
)

# /lib-style entries: on merged-/usr hosts they are symlinks, elsewhere directories.
_LOADER_PATHS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")


@dataclass(frozen=True)
class BwrapInputs:
    """Everything the argv depends on besides the boundary: resolved facts and fd numbers."""

    paths: PathFacts
    loader_links: dict[str, str]  # "/lib" -> "usr/lib" for symlinks on the host
    loader_dirs: tuple[str, ...]  # loader paths that are real directories on the host
    etc_tree: str  # host directory holding the whole sandbox /etc (see etc_tree.py)
    supervisor_host_path: str
    supervisor_args: tuple[str, ...]  # after the supervisor path, e.g. --control-fd 5 --landlock-...
    data_fds: dict[str, int]  # sandbox path -> fd with the content of a small file (attachments)
    empty_file_fd_for: dict[str, int]  # mask sandbox path -> fd with empty content
    seccomp_fd: int | None
    info_fd: int
    disk_root: str  # host directory where the launcher mounted the disk budget (disk_budget.py)
    socket_binds: tuple[tuple[str, str], ...] = ()  # (host Unix socket, sandbox path under /.contain)


def generated_etc_files(*, home: str, resolv_conf: str) -> dict[str, str]:
    """The /etc files written for every sandbox: nothing of the host's users or hosts."""
    return {
        "/etc/passwd": (
            "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
            f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:sandbox:{home}:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "/etc/group": f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n",
        "/etc/hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost\n",
        "/etc/hostname": "sandbox\n",
        "/etc/resolv.conf": resolv_conf,
        "/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def plan_bwrap_argv(boundary: PlainBoundary, inputs: BwrapInputs, *, bwrap: str = "bwrap") -> list[str]:
    """Build the whole bwrap argv for one sandbox.

    Steps, in order (later mounts cover earlier ones):
      1. namespaces and process flags;
      2. the system view: /usr, loader links, /etc (one cached tree), /proc, /dev;
      3. the disk budget's places bound onto /tmp, /dev/shm, scratch paths; /dev read-only;
      4. the supervisor binary;
      5. read and write binds, parents before children;
      6. protected subpaths of write binds (read-only re-binds and placeholders);
      7. `block` masks;
      8. remount / read-only, then the supervisor command.

    Returns:
        The argv, starting with ``bwrap``.
    """
    argv = [
        bwrap,
        "--unshare-user",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_GID),
        "--hostname",
        "sandbox",
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--info-fd",
        str(inputs.info_fd),
    ]
    if inputs.seccomp_fd is not None:
        argv += ["--seccomp", str(inputs.seccomp_fd)]
    argv += ["--ro-bind", "/usr", "/usr"]
    for link in _LOADER_PATHS:
        if link in inputs.loader_links:
            argv += ["--symlink", inputs.loader_links[link], link]
        elif link in inputs.loader_dirs:
            argv += ["--ro-bind", link, link]
    argv += ["--ro-bind", inputs.etc_tree, "/etc"]
    for path, fd in sorted(inputs.data_fds.items()):
        argv += ["--perms", "0444", "--ro-bind-data", str(fd), path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for place in plan_disk_places(boundary):  # one budget: every place is a directory of one tmpfs
        argv += ["--bind", f"{inputs.disk_root}/{place.name}", place.sandbox_path]
    argv += ["--remount-ro", "/dev"]  # device nodes keep working; nothing can be created beside them
    argv += ["--ro-bind", inputs.supervisor_host_path, SUPERVISOR_SANDBOX_PATH]
    for host_socket, sandbox_path in inputs.socket_binds:
        argv += ["--bind", host_socket, sandbox_path]  # connect() needs write permission on the inode

    for bind in sorted(inputs.paths.binds, key=lambda b: (_depth(b.rule.path), b.rule.path)):
        flag = "--bind" if bind.rule.access is FileAccess.WRITE else "--ro-bind"
        argv += [flag, bind.host_realpath, bind.rule.path]
    for bind in inputs.paths.binds:
        for mask in bind.masks:
            if mask.exists:
                # immovable: bound onto itself writable, so it cannot be renamed or replaced (a git dir)
                argv += ["--bind" if mask.immovable else "--ro-bind", mask.host_path, mask.sandbox_path]
            elif mask.kind == "dir":
                argv += ["--perms", "0555", "--tmpfs", mask.sandbox_path, "--remount-ro", mask.sandbox_path]
            else:
                argv += [
                    "--perms",
                    "0444",
                    "--ro-bind-data",
                    str(inputs.empty_file_fd_for[mask.sandbox_path]),
                    mask.sandbox_path,
                ]
    for path in inputs.paths.hidden_sockets:  # connect() on an empty regular file fails
        argv += ["--perms", "0000", "--ro-bind-data", str(inputs.empty_file_fd_for[path]), path]
    for path, kind in sorted(inputs.paths.blocks.items()):
        if kind == "file":
            argv += ["--perms", "0000", "--ro-bind-data", str(inputs.empty_file_fd_for[path]), path]
        elif kind == "dir" or is_under_write_bind(path, inputs.paths.binds):
            argv += ["--perms", "0000", "--tmpfs", path, "--remount-ro", path]
    argv += ["--remount-ro", "/"]
    argv += ["--", SUPERVISOR_SANDBOX_PATH, *inputs.supervisor_args]
    return argv
