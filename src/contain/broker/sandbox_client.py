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
The client holds no credential but the token; the broker decides everything.

Idempotency keys: a key names one logical call. ``call`` makes a fresh random key (``new_call_key``)
when the caller gives none and sends that same key on each of its own retries, so a retry after a
lost response never writes twice, and two calls are two writes even with equal arguments. To
retry a call yourself later (another process, another run of the CLI), pass the key its reply
named (``idempotency_key``) with ``--key`` / ``idempotency_key=``. The broker scopes keys to the
task of the token, and refuses the forms it reserves for itself (``s:``, ``d:``).

Under ``contain fleet`` a job may run more than once (its node died), so its keys must be the
same on every run: the node sets CONTAIN_CALL_KEY_PREFIX (derived from the job's identity, see
``contain.fleet.identity``) and CONTAIN_CALL_KEY_COUNTER (a file in scratch), and ``next_call_key``
numbers the job's calls ``<prefix>-1``, ``<prefix>-2``, ... across all of its processes (the
counter file is locked). A rerun making the same calls in the same order replays them; a rerun
whose n-th call differs is refused (422), never written twice.
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

__all__ = ["BrokerClient", "Reply", "main", "new_call_key", "next_call_key"]

DEFAULT_SOCKET = "/.contain/broker.sock"
DEFAULT_TOKEN_FILE = "/.contain/broker-token"
CALL_KEY_PREFIX_ENV = "CONTAIN_CALL_KEY_PREFIX"  # set by contain fleet: the job's key prefix
CALL_KEY_COUNTER_ENV = "CONTAIN_CALL_KEY_COUNTER"  # set by contain fleet: the job's call counter file


def new_call_key() -> str:
    """A key for one logical call: ``c-`` + 128 random bits in hex (never one of the broker's reserved forms)."""
    return "c-" + os.urandom(16).hex()  # the OS CSPRNG; stdlib only, as the rest of this file


def next_call_key() -> str:
    """The key for a new logical call: ``<prefix>-<n>`` under contain fleet, else ``new_call_key()``.

    With CONTAIN_CALL_KEY_PREFIX set, ``n`` counts this job's calls from 1, in a counter file
    (CONTAIN_CALL_KEY_COUNTER) that every process of the job shares under an exclusive lock.

    Raises:
        ValueError: the prefix is set without a counter file (numbering per process would give
            two processes of one job the same keys).
    """
    prefix = os.environ.get(CALL_KEY_PREFIX_ENV)
    if not prefix:
        return new_call_key()
    counter_path = os.environ.get(CALL_KEY_COUNTER_ENV)
    if not counter_path:
        raise ValueError(f"{CALL_KEY_PREFIX_ENV} is set without {CALL_KEY_COUNTER_ENV}")
    import fcntl

    fd = os.open(counter_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.read(fd, 32).strip()
        number = (int(text) if text.isdigit() else 0) + 1
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(number).encode())
    finally:
        os.close(fd)  # releases the lock
    return f"{prefix}-{number}"


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


MAX_HEAD_BYTES = 65536


class _Connection:
    """One kept-alive HTTP/1.1 connection to the broker: a request is written whole, the reply read
    by its Content-Length. A few lines instead of ``http.client``, whose per-response header parsing
    (``email.parser``) cost more than the broker spends deciding a call."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def exchange(self, request: bytes) -> tuple[int, bool, bytes]:
        """Send ``request``; return (status, keep-alive, body)."""
        self.sock.sendall(request)
        status, keep, length = self._read_head()
        if length is None:  # no Content-Length: the body runs to the end of the connection
            while self._receive():
                pass
            body, self._buffer = self._buffer, b""
            return status, False, body
        while len(self._buffer) < length:
            if not self._receive():
                raise http.client.IncompleteRead(self._buffer, length - len(self._buffer))
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return status, keep, body

    def _receive(self) -> bool:
        chunk = self.sock.recv(65536)
        self._buffer += chunk
        return bool(chunk)

    def _read_head(self) -> tuple[int, bool, int | None]:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("response head")
            if not self._receive():
                raise http.client.RemoteDisconnected("the broker closed the connection without a reply")
        head, self._buffer = self._buffer[:end].decode("latin-1"), self._buffer[end + 4 :]
        lines = head.split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise http.client.BadStatusLine(lines[0])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        length = headers.get("content-length")
        if length is not None and not length.isdigit():
            raise http.client.HTTPException(f"bad Content-Length {length!r}")
        return int(code), keep, None if length is None else int(length)

    def close(self) -> None:
        self.sock.close()


class BrokerClient:
    """A small client: one kept-alive connection per thread, JSON in and out."""

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

    def _socket(self) -> socket.socket:
        if self.tcp is not None:
            return socket.create_connection(self.tcp, timeout=self.timeout)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        return sock

    def _head(self, method: str, path: str, length: int, *, close: bool = False) -> bytes:
        host = f"{self.tcp[0]}:{self.tcp[1]}" if self.tcp is not None else "broker"
        ending = "Connection: close\r\n\r\n" if close else "\r\n"
        return (
            f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n{ending}"
        ).encode()

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        """One request on this thread's kept-alive connection (reconnects once if it went stale)."""
        data = json.dumps(body).encode() if body is not None else b""
        message = self._head(method, path, len(data)) + data
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            fresh = conn is None
            if conn is None:
                conn = self._local.conn = _Connection(self._socket())
            try:
                status, keep, payload = conn.exchange(message)
                if not keep:
                    self._drop()
                return Reply(status, json.loads(payload) if payload else {})
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
        Without ``idempotency_key`` the call gets a fresh key that nobody learns (no retry can reach it).
        """
        sock = self._socket()
        data = json.dumps(_call_body(arguments, idempotency_key or next_call_key(), grant)).encode()
        sock.sendall(self._head("POST", f"/v1/actions/{action}", len(data), close=True) + data)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):  # discarded: the response is "lost"
            pass
        sock.close()

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
        """Call an action once; on 409 (in flight), 503 or a connection error, retry the same call.

        Args:
            idempotency_key: the key of this logical call; default ``next_call_key()``. Pass
                the key of an earlier call (its reply's ``idempotency_key``) only to retry that call.

        Returns:
            The broker's reply; its body names the key used, for a later retry.
        """
        body = _call_body(arguments, idempotency_key or next_call_key(), grant)
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


def _call_body(arguments: dict[str, Any], key: str, grant: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"arguments": arguments, "idempotency_key": key}
    if grant is not None:
        body["grant"] = grant
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="broker-client", description="call the contain write broker")
    sub = parser.add_subparsers(dest="command", required=True)
    call = sub.add_parser("call", help="call an action")
    call.add_argument("action")
    call.add_argument("arguments", help="JSON object")
    call.add_argument(
        "--key", default=None, help="idempotency key: only to retry an earlier call (default: a new key for this call)"
    )
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
