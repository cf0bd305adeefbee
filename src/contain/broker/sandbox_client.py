#!/usr/bin/env python3
"""broker-client: call the contain write broker from inside a sandbox (standard library only).

This single file is attached read-only into sandboxes as /.contain/broker-client. It talks HTTP
over the Unix socket /.contain/broker.sock with the capability token from /.contain/broker-token
(override with CONTAIN_BROKER_SOCKET / CONTAIN_BROKER_TOKEN_FILE). Usage::

    python3 /.contain/broker-client actions
    python3 /.contain/broker-client call update_invoice '{"invoice_id": "INV-1", "amount_cents": 10500}'
    python3 /.contain/broker-client call update_invoice '{...}' --key my-key-1 --grant cg1....

From Python (model-written code)::

    import runpy; bc = runpy.run_path("/.contain/broker-client")
    client = bc["BrokerClient"]()
    reply = client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": 10500})

Exit status: 0 succeeded, 3 pending review, 1 refused or failed, 2 usage or connection error.
The client holds no credential but the token; the broker decides everything. Retries reuse the
same idempotency key, so a retry after a lost response never writes twice.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import threading
import time
from typing import Any

__all__ = ["BrokerClient", "Reply", "main"]

DEFAULT_SOCKET = "/.contain/broker.sock"
DEFAULT_TOKEN_FILE = "/.contain/broker-token"


class Reply:
    """An HTTP status and the decoded JSON body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body

    @property
    def ok(self) -> bool:
        return self.status == 200

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body!r})"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("broker", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class BrokerClient:
    """A small client: one request per connection, JSON in and out."""

    def __init__(
        self,
        socket_path: str | None = None,
        token: str | None = None,
        *,
        tcp: tuple[str, int] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.socket_path = socket_path or os.environ.get("CONTAIN_BROKER_SOCKET", DEFAULT_SOCKET)
        if token is None:
            token_file = os.environ.get("CONTAIN_BROKER_TOKEN_FILE", DEFAULT_TOKEN_FILE)
            with open(token_file) as handle:
                token = handle.read().strip()
        self.token = token
        self.tcp = tcp
        self.timeout = timeout
        self._local = threading.local()  # one kept-alive connection per thread

    def _connection(self) -> http.client.HTTPConnection:
        if self.tcp is not None:
            return http.client.HTTPConnection(self.tcp[0], self.tcp[1], timeout=self.timeout)
        return _UnixConnection(self.socket_path, self.timeout)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        """One request on this thread's kept-alive connection (reconnects once if it went stale)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            fresh = conn is None
            if conn is None:
                conn = self._local.conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                if response.will_close:
                    self._drop()
                return Reply(response.status, json.loads(payload) if payload else {})
            except (OSError, http.client.HTTPException):
                self._drop()
                # A kept-alive connection the server closed fails before the request is read;
                # retry once on a fresh one. A fresh connection's failure is the caller's to handle.
                if fresh or attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def send_and_drop(
        self, action: str, arguments: dict[str, Any], *, idempotency_key: str | None = None, grant: str | None = None
    ) -> None:
        """Simulate a lost response: send a call, let the broker finish it, and discard the reply unread.

        The caller learns nothing about the outcome, exactly as when a response is lost in transit;
        waiting for the broker to close the connection makes the demonstration deterministic.
        """
        conn = self._connection()
        conn.connect()
        assert conn.sock is not None
        data = json.dumps(_call_body(arguments, idempotency_key, grant)).encode()
        head = (
            f"POST /v1/actions/{action} HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        )
        conn.sock.sendall(head.encode() + data)
        conn.sock.shutdown(socket.SHUT_WR)
        while conn.sock.recv(65536):  # discarded: the response is "lost"
            pass
        conn.close()

    def call(
        self,
        action: str,
        arguments: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        grant: str | None = None,
        retries: int = 20,
        backoff_s: float = 0.05,
    ) -> Reply:
        """Call an action; on 409 (in flight) or a connection error, retry with the same key."""
        body = _call_body(arguments, idempotency_key, grant)
        attempt = 0
        while True:
            try:
                reply = self.request("POST", f"/v1/actions/{action}", body)
                if reply.status not in (409, 503) or attempt >= retries:
                    return reply
            except (OSError, http.client.HTTPException):
                if attempt >= retries:
                    raise
            attempt += 1
            time.sleep(min(backoff_s * (2 ** min(attempt, 6)), 1.0))

    def actions(self) -> Reply:
        return self.request("GET", "/v1/actions")


def _call_body(arguments: dict[str, Any], key: str | None, grant: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"arguments": arguments}
    if key is not None:
        body["idempotency_key"] = key
    if grant is not None:
        body["grant"] = grant
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="broker-client", description="call the contain write broker")
    sub = parser.add_subparsers(dest="command", required=True)
    call = sub.add_parser("call", help="call an action")
    call.add_argument("action")
    call.add_argument("arguments", help="JSON object")
    call.add_argument("--key", default=None, help="idempotency key (default: derived by the broker)")
    call.add_argument("--grant", default=None, help="a review grant (cg1....)")
    sub.add_parser("actions", help="list the actions this token may call")
    sub.add_parser("openapi", help="print the broker's OpenAPI document")
    args = parser.parse_args(argv)
    try:
        client = BrokerClient()
        if args.command == "call":
            reply = client.call(args.action, json.loads(args.arguments), idempotency_key=args.key, grant=args.grant)
        elif args.command == "actions":
            reply = client.actions()
        else:
            reply = client.request("GET", "/openapi.json")
    except (OSError, ValueError, http.client.HTTPException) as exc:
        print(f"broker-client: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"http_status": reply.status, **reply.body}, indent=2, sort_keys=True))
    return 0 if reply.status == 200 else 3 if reply.status == 202 else 1


if __name__ == "__main__":
    sys.exit(main())
