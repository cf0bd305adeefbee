"""The peer admission table: every row is reachable, decides as it says, and the last row refuses."""

from __future__ import annotations

import socket

import pytest

from contain.broker.peers import PEER_RULES, TCP_PEER, PeerRule, decide_peer, peer_uid
from contain.runtime.host_ids import UID_RANGE
from contain.runtime.plan import NOBODY_UID

BROKER_UID = 991
CONFIGURED = (1500,)
# A uid that the named row is the first to match (the table is read top to bottom).
FIRST_MATCH = {
    "broker-user": BROKER_UID,
    "root": 0,
    "leased-sandbox": UID_RANGE.start + 17,
    "nobody-sandbox": NOBODY_UID,
    "configured": 1500,
    "other-user": 1000,
}


@pytest.mark.parametrize("rule", PEER_RULES, ids=lambda r: r.name)
def test_each_row_of_the_peer_table_decides_for_the_uids_it_names(rule: PeerRule) -> None:
    uid = FIRST_MATCH[rule.name]
    decision = decide_peer(uid, broker_uid=BROKER_UID, allowed_uids=CONFIGURED)
    assert (decision.rule, decision.admitted, decision.peer) == (rule.name, rule.admitted, f"uid:{uid}")
    assert rule.why


def test_the_table_refuses_any_uid_no_row_admits_and_that_row_is_last() -> None:
    assert PEER_RULES[-1].name == "other-user" and not PEER_RULES[-1].admitted
    assert [r.admitted for r in PEER_RULES[:-1]] == [True] * (len(PEER_RULES) - 1)
    for uid in (1, 999, 1000, 65533, 65535, UID_RANGE.start - 1, UID_RANGE.stop):
        assert not decide_peer(uid, broker_uid=BROKER_UID).admitted, uid


def test_every_tcp_client_is_one_peer() -> None:
    assert decide_peer(None, broker_uid=BROKER_UID) == decide_peer(None, broker_uid=0)
    assert decide_peer(None, broker_uid=BROKER_UID).peer == TCP_PEER


def test_peer_uid_reads_the_connecting_uid_from_the_kernel() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        assert peer_uid(left) == peer_uid(right) == __import__("os").geteuid()
    tcp = socket.socket(socket.AF_INET)
    with tcp:
        assert peer_uid(tcp) is None
