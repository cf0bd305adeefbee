"""Create sockets inside another network namespace, from this (host) process.

This is how the egress listeners end up inside the sandbox without any process of ours living
there: a fresh thread calls ``setns(fd, CLONE_NEWNET)`` (which moves only the calling thread,
see setns(2)), creates and binds the sockets, and exits. A socket keeps the namespace it was
created in for its whole life, so the host's event loop can serve it from the host namespace.
The workload cannot kill, ptrace or replace these listeners (they are not processes in its pid
namespace) and cannot pre-bind their ports (they are bound before the workload starts).

Rules followed here:

* Each call uses a brand-new thread and lets it exit: a thread that switched namespaces is
  never reused for other work (an executor thread would be).
* After ``setns`` the thread checks ``/proc/thread-self/ns/net`` names the target namespace
  before it binds anything; any failure raises and nothing half-bound is returned.
* No ``SO_REUSEADDR``/``SO_REUSEPORT``: nothing else can share a listener's port.

Needs CAP_SYS_ADMIN over the target namespace's user namespace (root on the host has it), and
CAP_NET_BIND_SERVICE there for port 53.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["CLONE_NEWNET", "SocketSpec", "bind_in_netns", "open_netns"]

CLONE_NEWNET = 0x40000000  # <linux/sched.h>
LISTEN_BACKLOG = 1024


@dataclass(frozen=True)
class SocketSpec:
    """A socket to create: TCP (listening) or UDP, bound to ``host:port``."""

    kind: Literal["tcp", "udp"]
    host: str
    port: int


def open_netns(path: str) -> int:
    """Open a namespace file (``/proc/<pid>/ns/net``) once; the fd pins that namespace.

    Raises:
        OSError: if it cannot be opened.
    """
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")
    here = os.stat(f"/proc/self/task/{threading.get_native_id()}/ns/net")
    target = os.fstat(fd)
    if (here.st_dev, here.st_ino) != (target.st_dev, target.st_ino):
        raise OSError("setns returned, but this thread is not in the target network namespace")


def _create(spec: SocketSpec) -> socket.socket:
    family = socket.AF_INET6 if ":" in spec.host else socket.AF_INET
    kind = socket.SOCK_STREAM if spec.kind == "tcp" else socket.SOCK_DGRAM
    sock = socket.socket(family, kind)
    try:
        sock.bind((spec.host, spec.port))
        if spec.kind == "tcp":
            sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"bind {spec.kind} {spec.host}:{spec.port}: {exc.strerror}") from exc
    return sock


def bind_in_netns(netns_fd: int, specs: Sequence[SocketSpec]) -> list[socket.socket]:
    """Create and bind every socket in ``specs`` inside the namespace ``netns_fd`` names.

    Returns:
        The sockets, in the order of ``specs``, non-blocking, TCP ones listening.

    Raises:
        OSError: setns failed, or any bind failed (sockets already made are closed).
    """
    result: list[socket.socket] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            _setns(netns_fd)
            for spec in specs:
                result.append(_create(spec))
        except BaseException as exc:  # handed to the caller below, never swallowed
            failure.append(exc)
            for sock in result:
                sock.close()
            result.clear()

    thread = threading.Thread(target=work, name="contain-egress-setns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result


def close_quietly(sockets: Sequence[socket.socket]) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.close()
