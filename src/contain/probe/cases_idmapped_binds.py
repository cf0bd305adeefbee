"""Project cases for what a sandbox reaches through the binds it owns (idmapped binds).

Through an idmapped bind the sandbox's uid acts as the bind's owner: it may connect to the
owner's sockets in the tree and, in a write bind, create files the host sees as the owner's.

IP-51: connect to host Unix sockets that sit inside bound trees.

A read-only bind does not stop ``connect()`` on a pathname socket, so a socket inside a bound
input or workspace (an ssh-agent socket in a bound home, a dev tool's socket in a project) is a door
to a host service. The judge plants listeners on the host, inside a read bind and inside a write
bind, each owned by the bind's owner with mode 0600 (as a user's ssh-agent socket is) and one with
mode 0777, and records every connection from outside.

Breach (ESCAPED): a planted listener recorded a connection from the attack. Positive controls:
the same attack from the bare host reaches every listener (the judge sees connections), and a
socket the manifest names in ``allow_sockets`` is reached from inside the sandbox (the path is
right and names do open a socket deliberately).

FS-53: give a file in a write bind a set-user-ID or set-group-ID bit (open with O_CREAT and
O_TMPFILE, chmod, fchmod, fchmodat, mknod). The bind's host owner is root here, so such a file
would be a set-uid-root program on the host. Breach: any file in the workspace has a set-id bit
on the host afterwards (the judge lstat()s the host tree). Positive control: the same attack on
the bare host leaves set-id files in a host directory.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from contain.probe.canaries import unix_canary
from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext
from contain.probe.context import as_run_context, run_attack, run_evidence, verdict
from contain.probe.targets import kind_keys, target_kind

__all__ = ["CASES"]

_CONNECT = r"""
import socket
for label, path in P["targets"].items():
    def dial(path=path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect(path)
            s.sendall(b"probe")
        finally:
            s.close()
        return "connected"
    rec(label, dial)
done()
"""


# target kind -> why the boundary cannot name an allowed socket there (IP-51 then plants the
# "allowed" socket as one more that must stay unreachable, and checks that the attack's paths exist).
NO_ALLOWED_SOCKETS: dict[str, str] = {
    "container:runsc": (
        "gVisor's Sentry connects to no host socket (--host-uds=none), so contain refuses allow_sockets under runsc"
    ),
}


def ip_51(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    no_allowed = next(
        (NO_ALLOWED_SOCKETS[k] for k in kind_keys(target_kind(rc.target)) if k in NO_ALLOWED_SOCKETS), None
    )
    read_ws, write_ws = rc.workspace("sockets-read"), rc.workspace("sockets-write")
    owner = os.stat(read_ws.host)
    planted = {
        "read-0600": (read_ws, "agent.sock", 0o600),
        "read-0777": (read_ws, "sub/dev.sock", 0o777),
        "write-0600": (write_ws, "lsp.sock", 0o600),
        "allowed": (write_ws, "allowed.sock", 0o777),
    }
    boundary: dict[str, Any] = {
        "files": [
            {"host": str(read_ws.host), "path": read_ws.sandbox_path, "access": "read"},
            {
                "host": str(write_ws.host),
                "path": write_ws.sandbox_path,
                "access": "write",
                "allow_sockets": [] if no_allowed else ["allowed.sock"],
            },
        ]
    }
    with contextlib.ExitStack() as stack:
        sinks = {}
        for label, (ws, relative, mode) in planted.items():
            path = Path(ws.host) / relative
            path.parent.mkdir(exist_ok=True)
            os.chown(path.parent, owner.st_uid, owner.st_gid)
            sinks[label] = stack.enter_context(unix_canary(str(path)))
            os.chown(path, owner.st_uid, owner.st_gid)
            os.chmod(path, mode)
        inside = {label: f"{ws.path_for(rc.target)}/{rel}" for label, (ws, rel, _m) in planted.items()}
        run, report = run_attack(rc.target, _CONNECT, boundary=boundary, targets=inside)
        reached_inside = {label: sink.count() for label, sink in sinks.items()}
        on_host = {label: str(Path(ws.host) / rel) for label, (ws, rel, _m) in planted.items()}
        _control, control_report = run_attack(rc.control, _CONNECT, targets=on_host)
        reached_total = {label: sink.count() for label, sink in sinks.items()}
    breaches = [
        f"the sandbox connected to the host socket {inside[label]} (mode {planted[label][2]:o})"
        for label, count in reached_inside.items()
        if (label != "allowed" or no_allowed) and count > 0
    ]
    control_reached = all(reached_total[label] > reached_inside[label] for label in planted)
    allowed_reached = reached_inside["allowed"] > 0
    absent = [label for label in planted if (report.get(label) or {}).get("errno") == "ENOENT"]
    missing = None
    if not report:
        missing = "the attack did not report"
    elif no_allowed and absent:
        missing = f"the attack's paths do not exist inside ({', '.join(absent)}), so it dialled nothing planted"
    elif not no_allowed and not allowed_reached and rc.target.has_contain_hooks:
        missing = "the socket named in allow_sockets was not reached, so the sandbox's paths are not the planted ones"
    return verdict(
        "IP-51",
        breaches=breaches,
        control_shows_breach=control_reached,
        contained="no host socket inside a read or write bind accepted a connection from the sandbox",
        control=(
            "from the host every planted socket accepted; inside, "
            + (
                f"every path existed (no allow_sockets: {no_allowed})"
                if no_allowed
                else "the socket named in allow_sockets did"
            )
        ),
        evidence={
            "run": run_evidence(run),
            "attack": report,
            "control": control_report,
            "connections_from_sandbox": reached_inside,
        },
        missing=missing,
    )


_SET_ID = r"""
import os, stat
root = P["root"]
def create(name, flags, mode=0o4755):
    def go():
        fd = os.open(os.path.join(root, name) if name else root, flags, mode)
        if not name:  # an O_TMPFILE: give it a name (linkat with AT_SYMLINK_FOLLOW)
            dest = os.path.join(root, "tmpfile").encode()
            if libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, dest, 0x400) != 0:
                raise OSError(ctypes.get_errno(), "linkat")
        os.close(fd)
        return oct(os.stat(os.path.join(root, name or "tmpfile")).st_mode)
    return go
