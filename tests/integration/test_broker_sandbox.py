"""End to end: a real broker on a Unix socket, a sandbox running python3 with the client script.

The sandbox gets only what ``attachments_for`` hands it (token, socket, client) and no file of
the broker's: it updates its principal's invoice (allowed), tries another principal's (refused,
403), makes a large change (202, pending review), and retries after a lost response (replayed,
no second write). The invoices database is checked from the host afterwards.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "broker"))

from broker_testkit import make_broker

from contain.boundary import Boundary
from contain.broker import BrokerServer, attachments_for
from contain.broker.tokens import TokenKey
from contain.runtime import Sandbox

pytestmark = pytest.mark.needs_bwrap

MODEL_WRITTEN = r'''
import json, runpy
bc = runpy.run_path("/.contain/broker-client")
client = bc["BrokerClient"]()
out = {}
r = client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": 10500}); out["own"] = [r.status, r.body]
r = client.call("update_invoice", {"invoice_id": "INV-2", "amount_cents": 1}); out["other"] = [r.status, r.body]
r = client.call("update_invoice", {"invoice_id": "INV-3", "amount_cents": 90000}); out["large"] = [r.status, r.body]
args = {"invoice_id": "INV-1", "amount_cents": 10800, "note": "retry"}
client.send_and_drop("update_invoice", args, idempotency_key="lost-1")
r = client.call("update_invoice", args, idempotency_key="lost-1"); out["retry"] = [r.status, r.body]
try:
    open(__import__("os").environ["INVOICES_DB"], "rb"); out["db"] = "READABLE"
except OSError as exc:
    out["db"] = type(exc).__name__
print(json.dumps(out))
'''


@pytest.fixture
def live_broker(host_tmp: Path) -> Iterator[tuple[BrokerServer, str]]:
    import invoice_actions

    private = host_tmp / "private"
    private.mkdir(mode=0o700)
    db = str(private / "invoices.db")
    invoice_actions.create_database(db, api_key="k-secret-1")
    broker = make_broker(private, db, _RealClock())
    broker.start()
    server = BrokerServer(broker, socket_path=str(host_tmp / "broker.sock"))
    server.start()
    yield server, db
    server.shutdown()
    broker.close()


class _RealClock:
    def __call__(self) -> float:
        import time

        return time.time()


def _count(db: str, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_sandboxed_script_writes_through_the_broker_exactly_once(live_broker: tuple[BrokerServer, str]) -> None:
    server, db = live_broker
    boundary = Boundary.model_validate({
        "task": "invoices-demo", "principal": "alice",
        "records": [{"name": "invoices", "actions": ["update_invoice"]}],
        "env": {"INVOICES_DB": db},
    })
    attachments = attachments_for(boundary, socket_path=server.socket_path, token_key=TokenKey(b"t" * 32), ttl_s=300)
    with Sandbox(boundary, attachments=attachments) as sb:
        result = sb.run(["python3", "-c", MODEL_WRITTEN], timeout=60)
    assert result.exit_code == 0, result.stderr.data.decode()
    out = json.loads(result.stdout.data)
    assert out["own"][0] == 200 and out["own"][1]["result"]["new_amount_cents"] == 10500
    assert out["other"][0] == 403 and out["other"][1]["error"]["code"] == "unauthorized"
    assert out["large"][0] == 202 and out["large"][1]["status"] == "pending_review"
    assert out["retry"][0] == 200 and out["retry"][1]["replayed"] is True
    assert out["db"] in ("FileNotFoundError", "PermissionError")
    assert _count(db, "SELECT id, amount_cents FROM invoices ORDER BY id") == [("INV-1", 10800), ("INV-2", 20000), ("INV-3", 50000)]
    assert _count(db, "SELECT count(*) FROM applied WHERE idempotency_key = 'alice/invoices-demo/lost-1'") == [(1,)]
    rows = server.broker.store.raw_rows()
    assert {(r["task"], r["principal"]) for r in rows} == {("invoices-demo", "alice")}
    assert any(r["kind"] == "denial" and r["detail"]["code"] == "unauthorized" for r in rows)


def test_boundary_without_principal_gets_no_token(host_tmp: Path) -> None:
    from contain.errors import BoundaryInvalid

    boundary = Boundary.model_validate({"records": [{"name": "invoices", "actions": ["update_invoice"]}]})
    with pytest.raises(BoundaryInvalid, match="principal"):
        attachments_for(boundary, socket_path=str(host_tmp / "x.sock"), token_key=TokenKey(b"t" * 32), ttl_s=60)
