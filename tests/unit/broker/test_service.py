"""HTTP over the Unix socket: the client, status codes, headers, OpenAPI, lost responses."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_testkit import Clock

from contain.broker import Broker, BrokerClient, BrokerServer, client_script_bytes, mint_token, openapi_document
from contain.broker.tokens import TokenKey


@pytest.fixture
def served(broker: Broker, tmp_path: Path) -> Iterator[BrokerServer]:
    server = BrokerServer(broker, socket_path=str(tmp_path / "b.sock"), tcp_port=0)
    server.start()
    yield server
    server.shutdown()


def _client(server: BrokerServer, clock: Clock, **kw: object) -> BrokerClient:
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=3600)
    return BrokerClient(server.socket_path, token, **kw)  # type: ignore[arg-type]


def test_call_over_unix_socket_and_replay(served: BrokerServer, clock: Clock) -> None:
    clock.now = time.time()
    client = _client(served, clock)
    first = client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": 10500}, idempotency_key="h1")
    second = client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": 10500}, idempotency_key="h1")
    assert (first.status, first.body["replayed"], second.status, second.body["replayed"]) == (200, False, 200, True)


def test_loopback_tcp_listener_answers_too(served: BrokerServer, clock: Clock) -> None:
    clock.now = time.time()
    assert served.tcp_address is not None and served.tcp_address[0] == "127.0.0.1"
    reply = _client(served, clock, tcp=served.tcp_address).actions()
    assert reply.status == 200 and [a["name"] for a in reply.body["actions"]] == ["update_invoice"]


def test_forged_token_is_401_with_denied_by_header(served: BrokerServer) -> None:
    import http.client
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.connect(served.socket_path)
    conn = http.client.HTTPConnection("x")
    conn.sock = sock
    conn.request("POST", "/v1/actions/update_invoice", body=b'{"arguments": {}}', headers={"Authorization": "Bearer cbt1.e30.AA"})
    response = conn.getresponse()
    assert response.status == 401 and response.getheader("Contain-Denied-By") == "token"
    assert json.loads(response.read())["status"] == "refused"


def test_malformed_body_is_400_and_recorded(served: BrokerServer, broker: Broker, clock: Clock) -> None:
    clock.now = time.time()
    client = _client(served, clock)
    reply = client.request("POST", "/v1/actions/update_invoice", None)
    assert reply.status == 400 and broker.store.raw_rows()[-1]["kind"] == "denial"


def test_lost_response_then_retry_writes_once(served: BrokerServer, broker: Broker, clock: Clock, invoices_db: str) -> None:
    clock.now = time.time()
    client = _client(served, clock)
    args = {"invoice_id": "INV-1", "amount_cents": 10700}
    client.send_and_drop("update_invoice", args, idempotency_key="lost-1")
    reply = client.call("update_invoice", args, idempotency_key="lost-1")
    assert reply.status == 200
    import sqlite3

    conn = sqlite3.connect(invoices_db)
    assert conn.execute("SELECT count(*) FROM applied").fetchone()[0] == 1
    conn.close()


def test_openapi_document_names_every_action_and_status(served: BrokerServer, broker: Broker, clock: Clock) -> None:
    clock.now = time.time()
    reply = _client(served, clock).request("GET", "/openapi.json")
    assert reply.status == 200 and reply.body == json.loads(json.dumps(openapi_document(broker)))
    op = reply.body["paths"]["/v1/actions/update_invoice"]["post"]
    assert set(op["responses"]) >= {"200", "202", "400", "401", "403", "404", "409", "422"}
    assert op["requestBody"]["content"]["application/json"]["schema"]["properties"]["arguments"]["properties"]["invoice_id"]


def test_socket_is_created_owner_only_by_default(served: BrokerServer) -> None:
    assert Path(served.socket_path).stat().st_mode & 0o777 == 0o600


def test_client_script_is_standalone_stdlib() -> None:
    text = client_script_bytes().decode()
    imports = {line.split()[1].split(".")[0] for line in text.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "argparse", "http", "json", "os", "socket", "sys", "threading", "time", "typing"}
    assert len(client_script_bytes()) < 60_000


def _raw(server: BrokerServer, payload: bytes) -> bytes:
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.connect(server.socket_path)
    sock.sendall(payload)
    sock.shutdown(socket.SHUT_WR)
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    sock.close()
    return out


@pytest.mark.parametrize(("payload", "status"), [
    (b"POST /v1/actions/update_invoice HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"411"),
    (b"GARBAGE\r\n\r\n", b"400"),
    (b"GET / HTTP/2\r\n\r\n", b"400"),
    (b"POST /v1/actions/x HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", b"413"),
    (b"GET /v1/health HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n", b"431"),
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", b"431"),
])
def test_malformed_http_is_refused_closed_and_recorded(served: BrokerServer, payload: bytes, status: bytes) -> None:
    reply = _raw(served, payload)
    assert reply.startswith(b"HTTP/1.1 " + status) and b"Connection: close" in reply
    last = served.broker.store.raw_rows()[-1]
    assert (last["kind"], last["detail"]["status"], last["detail"]["code"]) == ("denial", int(status), "bad_http")


def test_keep_alive_serves_two_requests_on_one_connection_and_http10_closes(served: BrokerServer) -> None:
    one = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
    reply = _raw(served, one + one)
    assert reply.count(b"HTTP/1.1 200 OK") == 2
    reply = _raw(served, b"GET /v1/health HTTP/1.0\r\n\r\n" + one)
    assert reply.count(b"HTTP/1.1 200 OK") == 1 and b"Connection: close" in reply


def test_unknown_path_is_404_and_recorded(served: BrokerServer) -> None:
    assert _raw(served, b"GET /etc/passwd HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert served.broker.store.raw_rows()[-1]["detail"]["code"] == "not_found"


def test_bad_token_on_the_action_list_is_401_and_recorded(served: BrokerServer) -> None:
    assert BrokerClient(served.socket_path, "cbt1.x.y").actions().status == 401
    assert served.broker.store.raw_rows()[-1]["detail"]["code"] == "token"


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 200_000 + b"]" * 200_000,  # RecursionError in json.loads: it was a 503 with no entry
        b'{"arguments": {"n": ' + b"9" * 5000 + b"}}",  # past Python's int digit limit
        b"\xff\xfe{",
        b"[1, 2]",
    ],
    ids=["200k-deep", "5000-digit-number", "not-utf8", "not-an-object"],
)
def test_a_body_that_is_not_a_json_object_is_a_recorded_400(
    served: BrokerServer, broker: Broker, clock: Clock, body: bytes
) -> None:
    import socket

    from contain.broker.http_wire import HttpRequest, request_bytes

    clock.now = time.time()
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=3600)
    headers = {"authorization": f"Bearer {token}", "connection": "close"}
    request = HttpRequest("POST", "/v1/actions/update_invoice", headers, body, False)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(served.socket_path)
        sock.sendall(request_bytes(request))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    reply = json.loads(payload)
    assert head.startswith(b"HTTP/1.1 400 ") and reply["error"]["code"] == "bad_body"
    entry = broker.store.raw_rows()[-1]
    assert (entry["kind"], entry["detail"]["code"], entry["seq"]) == ("denial", "bad_body", reply["ledger_seq"])
