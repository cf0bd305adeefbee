"""The transparent path: a connection to a placeholder address becomes a checked connection.

The stub resolver hands out one placeholder per allowed name (``PlaceholderTable``), and the
session binds a listener on ``placeholder:port`` inside the sandbox for every port the manifest
allows that name. A connection there is decided exactly like ``CONNECT name:port`` (the name is
known from the listener, never from anything the client sends), then dialled to the checked
address and pumped.

Not enforced here: ports the manifest does not allow for the name have no listener, so the
sandbox's kernel refuses them (ECONNREFUSED) and no event is recorded for them. Placeholders
are allocated in order; a workload that pre-binds a future placeholder only breaks its own
lookups of that name (the bind fails and the stub answers NXDOMAIN).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any

from contain._log import LazyLogger
from contain.egress.log import EgressEvent, decision_event
from contain.egress.policy import Destination, EgressDecision, Via
from contain.egress.proxy import DIAL_TIMEOUT_S, Decide, Record
from contain.egress.tunnel import dial_pinned, pump, tune_stream

__all__ = ["PLACEHOLDER_NETWORK", "CaptureServer", "PlaceholderTable"]

log = LazyLogger(__name__)

# Inside 127/8, so the sandbox's lo already routes it and nothing outside the netns ever sees
# it; /16 leaves room for 65534 names per session.
PLACEHOLDER_NETWORK = ipaddress.IPv4Network("127.77.0.0/16")


class PlaceholderTable:
    """Stable name → placeholder mapping for one session (first come, first numbered)."""

    def __init__(self, *, max_names: int = 4096) -> None:
        self.max_names = min(max_names, PLACEHOLDER_NETWORK.num_addresses - 2)
        self._by_name: dict[str, ipaddress.IPv4Address] = {}

    def get(self, name: str) -> ipaddress.IPv4Address | None:
        return self._by_name.get(name)

    def is_full(self) -> bool:
        return len(self._by_name) >= self.max_names

    def allocate(self, name: str) -> ipaddress.IPv4Address:
        """Return ``name``'s placeholder, allocating the next one if needed.

        Raises:
            OverflowError: when the table is full.
        """
        existing = self._by_name.get(name)
        if existing is not None:
            return existing
        if self.is_full():
            raise OverflowError(f"more than {self.max_names} names resolved in one session")
        address = PLACEHOLDER_NETWORK.network_address + len(self._by_name) + 1
        self._by_name[name] = address
        return address

    def items(self) -> list[tuple[str, ipaddress.IPv4Address]]:
        return list(self._by_name.items())


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


class CaptureServer:
    """Serves placeholder listeners; ``handler_for(name, port)`` is a start_server callback."""

    def __init__(self, decide: Decide, record: Record, *, clock: Callable[[], float] = time.time) -> None:
        self.decide = decide
        self.record = record
        self.clock = clock

    def handler_for(self, name: str, port: int) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await self._serve(name, port, reader, writer)
            except Exception:  # one connection's failure never reaches the loop
                log.exception("transparent connection to %s:%d failed", name, port)
                writer.transport.abort()

        return handle

    def _event(
        self,
        decision: EgressDecision,
        *,
        address: str | None = None,
        up: int = 0,
        down: int = 0,
        reason: str | None = None,
    ) -> EgressEvent:
        return decision_event(
            decision, str(Via.TRANSPARENT), time=self.clock(), address=address, up=up, down=down, reason=reason
        )

    async def _serve(self, name: str, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tune_stream(writer)
        decision = await self.decide(Destination(name, port, Via.TRANSPARENT))
        if not decision.is_allowed:
            self.record(self._event(decision))
            _reset(writer)
            return
        try:
            upstream = await dial_pinned(decision.addresses, port, timeout_s=DIAL_TIMEOUT_S)
        except OSError as exc:
            self.record(self._event(decision, reason=f"{name}:{port} is allowed, but connecting failed: {exc}"))
            _reset(writer)
            return
        up, down = await pump(reader, writer, upstream)
        self.record(self._event(decision, address=str(upstream.address), up=up, down=down))


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST, so the client sees 'connection reset' at once rather than an EOF."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
