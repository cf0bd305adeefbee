"""Refusals no token vouches for: one entry per peer and window, then one summary entry; what is
stored is bounded; nothing counted is lost when the broker closes or a summary write fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from broker_testkit import Clock, make_broker

from contain.broker import Broker, BrokerRequest
from contain.broker.ledger import verify_entries
from contain.broker.refusals import SAMPLE_SIZE, RefusalTally, bounded_text


def _note(tally: RefusalTally, peer: str, now: float, code: str = "no_token") -> bool:
    return tally.note(peer, now=now, status=401, code=code, reason="r", action="a")


def test_the_first_refusal_of_a_peer_in_a_window_gets_its_own_entry_and_the_rest_are_counted() -> None:
    tally = RefusalTally(window_s=5)
    assert _note(tally, "uid:1", 100.0) is True
    assert [_note(tally, "uid:1", 100.0 + i / 10) for i in range(1, 40)] == [False] * 39
    assert _note(tally, "uid:2", 101.0) is True  # another peer has its own window
    assert tally.take_due(now=104.9) == []  # still open
    (window,) = tally.take_due(now=105.0)
    assert (window.peer, window.count, window.first, window.last) == ("uid:1", 39, 100.1, pytest.approx(103.9))
    assert len(window.sample) == SAMPLE_SIZE and window.by_code == {"401 no_token": 39}
    assert _note(tally, "uid:1", 105.5) is True  # a new window
    assert tally.take_due(now=200.0) == []  # windows with nothing counted write nothing


def test_a_connection_refused_at_accept_is_counted_even_as_the_first_of_its_window() -> None:
    tally = RefusalTally(window_s=5)
    assert tally.note("uid:7", now=1.0, status=503, code="peer_refused", reason="r", action="-", own_entry=False) is False
    (window,) = tally.take_due(now=1.0, everything=True)
    assert window.count == 1 and window.by_code == {"503 peer_refused": 1}


def test_the_number_of_peers_kept_apart_is_bounded() -> None:
    tally = RefusalTally(window_s=5, max_peers=3)
    assert [_note(tally, f"uid:{n}", 1.0) for n in range(3)] == [True, True, True]
    assert _note(tally, "uid:3", 1.0) is True and _note(tally, "uid:4", 1.0) is False  # both are "other"
    (window,) = tally.take_due(now=1.0, everything=True)
    assert window.peer == "other" and window.count == 1


def test_long_names_are_kept_as_a_prefix_a_length_and_a_digest() -> None:
    assert bounded_text("update_invoice") == "update_invoice"
    long = "x" * 8192
    short = bounded_text(long)
    assert len(short) < 160 and short.startswith("x" * 48) and "8192 chars, sha256:" in short
    assert bounded_text(long + "y") != short


def _flood(broker: Broker, n: int, **request: Any) -> list[int]:
    statuses = []
    for _ in range(n):
        reply = broker.handle(BrokerRequest(request.get("token"), request.get("action", "a" * 8192), {}, peer="uid:9"))
        statuses.append(reply.status)
    return statuses


def test_a_flood_without_a_token_costs_two_entries_per_window_and_every_refusal_is_counted(
    broker: Broker, clock: Clock
) -> None:
    before = len(broker.store.raw_rows())
    commits = broker.store.commits
    assert _flood(broker, 1000) == [401] * 1000
    assert _flood(broker, 500, token="cbt1.forged.x") == [401] * 500
    rows = broker.store.raw_rows()[before:]
    assert len(rows) == 1 and broker.store.commits - commits == 1  # the first one only, so far
    assert rows[0]["detail"]["code"] == "no_token" and rows[0]["detail"]["peer"] == "uid:9"
    assert len(rows[0]["action"]) < 160  # not the 8 KiB name
    clock.now += 5
    _flood(broker, 1)  # opens the next window; the summary of the last one commits with it
    rows = broker.store.raw_rows()[before:]
    assert [r["detail"]["code"] for r in rows] == ["no_token", "refusals_summarized", "no_token"]
    summary = rows[1]["detail"]
    assert summary["count"] == 1499 and summary["by_code"] == {"401 no_token": 999, "401 token": 500}
    assert len(summary["sample"]) == SAMPLE_SIZE and all(len(s["action"]) < 160 for s in summary["sample"])
    assert verify_entries(broker.store.raw_rows()) == []


def test_refusals_still_counted_are_written_when_the_broker_closes(tmp_path: Path, invoices_db: str, clock: Clock) -> None:
    broker = make_broker(tmp_path, invoices_db, clock)
    broker.start()
    _flood(broker, 10)
    broker.close()
    rows = broker.store.raw_rows()
    assert rows[-1]["detail"]["code"] == "refusals_summarized" and rows[-1]["detail"]["count"] == 9


def test_a_summary_that_could_not_be_written_is_kept_for_the_next_attempt(broker: Broker, clock: Clock) -> None:
    _flood(broker, 3)
    clock.now += 5
    store = broker.store
    real_run = store.run

    def failing_run(fn: Any, **kw: Any) -> Any:
        raise RuntimeError("disk full")

    store.run = failing_run  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        broker.flush_refusals()
    store.run = real_run  # type: ignore[method-assign]
    broker.flush_refusals()
    assert broker.store.raw_rows()[-1]["detail"]["count"] == 2


def test_refusals_with_a_valid_token_still_get_an_entry_each(broker: Broker, clock: Clock) -> None:
    from contain.broker.tokens import TokenKey, mint_token

    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=60,
                       now=clock.now)
    before = len(broker.store.raw_rows())
    assert _flood(broker, 5, token=token, action="nope") == [404] * 5
    assert len(broker.store.raw_rows()) - before == 5
