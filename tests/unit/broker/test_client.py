"""The client library's idempotency keys: one fresh key per logical call, the same key on its retries."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_testkit import Clock

from contain.broker import Broker, BrokerClient, BrokerServer, Reply, mint_token
from contain.broker.tokens import TokenKey


class _Scripted(BrokerClient):
    """A client whose transport answers from a script and records every body sent (no socket)."""

    def __init__(self, statuses: list[int]) -> None:
        super().__init__("/nonexistent.sock", "cbt1.x.y")
        self.statuses = statuses
        self.bodies: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        assert body is not None
        self.bodies.append(body)
        status = self.statuses.pop(0)
        if status == 0:
            raise ConnectionResetError("the broker went away")
        return Reply(status, {"status": "x", "idempotency_key": body["idempotency_key"]})


def test_a_call_without_a_key_sends_one_fresh_key_and_the_same_key_on_every_retry() -> None:
    client = _Scripted([409, 0, 503, 200])
    reply = client.call("a", {"n": 1}, backoff_s=0.0)
    keys = [b["idempotency_key"] for b in client.bodies]
    assert reply.status == 200 and len(keys) == 4 and len(set(keys)) == 1
    assert keys[0].startswith("c-") and reply.body["idempotency_key"] == keys[0]


def test_two_calls_with_equal_arguments_send_two_different_keys() -> None:
    client = _Scripted([200, 200])
    client.call("a", {"n": 1})
    client.call("a", {"n": 1})
    first, second = (b["idempotency_key"] for b in client.bodies)
    assert first != second


def test_an_explicit_key_is_sent_as_given_to_retry_an_earlier_call() -> None:
    client = _Scripted([200])
    client.call("a", {"n": 1}, idempotency_key="call-from-yesterday")
    assert client.bodies == [{"arguments": {"n": 1}, "idempotency_key": "call-from-yesterday"}]


def test_generated_keys_are_never_a_form_the_broker_reserves() -> None:
    from contain.broker.idempotency import client_key_problem
    from contain.broker.sandbox_client import new_call_key

    assert all(client_key_problem(new_call_key()) is None for _ in range(64))


@pytest.fixture
def served(broker: Broker, tmp_path: Path) -> Iterator[BrokerServer]:
    server = BrokerServer(broker, socket_path=str(tmp_path / "b.sock"))
    server.start()
    yield server
    server.shutdown()


def test_over_the_socket_11000_then_10500_then_11000_leaves_11000(
    served: BrokerServer, clock: Clock, invoices_db: str
) -> None:
    clock.now = time.time()
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=3600)
    client = BrokerClient(served.socket_path, token)
    replies = [client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": a}) for a in (11000, 10500, 11000)]
    assert [(r.status, r.body["replayed"]) for r in replies] == [(200, False)] * 3
    conn = sqlite3.connect(invoices_db)
    try:
        assert conn.execute("SELECT amount_cents FROM invoices WHERE id = 'INV-1'").fetchone()[0] == 11000
    finally:
        conn.close()
    retry = client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": 11000},
                        idempotency_key=replies[0].body["idempotency_key"])
    assert (retry.status, retry.body["replayed"]) == (200, True)


def test_under_the_fleet_a_jobs_calls_are_numbered_from_its_prefix_across_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTAIN_CALL_KEY_PREFIX", "fj-0123456789abcdef0123456789abcdef")
    monkeypatch.setenv("CONTAIN_CALL_KEY_COUNTER", str(tmp_path / "calls"))
    first_process, second_process = _Scripted([200, 200]), _Scripted([200])
    first_process.call("a", {"n": 1})
    first_process.call("a", {"n": 1})
    second_process.call("a", {"n": 2})  # another process of the same job shares the counter file
    keys = [b["idempotency_key"] for b in first_process.bodies + second_process.bodies]
    assert keys == [f"fj-0123456789abcdef0123456789abcdef-{n}" for n in (1, 2, 3)]


def test_a_fleet_prefix_without_a_counter_file_is_refused_rather_than_numbered_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTAIN_CALL_KEY_PREFIX", "fj-0123456789abcdef0123456789abcdef")
    monkeypatch.delenv("CONTAIN_CALL_KEY_COUNTER", raising=False)
    with pytest.raises(ValueError, match="CONTAIN_CALL_KEY_COUNTER"):
        _Scripted([200]).call("a", {"n": 1})


def test_a_rerun_of_a_fleet_job_in_a_fresh_sandbox_replays_its_write_instead_of_repeating_it(
    served: BrokerServer, clock: Clock, invoices_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock.now = time.time()
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=3600)
    monkeypatch.setenv("CONTAIN_CALL_KEY_PREFIX", "fj-0123456789abcdef0123456789abcdef")
    replies = []
    for run in ("first", "rerun"):  # each run is a new sandbox: a new, empty counter file
        monkeypatch.setenv("CONTAIN_CALL_KEY_COUNTER", str(tmp_path / f"calls-{run}"))
        client = BrokerClient(served.socket_path, token)
        replies.append(client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": 10700}))
    assert [(r.status, r.body["replayed"]) for r in replies] == [(200, False), (200, True)]
    conn = sqlite3.connect(invoices_db)
    try:
        applied = conn.execute("SELECT count(*) FROM applied WHERE idempotency_key LIKE 'alice/t1/fj-%'").fetchone()
    finally:
        conn.close()
    assert applied == (1,)
