"""Dialling a checked address and copying bytes both ways: shared by the proxy and capture.

``dial_pinned`` connects to the addresses a ``EgressDecision`` carries, numerically and in order, with
no name lookup (the address checked is the address dialled). ``pump`` copies bytes in both
directions until both sides finish, and returns the byte counts for the record.

Not done here: any decision. A tunnel only exists after ``decide`` allowed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass

from contain.egress.addresses import IPAddress

__all__ = ["CHUNK_BYTES", "Dialled", "dial_pinned", "pump", "tune_stream"]

# Large reads and write buffers keep the per-byte overhead of the event loop low; 256 KiB matches
# the default TCP socket buffer on Linux (net.ipv4.tcp_rmem middle value is 128 KiB, doubled).
CHUNK_BYTES = 256 * 1024
STREAM_LIMIT_BYTES = 1024 * 1024


@dataclass
class Dialled:
    """An open upstream connection and the address it went to."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    address: IPAddress


def tune_stream(writer: asyncio.StreamWriter) -> None:
    """Raise the write-buffer watermark and disable Nagle, for throughput and latency."""
    transport = writer.transport
    transport.set_write_buffer_limits(high=STREAM_LIMIT_BYTES)
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def dial_pinned(addresses: tuple[IPAddress, ...], port: int, *, timeout_s: float) -> Dialled:
    """Connect to the first reachable address, numerically (``AI_NUMERICHOST`` semantics).

    Raises:
        OSError: when no address accepts (the last error), or there is none.
    """
    loop = asyncio.get_running_loop()
    last: OSError = OSError("no address to dial")
    for address in addresses:
        family = socket.AF_INET if address.version == 4 else socket.AF_INET6
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (str(address), port)), timeout_s)
        except (OSError, TimeoutError) as exc:
            sock.close()
            last = exc if isinstance(exc, OSError) else OSError(f"timed out after {timeout_s}s")
            continue
        reader, writer = await asyncio.open_connection(sock=sock, limit=STREAM_LIMIT_BYTES)
        tune_stream(writer)
        return Dialled(reader, writer, address)
    raise last


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    total = 0
    try:
        while True:
            data = await reader.read(CHUNK_BYTES)
            if not data:
                break
            writer.write(data)
            total += len(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()
    return total


async def pump(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    upstream: Dialled,
) -> tuple[int, int]:
    """Copy client→upstream and upstream→client until both directions end; close both.

    Returns:
        ``(bytes_up, bytes_down)``.
    """
    up = asyncio.ensure_future(_copy(client_reader, upstream.writer))
    down = asyncio.ensure_future(_copy(upstream.reader, client_writer))
    try:
        bytes_up, bytes_down = await asyncio.gather(up, down)
    finally:
        up.cancel()
        down.cancel()
        for writer in (upstream.writer, client_writer):
            writer.close()
    return bytes_up, bytes_down