def chmod_after(name, mode, how):
    def go():
        path = os.path.join(root, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\nid\n")
            if how == "fchmod":
                os.fchmod(f.fileno(), mode)
        if how == "chmod":
            os.chmod(path, mode)
        elif how == "fchmodat":
            os.chmod(name, mode, dir_fd=os.open(root, os.O_RDONLY))
        return oct(os.stat(path).st_mode)
    return go
rec("open O_CREAT 04755", create("open-creat", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
rec("open O_CREAT 02755", create("open-creat-g", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o2755))
rec("open O_TMPFILE 04755", create("", os.O_WRONLY | getattr(os, "O_TMPFILE", 0o20200000)))
rec("chmod 04755", chmod_after("chmod", 0o4755, "chmod"))
rec("fchmod 04755", chmod_after("fchmod", 0o4755, "fchmod"))
rec("fchmodat 06755", chmod_after("fchmodat", 0o6755, "fchmodat"))
rec("mknod S_IFREG 04755", lambda: os.mknod(os.path.join(root, "mknod"), stat.S_IFREG | 0o4755))
done()
"""


def _set_id_files(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
            found.append(f"{path.name} {stat.filemode(mode)} uid {path.lstat().st_uid}")
    return found


def fs_53(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    ws = rc.workspace("setid")
    run, report = run_attack(rc.target, _SET_ID, boundary=ws.boundary(), root=ws.path_for(rc.target))
    breaches = [f"a file in the write bind has a set-id bit on the host: {f}" for f in _set_id_files(ws.host)]
    control_dir = rc.plant_dir("setid-control")
    _control, control_report = run_attack(rc.control, _SET_ID, root=str(control_dir))
    control_files = _set_id_files(control_dir)
    return verdict(
        "FS-53",
        breaches=breaches,
        control_shows_breach=bool(control_files),
        contained="no file in the write bind got a set-user-ID or set-group-ID bit",
        control=f"on the bare host the same attack left {len(control_files)} set-id file(s)",
        evidence={"run": run_evidence(run), "attack": report, "control": control_report},
        missing=None if report else "the attack did not report",
    )


CASES: tuple[ProbeCase, ...] = (
    ProbeCase(
        "FS-53",
        Category.FS,
        "give a file in a write bind a set-uid or set-gid bit",
        "refused: no set-id file appears on the host",
        fs_53,
    ),
    ProbeCase(
        "IP-51",
        Category.IP,
        "connect to host Unix sockets inside read and write binds",
        "every socket found at start is hidden unless allow_sockets names it",
        ip_51,
    ),
)
