"""Who may hold a connection to the broker: the peer admission table, and the peer's name.

The broker's Unix socket is bound into each sandbox by path, by bubblewrap running as the
sandbox's host uid, which is leased at start (``runtime.host_ids``) and not known to whoever
configures the broker. So the socket file has to be connectable by "other", and the file mode
alone cannot keep other local users out. The broker does, per connection, from the kernel's
answer to ``SO_PEERCRED`` (the uid of the process that called ``connect``, as seen from the
broker's user namespace; a sandbox's uid is its host uid):

| rule | admitted | why |
|---|---|---|
| ``broker-user`` | yes | the broker's own uid: the operator's tools; it owns the ledger anyway |
| ``root`` | yes | ``contain run`` and operators; root can read the ledger anyway |
| ``leased-sandbox`` | yes | uids of ``runtime.host_ids.UID_RANGE``: only sandboxes run as these |
| ``nobody-sandbox`` | yes | a sandbox whose write bind cannot be idmapped runs as nobody (65534), shared |
| ``configured`` | yes | uids the operator lists in ``broker.yaml`` ``allowed_peer_uids`` |
| ``other-user`` | no | any other local user: closed at accept, before a byte is read |

A loopback TCP client has no credentials the broker can read; every TCP connection is the one
peer ``tcp``, admitted only because the operator configured ``tcp_port``.

Every admitted peer may hold at most ``max_connections_per_peer`` connections (the server
loop counts them). A peer is a uid, not a process: a pid is not a boundary (a sandbox can fork),
and sandboxes that fall back to uid 65534 (write binds that cannot be idmapped) share one cap.
What this does not stop: a process of an
admitted uid (for example any host daemon running as nobody) connecting; it gets the same caps
and deadlines as a sandbox, and no token.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass

from contain.runtime.host_ids import UID_RANGE
from contain.runtime.plan import NOBODY_UID

__all__ = ["PEER_RULES", "TCP_PEER", "PeerDecision", "PeerRule", "decide_peer", "peer_uid"]

TCP_PEER = "tcp"
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid (socket(7))


@dataclass(frozen=True)
class PeerRule:
    """One row of the admission table: a predicate on (peer uid, broker uid, configured uids)."""

    name: str
    matches: Callable[[int, int, Collection[int]], bool]
    admitted: bool
    why: str


PEER_RULES: tuple[PeerRule, ...] = (
    PeerRule("broker-user", lambda uid, own, _: uid == own, True, "the broker's own uid owns the ledger anyway"),
    PeerRule("root", lambda uid, own, _: uid == 0, True, "contain run and operators; root reads the ledger anyway"),
    PeerRule("leased-sandbox", lambda uid, own, _: uid in UID_RANGE, True, "only sandboxes run as leased uids"),
    PeerRule(
        "nobody-sandbox", lambda uid, own, _: uid == NOBODY_UID, True, "unidmappable write binds run as nobody"
    ),
    PeerRule("configured", lambda uid, own, extra: uid in extra, True, "listed in broker.yaml allowed_peer_uids"),
    PeerRule("other-user", lambda uid, own, _: True, False, "another local user; the socket is for sandboxes"),
)


@dataclass(frozen=True)
class PeerDecision:
    """The admission verdict for one connection: ``peer`` names it in caps and in the ledger."""

    peer: str
    admitted: bool
    rule: str


def decide_peer(uid: int | None, *, broker_uid: int, allowed_uids: Collection[int] = ()) -> PeerDecision:
    """Admit or refuse a connection from ``uid`` (None: a TCP client) by the first matching row."""
    if uid is None:
        return PeerDecision(TCP_PEER, True, "tcp")
    for rule in PEER_RULES:
        if rule.matches(uid, broker_uid, allowed_uids):
            return PeerDecision(f"uid:{uid}", rule.admitted, rule.name)
    raise AssertionError("the last row of PEER_RULES matches every uid")  # pragma: no cover


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process that connected ``sock`` (SO_PEERCRED), or None for a TCP socket.

    Raises:
        OSError: the kernel cannot say (the peer is already gone): the caller refuses it.
    """
    if sock.family != socket.AF_UNIX:
        return None
    _, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return int(uid)


def broker_uid() -> int:
    """The uid this broker runs as (effective)."""
    return os.geteuid()
