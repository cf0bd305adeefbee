"""The egress proxy as a service: listen-address parsing, event lines, and a live run on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from contain.boundary.load import boundary_from_mapping
from contain.boundary.plain import plain_boundary
from contain.egress.log import MAX_FIELD_CHARS, EgressEvent
from contain.egress.standalone import event_line, parse_listen, serve_proxy
from contain.errors import SandboxStartError


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.0.0.0:3128", ("0.0.0.0", 3128)), ("[::]:3128", ("::", 3128)), ("127.0.0.1:1", ("127.0.0.1", 1))],
)
def test_a_numeric_listen_address_is_accepted(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["localhost:3128", "0.0.0.0", "0.0.0.0:0", "0.0.0.0:65536", ":3128", "1.2.3.4:３１"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(SandboxStartError):
        parse_listen(text)


def test_an_event_line_is_one_line_of_escaped_clipped_json() -> None:
    host = "evil\n\x1b[2J" + "a" * 2000
    event = EgressEvent(1.0, host, 443, None, "deny", "r", "egress.not_allowed", "connect", 0, 0)
    line = event_line(event)
    assert "\n" not in line and "\x1b" not in line
    data = json.loads(line)
    assert data["host"].startswith("evil\n\x1b[2J") and len(data["host"]) < MAX_FIELD_CHARS + 40


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    await writer.drain()
    writer.close()


async def _get(proxy_port: int, target: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    host = target.split("/")[2]
    writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


def test_the_service_allows_what_the_config_names_and_refuses_the_rest() -> None:
    events: list[EgressEvent] = []

    async def scenario() -> tuple[bytes, bytes]:
        upstream = await asyncio.start_server(_upstream, "127.0.0.1", 0)
        port = upstream.sockets[0].getsockname()[1]
        config = {"version": 1, "network": {"allow": [{"host": "127.0.0.1", "ports": [port]}]}}
        boundary = plain_boundary(boundary_from_mapping(config))
        stop, ready = asyncio.Event(), asyncio.Event()
        bound: list[tuple[str, int]] = []

        def started(address: tuple[str, int]) -> None:
            bound.append(address)
            ready.set()

        server = asyncio.create_task(
            serve_proxy(boundary, ("127.0.0.1", 0), record=events.append, started=started, stop=stop)
        )
        await asyncio.wait_for(ready.wait(), 10)
        allowed = await _get(bound[0][1], f"http://127.0.0.1:{port}/")
        refused = await _get(bound[0][1], f"http://127.0.0.1:{port + 1 if port < 65535 else port - 1}/")
        stop.set()
        await asyncio.wait_for(server, 10)
        upstream.close()
        return allowed, refused

    allowed, refused = asyncio.run(scenario())
    assert allowed.startswith(b"HTTP/1.1 200") and allowed.endswith(b"ok")
    assert refused.startswith(b"HTTP/1.1 403") and b"Contain-Denied-By: egress.ip_literal" in refused
    assert [(e.verdict, e.rule_id) for e in events] == [("allow", "network.allow[0]"), ("deny", "egress.ip_literal")]


def test_an_address_in_use_is_a_start_error() -> None:
    async def scenario() -> None:
        holder = await asyncio.start_server(_upstream, "127.0.0.1", 0)
        port = holder.sockets[0].getsockname()[1]
        try:
            await serve_proxy(plain_boundary(boundary_from_mapping({"version": 1})), ("127.0.0.1", port))
        finally:
            holder.close()

    with pytest.raises(SandboxStartError):
        asyncio.run(scenario())
