"""The broker's HTTP API: JSON over a Unix socket (and optionally loopback TCP), plus /openapi.json.

Endpoints::

    POST /v1/actions/{name}   {"arguments": {...}, "idempotency_key"?: str, "grant"?: str}
                              Authorization: Bearer <capability token>
    GET  /v1/actions          the actions this token may call, with schemas and tool digests
    GET  /v1/health           {"ok": true}
    GET  /openapi.json        this API, as OpenAPI 3.1

A minimal HTTP/1.1 server side on ``socketserver`` with one thread per connection (keep-alive,
Content-Length bodies only): the work per request is synchronous database I/O, which threads serve
well, and the group commit in ``storage`` turns concurrent requests into shared fsyncs.
``http.server`` was the first version; its header parsing (``email.parser``) cost more per
request than the broker's own decision path.

What is enforced: the TCP listener binds 127.0.0.1 only; request bodies are capped at 1 MiB; the
token is read from the Authorization header only. What is not: TLS (the Unix socket is the
intended transport; the socket file's mode and the sandbox bind decide who can connect).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import struct
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from contain.broker.actions import SecretStore
from contain.broker.config import BrokerConfig, load_actions
from contain.broker.core import Broker, BrokerReply, BrokerRequest
from contain.broker.ledger import Checkpointer, load_checkpoint_key
from contain.broker.storage import open_store
from contain.broker.tokens import TokenKey
from contain.gate.grants import GrantKey

__all__ = ["BrokerServer", "build_broker", "openapi_document", "route"]

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 1 << 20


def build_broker(config: BrokerConfig) -> Broker:
    """Load keys, secrets, actions and storage named by ``config`` (nothing is started)."""
    return Broker(
        actions=load_actions(config),
        store=open_store(config.storage),
        token_key=TokenKey.load_or_create(config.token_key_file),
        grant_key=GrantKey.load_or_create(config.grant_key_file),
        secrets=SecretStore.load(config.secrets_file),
        checkpointer=Checkpointer(load_checkpoint_key(config.checkpoint_key_file), config.ledger_checkpoints),
        checkpoint_every=config.checkpoint_every_entries,
    )


def openapi_document(broker: Broker) -> dict[str, Any]:
    """The OpenAPI 3.1 description of this broker, including every action's argument schema."""
    reply = {
        "type": "object",
        "properties": {
            "status": {"enum": ["succeeded", "failed", "refused", "pending_review", "outcome_unknown"]},
            "action": {"type": "string"},
            "idempotency_key": {"type": ["string", "null"]},
            "argument_digest": {"type": ["string", "null"]},
            "result": {"type": "object"},
            "error": {"type": "object", "properties": {"code": {"type": "string"}, "reason": {"type": "string"}}},
            "replayed": {"type": "boolean"},
            "ledger_seq": {"type": "integer"},
        },
        "required": ["status"],
    }
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Reply"}}}
    responses = {
        str(code): {"description": text, "content": content}
        for code, text in (
            (200, "the write succeeded (or its stored success is replayed)"),
            (202, "the action needs review: come back with a grant bound to argument_digest"),
            (400, "malformed request or arguments"),
            (401, "missing, forged or expired capability token"),
            (403, "out of the token's scope, not authorized for this principal, or a bad grant"),
            (404, "no such action"),
            (409, "a request with this idempotency key is in flight"),
            (422, "idempotency key reused with different arguments, or a business rule refused"),
            (500, "the outcome of an earlier attempt is unknown"),
            (502, "the executor failed (stored and replayed)"),
        )
    }
    paths: dict[str, Any] = {
        "/v1/health": {"get": {"summary": "liveness", "responses": {"200": {"description": "ok"}}}},
        "/v1/actions": {
            "get": {
                "summary": "actions this token may call",
                "security": [{"token": []}],
                "responses": {"200": {"description": "list of actions"}},
            }
        },
    }
    for name, action in sorted(broker.actions.items()):
        paths[f"/v1/actions/{name}"] = {
            "post": {
                "summary": action.description,
                "operationId": name,
                "security": [{"token": []}],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "arguments": action.input_schema(),
                                    "idempotency_key": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"},
                                    "grant": {
                                        "type": "string",
                                        "description": "a gate grant (cg1....) for review verdicts",
                                    },
                                },
                                "required": ["arguments"],
                                "additionalProperties": False,
                            }
                        }
                    },
                },
                "responses": responses,
                "x-contain-verdict": action.verdict,
                "x-contain-tool-digest": broker.tool_digests[name],
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "contain broker", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": {"Reply": reply},
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer", "bearerFormat": "cbt1 capability token"}},
        },
    }


