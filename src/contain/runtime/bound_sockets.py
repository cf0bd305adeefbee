"""Unix sockets inside bound host trees: found at start and hidden unless the manifest names them.

A read-only bind does not stop ``connect()`` on a pathname Unix socket: the kernel checks write
permission on the socket inode, and a read-only mount does not refuse that for sockets. So a
socket that sits inside a bound input or write bind is a door to a host service: a home
directory's ``~/.gnupg/S.gpg-agent`` or ``~/.ssh/agent.sock``, a rootless Docker socket, a language
server's socket in a project. Landlock (ABI <= 7) scopes only abstract sockets, and seccomp cannot
see the path ``connect()`` is given.

Enforced: before the sandbox starts, every read and write bind that is a directory is walked (no
symlink is followed; at most ``MAX_SCAN_ENTRIES`` entries per bind, else the start is refused) and
each socket found is covered inside the sandbox by an empty, mode-0000, read-only file, so
``connect()`` fails. Sockets the rule's ``allow_sockets`` names stay connectable. The result's
layers list what was hidden.

Not enforced: a socket that a host service creates in a bound tree *after* the sandbox started is
connectable by the sandbox (if its mode lets the sandbox's uid write it). The same holds for a
directory or entry that vanishes while the walk reads it (another sandbox on the same repository
removing its placeholders at close, say): it is skipped, since it holds nothing at that moment. A
bind of a socket file itself is the manifest naming that socket and is left as it is.
"""

from __future__ import annotations

import os
import stat

from contain.errors import SandboxStartError

__all__ = ["MAX_SCAN_ENTRIES", "find_unix_sockets"]

# About a second of lstat on this host's ext4; a larger bind is refused, not half-checked.
MAX_SCAN_ENTRIES = 500_000


def find_unix_sockets(host_root: str, *, max_entries: int = MAX_SCAN_ENTRIES) -> tuple[str, ...]:
    """Relative paths of the Unix sockets below ``host_root``, sorted.

    The walk is iterative (no recursion limit), never follows symlinks and stays on the bound
    tree's mounts as the sandbox would see them.

    Raises:
        SandboxStartError: the tree has more than ``max_entries`` entries, or cannot be read.
    """
    found: list[str] = []
    pending = [""]
    seen = 0
    while pending:
        relative = pending.pop()
        directory = os.path.join(host_root, relative) if relative else host_root
        try:
            entries = list(os.scandir(directory))
        except PermissionError:
            continue  # the sandbox's uid cannot list it either (checked on the idmapped view)
        except (FileNotFoundError, NotADirectoryError):
            if not relative:
                raise SandboxStartError(
                    f"bound directory {host_root} disappeared before it could be checked for Unix sockets",
                    "keep the bound directory in place while the sandbox starts",
                ) from None
            continue  # removed (or replaced) while we walked: nothing in it to hide now
        except OSError as exc:
            raise SandboxStartError(
                f"cannot scan bound directory {directory} for Unix sockets: {exc.strerror}",
                "fix its permissions, or bind a directory contain can read",
            ) from exc
        seen += len(entries)
        if seen > max_entries:
            raise SandboxStartError(
                f"bound directory {host_root} has more than {max_entries} entries; contain cannot check it for "
                "Unix sockets, which a read-only bind does not make unconnectable",
                "bind a smaller directory (the part the task needs)",
            )
        for entry in entries:
            path = f"{relative}/{entry.name}" if relative else entry.name
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue  # vanished between the listing and the stat
            if stat.S_ISSOCK(mode):
                found.append(path)
            elif stat.S_ISDIR(mode):
                pending.append(path)
    return tuple(sorted(found))
