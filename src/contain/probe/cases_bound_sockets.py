"""IP-51 (a project case): connect to host Unix sockets that sit inside bound trees.

A read-only bind does not stop ``connect()`` on a pathname socket, so a socket inside a bound
input or workspace (an agent socket in a bound home, a dev tool's socket in a project) is a door
to a host service. The judge plants listeners on the host, inside a read bind and inside a write
bind, each owned by the bind's owner with mode 0600 (as a user's agent socket is) and one with
mode 0777, and records every connection from outside.

Breach (ESCAPED): a planted listener recorded a connection from the attack. Positive controls:
the same attack from the bare host reaches every listener (the judge sees connections), and a
socket the manifest names in ``allow_sockets`` is reached from inside the sandbox (the path is
right and names do open a socket deliberately).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from contain.probe.canaries import unix_canary
from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext
from contain.probe.context import as_run_context, run_attack, run_evidence, verdict

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


def ip_51(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
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
                "allow_sockets": ["allowed.sock"],
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
        if label != "allowed" and count > 0
    ]
    control_reached = all(reached_total[label] > reached_inside[label] for label in planted)
    allowed_reached = reached_inside["allowed"] > 0
    missing = None
    if not report:
        missing = "the attack did not report"
    elif not allowed_reached and rc.target.has_contain_hooks:
        missing = "the socket named in allow_sockets was not reached, so the sandbox's paths are not the planted ones"
    return verdict(
        "IP-51",
        breaches=breaches,
        control_shows_breach=control_reached,
        contained="no host socket inside a read or write bind accepted a connection from the sandbox",
        control="from the host every planted socket accepted; inside, the socket named in allow_sockets did",
        evidence={
            "run": run_evidence(run),
            "attack": report,
            "control": control_report,
            "connections_from_sandbox": reached_inside,
        },
        missing=missing,
    )


CASES: tuple[ProbeCase, ...] = (
    ProbeCase(
        "IP-51",
        Category.IP,
        "connect to host Unix sockets inside read and write binds",
        "every socket found at start is hidden unless allow_sockets names it",
        ip_51,
    ),
)