def _refusal(status: int, code: str, reason: str) -> BrokerReply:
    return BrokerReply(status, {"status": "refused", "error": {"code": code, "reason": reason}})


def route(
    broker: Broker, method: str, path: str, headers: Mapping[str, str], body: bytes, spec: Callable[[], dict[str, Any]]
) -> BrokerReply:
    """Map one parsed HTTP request to a reply (no I/O of its own beyond the broker's)."""
    auth = headers.get("authorization", "")
    token = auth[7:].strip() if auth.startswith("Bearer ") else None
    if method == "GET" and path == "/openapi.json":
        return BrokerReply(200, spec())
    if method == "GET" and path == "/v1/health":
        return BrokerReply(200, {"ok": True})
    if method == "GET" and path == "/v1/actions":
        check = broker.verify(token or "")
        if not check.ok or check.scope is None:
            return broker.record_refusal(check.status, "token", check.reason)
        allowed = [
            {
                "name": n,
                "description": a.description,
                "verdict": a.verdict,
                "input_schema": a.input_schema(),
                "tool_digest": broker.tool_digests[n],
            }
            for n, a in sorted(broker.actions.items())
            if n in check.scope.actions
        ]
        return BrokerReply(200, {"principal": check.scope.principal, "task": check.scope.task, "actions": allowed})
    prefix = "/v1/actions/"
    if method != "POST" or not path.startswith(prefix):
        return broker.record_refusal(404, "not_found", f"{method} {path[:200]}", token=token)
    try:
        data = json.loads(body or b"{}")
        if not isinstance(data, dict):
            raise ValueError("body must be a JSON object")
    except ValueError:
        data = {"arguments": None}  # the broker refuses it (400) and records the refusal
    request = BrokerRequest(
        token=token,
        action=path[len(prefix) :],
        arguments=data.get("arguments"),
        idempotency_key=data.get("idempotency_key"),
        grant=data.get("grant"),
    )
    try:
        return broker.handle(request)
    except Exception:  # storage failure: the request did not complete; say so, never allow
        log.exception("broker failed to handle a request")
        return _refusal(503, "unavailable", "the broker cannot record this request; retry later")


_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    422: "Unprocessable Content",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
MAX_LINE_BYTES = 8192
IDLE_TIMEOUT_S = 60
MAX_HEADERS = 64


