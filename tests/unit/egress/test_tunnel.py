"""dial_pinned dials the checked addresses in order with no name lookup; pump copies both ways
and counts the bytes. Real loopback sockets; no decision is made here."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from contain.egress.tunnel import dial_pinned, pump


def _refused_port() -> int:
    """A loopback port nobody listens on (bound, never listening, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _echo_upper(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    data = await reader.read()  # until the client's EOF
    writer.write(data.upper())
    await writer.drain()
    writer.close()


def test_the_first_address_that_accepts_is_dialled_and_named():
    async def scenario() -> tuple[str, bytes]:
        server = await asyncio.start_server(_echo_upper, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            # ::1 has no listener on this port (the server is IPv4 only): refused, then 127.0.0.1.
            addresses = (ipaddress.ip_address("::1"), ipaddress.ip_address("127.0.0.1"))
            dialled = await dial_pinned(addresses, port, timeout_s=5)
            dialled.writer.write(b"ping")
            dialled.writer.write_eof()
            reply = await dialled.reader.read()
            dialled.writer.close()
            return str(dialled.address), reply

    assert asyncio.run(scenario()) == ("127.0.0.1", b"PING")


def test_no_reachable_address_raises_the_last_error():
    port = _refused_port()

    async def scenario() -> None:
        await dial_pinned((ipaddress.ip_address("127.0.0.1"),), port, timeout_s=5)

    with pytest.raises(ConnectionRefusedError):
        asyncio.run(scenario())


def test_no_address_at_all_is_an_error_not_a_lookup():
    with pytest.raises(OSError, match="no address to dial"):
        asyncio.run(dial_pinned((), 80, timeout_s=5))


def test_pump_copies_both_directions_until_both_end_and_counts_bytes():
    async def scenario() -> tuple[tuple[int, int], bytes]:
        upstream_server = await asyncio.start_server(_echo_upper, "127.0.0.1", 0)
        upstream_port = upstream_server.sockets[0].getsockname()[1]
        counts: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()

        async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            dialled = await dial_pinned((ipaddress.ip_address("127.0.0.1"),), upstream_port, timeout_s=5)
            counts.set_result(await pump(reader, writer, dialled))

        proxy_server = await asyncio.start_server(proxy, "127.0.0.1", 0)
        proxy_port = proxy_server.sockets[0].getsockname()[1]
        async with upstream_server, proxy_server:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
            writer.write(b"hello tunnel")
            writer.write_eof()
            reply = await reader.read()
            writer.close()
            return await asyncio.wait_for(counts, 5), reply

    assert asyncio.run(scenario()) == ((12, 12), b"HELLO TUNNEL")
