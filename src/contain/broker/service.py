"""The broker's HTTP API: JSON over a Unix socket (and optionally loopback TCP), plus /openapi.json.

Endpoints::

    POST /v1/actions/{name}   {"arguments": {...}, "idempotency_key"?: str, "grant"?: str}
                              Authorization: Bearer <capability token>
    GET  /v1/actions          the actions this token may call, with schemas and tool digests
    GET  /v1/health           {"ok": true}
    GET  /openapi.json        this API, as OpenAPI 3.1

One thread serves every connection (``server_loop``) and drives the decision paths of all the
requests it holds together: their ledger writes share one transaction and their executors run on
executor threads. ``http_wire`` frames requests (Content-Length bodies only, keep-alive, hard limits).

What is enforced: the TCP listener binds 127.0.0.1 only; who may hold a connection is decided per
connection from SO_PEERCRED (``peers``), with per-peer caps, deadlines and body budgets
(``server_loop``); request bodies are capped at 1 MiB; the token is read from the Authorization
header only; the socket's directory must not be writable by others, and its mode is set through
a descriptor of the bound socket, 0600 by default: no other local user can connect() at all.
Sandboxes still can: when contain runs as root it stages the socket for each sandbox as an
idmapped mount that shows its owner as the sandbox's leased uid (``runtime.idmap``); an
unprivileged contain runs its sandboxes as itself. What is not enforced: TLS (the Unix socket is
the intended transport); a sandbox that falls back to uid nobody (its write bind cannot be
idmapped) cannot reach a 0600 socket, and needs ``socket_mode: 0o666`` (then the per-connection
SO_PEERCRED admission is what keeps other users out).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contain.broker.actions import SecretStore
from contain.broker.anchors import publisher_for
from contain.broker.config import BrokerConfig, load_actions
from contain.broker.core import Broker, BrokerReply, BrokerRequest, Steps
from contain.broker.http_wire import HttpRequest
from contain.broker.ledger import Checkpointer, load_checkpoint_key
from contain.broker.server_loop import ServerLimits, ServerLoop
from contain.broker.storage import check_private_directory, open_store
from contain.broker.tokens import TokenKey
from contain.errors import BrokerStateUnsafe
from contain.gate.grants import GrantKey

__all__ = ["BrokerServer", "build_broker", "openapi_document", "route_steps", "server_limits"]

# Owner only: sandboxes reach the socket through an idmapped view of it (runtime.idmap), in which
# its owner is the sandbox's own leased uid; who may use a connection is still decided per
# connection from SO_PEERCRED (``peers``).
SOCKET_MODE = 0o600


def build_broker(config: BrokerConfig) -> Broker:
    """Load keys, secrets, actions and storage named by ``config`` (nothing is started)."""
    return Broker(
        actions=load_actions(config),
        store=open_store(config.storage),
        token_key=TokenKey.load_or_create(config.token_key_file),
        grant_key=GrantKey.load_or_create(config.grant_key_file),
        secrets=SecretStore.load(config.secrets_file),
        checkpointer=Checkpointer(
            load_checkpoint_key(config.checkpoint_key_file),
            config.ledger_checkpoints,
            anchor=publisher_for(config.checkpoint_anchor),
        ),
        checkpoint_every=config.checkpoint_every_entries,
        refusal_window_s=config.refusal_window_s,
    )


def server_limits(config: BrokerConfig) -> ServerLimits:
    """The server loop's limits named by ``config`` (the rest keep ``ServerLimits`` defaults)."""
    return ServerLimits(
        request_timeout_s=config.request_timeout_s,
        max_connections_per_peer=config.max_connections_per_peer,
        allowed_peer_uids=tuple(config.allowed_peer_uids),
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
            (408, "the request did not arrive whole within the broker's request timeout"),
            (503, "no room for another unfinished body, or the store failed: retry later"),
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


def route_steps(
    broker: Broker, request: HttpRequest, peer: str = "-", *, spec: Callable[[], dict[str, Any]]
) -> BrokerReply | Steps:
    """Map one parsed HTTP request from ``peer`` to a reply, or to the path (steps) that will make it.

    Never raises for anything in the request: a body that is not a JSON object (including one
    nested too deep to parse, or with a number too long to read) becomes a recorded 400.
    """
    method, path = request.method, request.path
    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth.startswith("Bearer ") else None
    if method == "GET" and path == "/openapi.json":
        return BrokerReply(200, spec())
    if method == "GET" and path == "/v1/health":
        return BrokerReply(200, {"ok": True})
    if method == "GET" and path == "/v1/actions":
        check = broker.verify(token or "")
        if not check.ok or check.scope is None:
            return broker.refusal_steps(check.status, "token", check.reason, peer=peer)
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
        return broker.refusal_steps(404, "not_found", f"{method} {path[:200]}", token=token, peer=peer)
    body_error: str | None = None
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested some 100k deep
        data, body_error = {}, f"the body is not JSON ({type(exc).__name__})"
    if not isinstance(data, dict):
        data, body_error = {}, "the body must be a JSON object"
    return broker.steps(
        BrokerRequest(
            token=token,
            action=path[len(prefix) :],
            arguments=data.get("arguments"),
            idempotency_key=data.get("idempotency_key"),
            grant=data.get("grant"),
            peer=peer,
            body_error=body_error,
        )
    )


def _set_socket_mode(path: Path, mode: int) -> None:
    """Set the mode of the socket just bound at ``path`` through a descriptor of that very inode
    (O_PATH|O_NOFOLLOW), so a symlink swapped in after ``bind`` cannot redirect the chmod."""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.geteuid():
            raise BrokerStateUnsafe(
                f"{path} is not the socket the broker just bound (replaced before its mode was set)",
                "keep the socket in a directory only the broker's user can change",
            )
        os.chmod(f"/proc/self/fd/{fd}", mode)  # chmod through an O_PATH descriptor (proc(5))
    finally:
        os.close(fd)


# An accept backlog of 5 (socketserver's default, which an earlier version used) made a burst of
# sandboxes connecting at once wait out a retry (measured: 64 clients starting together, p99
# 119 ms; 40 ms with 128).
_BACKLOG = 128


class BrokerServer:
    """Serves a started ``Broker`` on a Unix socket and optionally 127.0.0.1:port (``server_loop``)."""

    def __init__(
        self,
        broker: Broker,
        *,
        socket_path: str,
        tcp_port: int | None = None,
        socket_mode: int = SOCKET_MODE,
        executor_threads: int = 64,
        limits: ServerLimits | None = None,
        loop_clock: Callable[[], float] = time.monotonic,
    ):
        """Bind and listen (serving starts with ``start``). ``loop_clock``: the server loop's
        monotonic clock (``ServerLoop``'s ``clock``).

        Raises:
            BrokerStateUnsafe: the socket's directory may be changed by other users, or the path
                that was bound is no longer the socket (replaced before its mode was set).
            OSError: the socket or the TCP port cannot be bound.
        """
        self.broker = broker
        path = Path(socket_path)
        check_private_directory(path.parent, what="the broker socket's directory")
        with contextlib.suppress(FileNotFoundError):
            if path.is_socket():
                path.unlink()
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listeners = [unix]
        try:
            unix.bind(str(path))
            _set_socket_mode(path, socket_mode)
            unix.listen(_BACKLOG)
            self.socket_path = str(path)
            self.tcp_address: tuple[str, int] | None = None
            if tcp_port is not None:  # loopback only: the broker is never reachable off this host
                tcp = socket.create_server(("127.0.0.1", tcp_port), backlog=_BACKLOG)
                listeners.append(tcp)
                host, port = tcp.getsockname()[:2]
                self.tcp_address = (str(host), int(port))
        except BaseException:
            for listener in listeners:
                listener.close()
            raise
        self._listeners = listeners
        spec = functools.partial(openapi_document, broker)
        self._loop = ServerLoop(
            broker,
            listeners,
            functools.partial(route_steps, broker, spec=spec),
            executor_threads=executor_threads,
            limits=limits,
            clock=loop_clock,
        )
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Serve on a background thread."""
        self._thread = threading.Thread(target=self._loop.run, name="broker-loop", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop accepting, let requests in progress finish (bounded), close every socket."""
        self._loop.stop()
        if self._thread is not None:
            self._thread.join()
        for listener in self._listeners:
            listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