class _ParseError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _make_handler(broker: Broker, spec: Callable[[], dict[str, Any]]) -> type[socketserver.StreamRequestHandler]:
    class Handler(socketserver.StreamRequestHandler):
        """A minimal HTTP/1.1 server side: Content-Length bodies only, keep-alive, no chunking.

        Anything else (chunked bodies, oversized lines or headers) is refused and the connection
        closed: fail closed rather than guess where a request ends. An idle connection is closed
        after ``IDLE_TIMEOUT_S`` so a silent client cannot hold a thread forever. The timeout is
        the kernel's (SO_RCVTIMEO/SO_SNDTIMEO), not Python's: a Python socket timeout adds a
        poll() and a GIL round trip before every read.
        """

        timeout = None

        def setup(self) -> None:
            super().setup()
            limit = struct.pack("ll", IDLE_TIMEOUT_S, 0)  # struct timeval
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)

        def _read_line(self) -> bytes:
            line = self.rfile.readline(MAX_LINE_BYTES + 1)
            if len(line) > MAX_LINE_BYTES:
                raise _ParseError(431, "line too long")
            return line

        def _read_request(self) -> tuple[str, str, dict[str, str], bytes, bool] | None:
            line = self._read_line()
            while line in (b"\r\n", b"\n"):
                line = self._read_line()
            if not line:
                return None
            parts = line.decode("latin-1").rstrip("\r\n").split(" ")
            if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
                raise _ParseError(400, "malformed request line")
            method, path, version = parts
            headers: dict[str, str] = {}
            for _ in range(MAX_HEADERS):
                raw = self._read_line()
                if raw in (b"\r\n", b"\n", b""):
                    break
                name, sep, value = raw.decode("latin-1").partition(":")
                if not sep:
                    raise _ParseError(400, "malformed header")
                headers[name.strip().lower()] = value.strip()
            else:
                raise _ParseError(431, "too many headers")
            if "transfer-encoding" in headers:
                raise _ParseError(411, "send a Content-Length body; chunked bodies are refused")
            try:
                length = int(headers.get("content-length", "0") or 0)
            except ValueError as exc:
                raise _ParseError(400, "bad Content-Length") from exc
            if length < 0 or length > MAX_BODY_BYTES:
                raise _ParseError(413, "body over 1 MiB")
            body = self.rfile.read(length)
            if body is None:  # the client stalled mid-body past the idle timeout
                return None
            keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
            return method, path, headers, body, keep

        def _send(self, reply: BrokerReply, *, keep: bool) -> None:
            data = json.dumps(reply.body, sort_keys=True).encode()
            lines = [
                f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}",
                "Content-Type: application/json",
                f"Content-Length: {len(data)}",
                "Server: contain-broker/1",
            ]
            error = reply.body.get("error") if isinstance(reply.body, Mapping) else None
            if reply.status in (401, 403) and isinstance(error, Mapping):
                lines.append(f"Contain-Denied-By: {error.get('code', '')}")
            if not keep:
                lines.append("Connection: close")
            self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
            self.wfile.flush()

        def handle(self) -> None:
            try:
                while True:
                    try:
                        parsed = self._read_request()
                    except _ParseError as exc:
                        try:
                            reply = broker.record_refusal(exc.status, "bad_http", exc.reason)
                        except Exception:  # the ledger is unavailable: still refuse
                            reply = _refusal(exc.status, "bad_http", exc.reason)
                        self._send(reply, keep=False)
                        return
                    if parsed is None:
                        return
                    method, path, headers, body, keep = parsed
                    self._send(route(broker, method, path, headers, body, spec), keep=keep)
                    if not keep:
                        return
            except (BrokenPipeError, ConnectionResetError, TimeoutError, BlockingIOError):
                return  # the caller went away or stalled; whatever the broker did is in the ledger

    return Handler


# socketserver's default accept backlog is 5: a burst of sandboxes connecting at once would find
# it full and wait out a retry (measured: 64 clients starting together, p99 119 ms; 40 ms with 128).
_BACKLOG = 128


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = _BACKLOG


class _TcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = _BACKLOG


class BrokerServer:
    """Serves a started ``Broker`` on a Unix socket and optionally 127.0.0.1:port."""

    def __init__(self, broker: Broker, *, socket_path: str, tcp_port: int | None = None, socket_mode: int = 0o666):
        self.broker = broker
        handler = _make_handler(broker, lambda: openapi_document(broker))
        path = Path(socket_path)
        with contextlib.suppress(FileNotFoundError):
            if path.is_socket():
                path.unlink()
        self._servers: list[socketserver.BaseServer] = [_UnixServer(str(path), handler)]
        os.chmod(path, socket_mode)
        self.socket_path = str(path)
        self.tcp_address: tuple[str, int] | None = None
        if tcp_port is not None:
            tcp = _TcpServer(("127.0.0.1", tcp_port), handler)
            self.tcp_address = (str(tcp.server_address[0]), int(tcp.server_address[1]))
            self._servers.append(tcp)
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Serve in background threads."""
        for server in self._servers:
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="broker-http", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def shutdown(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
