"""Egress proxy benchmark: added CONNECT latency and bulk throughput, against tinyproxy.

Not a test: it prints numbers and asserts nothing. Everything runs on the host's loopback. In
one run, interleaved round by round so drift hits every method alike:

* latency: connect + one-byte echo round trip, direct vs ``CONNECT`` through contain's proxy
  (p50, p99, and the added p50/p99);
* throughput: the same N-MiB download directly, through contain's proxy and through tinyproxy
  (Debian package ``tinyproxy``; skipped with a note if it is not installed).

The proxy under test is ``contain.egress.proxy.ProxyServer`` with the real ``Resolver`` and a
``network.hosts`` override, served by its own event loop thread as in an ``EgressSession``. It
listens on host loopback here (not inside a namespace): the namespace adds no per-byte cost.

Run: ``.venv/bin/python benchmarks/egress_bench.py [--rounds 200] [--mib 256]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from contain.boundary import boundary_from_mapping
from contain.egress.log import EventLog
from contain.egress.policy import EgressPolicy
from contain.egress.proxy import ProxyServer
from contain.egress.resolve import Resolver

Connector = Callable[[int], socket.socket]


def _serve_each_connection(server: socket.socket, serve: Callable[[socket.socket], None]) -> int:
    """Accept on ``server`` forever in a daemon thread, ``serve`` each connection in its own; the port."""

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(server.getsockname()[1])


def start_echo() -> int:
    server = socket.create_server(("127.0.0.1", 0), backlog=512)

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    return _serve_each_connection(server, serve)


def start_source(total: int) -> int:
    """A server that sends ``total`` bytes to every connection, then closes."""
    server = socket.create_server(("127.0.0.1", 0), backlog=64)
    block = memoryview(bytes(1024 * 1024))

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(1)  # start signal, so connection set-up is not timed as transfer
            left = total
            while left:
                n = conn.send(block[: min(left, len(block))])
                left -= n

    return _serve_each_connection(server, serve)


def start_contain_proxy(ports: list[int]) -> int:
    boundary = boundary_from_mapping(
        {
            "network": {
                "allow": [{"host": "bench.test", "ports": ports}],
                "hosts": {"bench.test": "127.0.0.1"},
            }
        }
    )
    resolver = Resolver(EgressPolicy.from_boundary(boundary))
    log = EventLog()
    server = ProxyServer(resolver.decide, log.record)
    ready = threading.Event()
    port: list[int] = []

    async def main() -> None:
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0, backlog=512)
        port.append(srv.sockets[0].getsockname()[1])
        ready.set()
        await asyncio.Event().wait()

    def drain_forever() -> None:  # keep the event log from filling during long runs
        while True:
            time.sleep(1)
            log.drain()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    threading.Thread(target=drain_forever, daemon=True).start()
    ready.wait(5)
    return port[0]


def start_tinyproxy(tmp: Path) -> tuple[subprocess.Popen[bytes], int] | None:
    binary = shutil.which("tinyproxy")
    if binary is None:
        return None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    conf = tmp / "tinyproxy.conf"
    conf.write_text(
        f"Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 512\nAllow 127.0.0.1\n"
        "LogLevel Critical\nUser nobody\nGroup nogroup\n"
    )
    proc = subprocess.Popen(
        [binary, "-d", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    return None


def direct(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def via_proxy(proxy_port: int, host: str) -> Connector:
    def connect(port: int) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", proxy_port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(1)  # byte by byte: never read past the head into tunnel data
            if not chunk:
                raise OSError("proxy closed the connection")
            head += chunk
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            raise OSError(f"proxy refused: {head!r}")
        return sock

    return connect


def time_round_trip(connect: Connector, port: int) -> float:
    start = time.perf_counter()
    with connect(port) as sock:
        sock.sendall(b"x")
        sock.recv(1)
    return time.perf_counter() - start


def time_transfer(connect: Connector, port: int, total: int, buf: bytearray) -> float:
    with connect(port) as sock:
        view = memoryview(buf)
        start = time.perf_counter()
        sock.sendall(b"g")
        got = 0
        while got < total:
            n = sock.recv_into(view)
            if not n:
                raise OSError(f"short transfer: {got} of {total}")
            got += n
        return time.perf_counter() - start


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="latency samples per method")
    parser.add_argument("--mib", type=int, default=256, help="MiB per throughput transfer")
    parser.add_argument("--transfers", type=int, default=5, help="transfers per method")
    args = parser.parse_args()
    total = args.mib * 1024 * 1024
    echo, source = start_echo(), start_source(total)
    ours = start_contain_proxy([echo, source])
    tmp = Path(tempfile.mkdtemp(prefix="egress-bench-"))
    tiny = start_tinyproxy(tmp)
    methods: dict[str, Connector] = {"direct": direct, "contain": via_proxy(ours, "bench.test")}
    if tiny is not None:
        methods["tinyproxy"] = via_proxy(tiny[1], "127.0.0.1")
    try:
        for connect in methods.values():  # warm up
            time_round_trip(connect, echo)
        latency: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(args.rounds):
            for name, connect in methods.items():
                latency[name].append(time_round_trip(connect, echo))
        buf = bytearray(1024 * 1024)
        rates: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(args.transfers):
            for name, connect in methods.items():
                rates[name].append(total / time_transfer(connect, source, total, buf) / 2**20)
    finally:
        if tiny is not None:
            tiny[0].kill()
            tiny[0].wait()
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"host: {os.cpu_count()} cpus; rounds={args.rounds}; transfer={args.mib} MiB x "
        f"{args.transfers}; interleaved"
    )
    print("latency (connect + 1-byte echo), ms:")
    base50, base99 = pct(latency["direct"], 0.5), pct(latency["direct"], 0.99)
    for name, values in latency.items():
        p50, p99 = pct(values, 0.5), pct(values, 0.99)
        print(
            f"  {name:10s} p50 {p50 * 1e3:7.3f}  p99 {p99 * 1e3:7.3f}  "
            f"added p50 {(p50 - base50) * 1e3:+7.3f}  added p99 {(p99 - base99) * 1e3:+7.3f}"
        )
    print("throughput, MiB/s (median of transfers; min-max):")
    for name, values in rates.items():
        print(
            f"  {name:10s} {statistics.median(values):9.1f}  ({min(values):.1f}-{max(values):.1f})"
        )
    if tiny is None:
        print("  tinyproxy  not installed (apt-get install tinyproxy)")


if __name__ == "__main__":
    main()
