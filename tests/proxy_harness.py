"""One request through the egress ``ProxyServer`` over a socketpair: no network, no upstream.

Shared by tests/unit/egress/test_proxy.py and tests/fuzz/test_fuzz_proxy.py, so the unit tests and
the fuzzer drive the server the same way: the client sends ``request``, shuts its write side and
reads until the server closes.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from contain.egress.log import EgressEvent
from contain.egress.policy import Destination, EgressDecision
from contain.egress.proxy import ProxyServer


def serve_once(
    request: bytes, decide: Callable[[Destination], EgressDecision] | None
) -> tuple[bytes, list[EgressEvent], list[Destination]]:
    """What the server answered, the events it logged and the destinations it asked about.

    ``decide`` None: the test says the server must not ask (a malformed request); asking fails it.
    """
    asked: list[Destination] = []
    events: list[EgressEvent] = []

    async def ask(destination: Destination) -> EgressDecision:
        asked.append(destination)
        assert decide is not None, "decide must not be called for a malformed request"
        return decide(destination)

    async def main() -> bytes:
        ours, theirs = socket.socketpair()
        server = ProxyServer(ask, events.append, clock=lambda: 1.0)
        reader, writer = await asyncio.open_connection(sock=ours)
        task = asyncio.ensure_future(server.handle(reader, writer))
        loop = asyncio.get_running_loop()
        theirs.setblocking(False)
        await loop.sock_sendall(theirs, request)
        theirs.shutdown(socket.SHUT_WR)
        await task
        chunks = []
        while chunk := await loop.sock_recv(theirs, 65536):
            chunks.append(chunk)
        theirs.close()
        return b"".join(chunks)

    return asyncio.run(main()), events, asked
