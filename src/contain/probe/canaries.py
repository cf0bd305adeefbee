"""Canary sinks: judges that stand outside the sandbox and record what reached them.

A sink is a listener the probe owns: TCP, HTTP, UDP and DNS listeners on the host's loopback on
random ports (``tcp_canary``, ``http_canary``, ``udp_canary``, ``dns_canary``), and a canary in a
network namespace the probe creates itself (``netns_canary``): a veth pair with a random
``10.a.b.0/30`` (host end ``.1``, namespace end ``.2``), a TCP, UDP and DNS listener on ``.2`` and
a packet recorder (AF_PACKET) on the namespace end that logs every IPv4 packet addressed to
``.2`` whatever its protocol (TCP SYN, UDP, ICMP, SCTP...). The namespace canary is the judge for
"a packet did not leave": something the sandbox sends towards it shows up even when no listener
would answer. All traffic stays on loopback or inside the namespace pair the probe made; the
namespace (and with it both veth ends) is deleted when the context exits.

Every sink is bounded: a fixed number of connections or datagrams (past it the listener closes,
so further attempts are refused, not queued), a fixed number of bytes kept per hit, an idle
timeout per connection, and a thread that stops and closes everything on exit. A sink records;
it never decides. Cases ask ``received(canary)`` / ``count()`` and turn that into a verdict.

The second half of this module is what cases use to run attack code and read it back:
``attack_source`` (a small prelude with ``rec``/``sysc``/``done``) and ``read_report``, plus
``decide`` (the verdict order shared by the SY/IP/NE/PX cases: a breach seen by a judge is
ESCAPED whatever else happened; then a control that failed, or an attack that never reported, is
INCONCLUSIVE; only then CONTAINED).

Not done here: deciding policy; capturing traffic that never reaches a sink the probe owns
(a packet sent to the real internet is not observed, which is why attacks aim at canaries).
Needs root (CAP_NET_ADMIN) and ``ip`` for ``netns_canary``; it raises ``CanaryUnavailable`` with
the cause otherwise, and cases turn that into INCONCLUSIVE, never CONTAINED.

Why one file past 600 lines: one mechanism, the outside judges' listeners and the one event loop
that serves them; each sink kind is a small variation of the same server.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import secrets
import selectors
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from contain.probe.case import AttackRun, CaseResult, Verdict
from contain.probe.context import REPORT_MARK, attack, attack_report

__all__ = [
    "REPORT_MARK",
    "Bounds",
    "CanaryUnavailable",
    "Hit",
    "NetnsCanary",
    "Sink",
    "attack_source",
    "decide",
    "dns_canary",
    "http_canary",
    "http_response",
    "netns_canary",
    "parse_dns_query",
    "pick_test_network",
    "read_report",
    "run_evidence",
    "tcp_canary",
    "udp_canary",
    "unix_canary",
]

_LOOPBACK = "127.0.0.1"
_CLONE_NEWNET = 0x4000_0000  # <linux/sched.h>
_ETH_P_ALL = 0x0003  # <linux/if_ether.h>
_ETH_P_IP = 0x0800


class CanaryUnavailable(RuntimeError):
    """A sink could not be set up (not root, no ``ip``, namespace creation refused)."""


@dataclass(frozen=True)
class Bounds:
    """How much one sink accepts before it stops listening."""

    max_hits: int = 64  # connections (stream) or datagrams/packets (datagram) recorded
    max_bytes: int = 64 * 1024  # bytes kept per hit
    idle_s: float = 3.0  # a connection silent this long is closed


@dataclass(frozen=True)
class Hit:
    """One thing that reached a sink."""

    kind: str  # "tcp" | "http" | "udp" | "dns" | "packet"
    peer: str  # sender, e.g. "127.0.0.1:40312" (packets: "src -> dst proto N")
    data: bytes  # what arrived, up to Bounds.max_bytes (dns: the query name and type)
    time: float  # time.time() of arrival

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "peer": self.peer, "data": self.data[:300].decode("utf-8", "replace")}


@dataclass
class _Record:
    kind: str
    peer: str
    time: float
    data: bytearray = field(default_factory=bytearray)


class Sink:
    """What one listener received; safe to read from any thread while it runs."""

    def __init__(self, kind: str, host: str, port: int, bounds: Bounds) -> None:
        self.kind = kind
        self.host = host
        self.port = port
        self.bounds = bounds
        self._records: list[_Record] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.last_activity = time.monotonic()

    @property
    def address(self) -> str:
        """``host:port`` as a client would dial it."""
        return self.host if self.kind == "unix" else f"{self.host}:{self.port}"

    def _add(self, record: _Record) -> bool:
        with self._lock:
            if len(self._records) >= self.bounds.max_hits:
                return False
            self._records.append(record)
            self.last_activity = time.monotonic()
            self._changed.notify_all()
            return True

    def _extend(self, record: _Record, data: bytes) -> None:
        with self._lock:
            room = self.bounds.max_bytes - len(record.data)
            if room > 0:
                record.data += data[:room]
            self.last_activity = time.monotonic()
            self._changed.notify_all()

    def is_full(self) -> bool:
        with self._lock:
            return len(self._records) >= self.bounds.max_hits

    def hits(self) -> tuple[Hit, ...]:
        with self._lock:
            return tuple(Hit(r.kind, r.peer, bytes(r.data), r.time) for r in self._records)

    def count(self) -> int:
        with self._lock:
            return len(self._records)

    def received(self, needle: str | bytes) -> bool:
        """Whether any hit so far contains ``needle``."""
        raw = needle.encode() if isinstance(needle, str) else needle
        return any(raw in hit.data for hit in self.hits())

    def wait_for(self, needle: str | bytes, timeout_s: float) -> bool:
        """Block until ``needle`` arrived or ``timeout_s`` passed; returns whether it arrived."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.received(needle):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._lock:
                self._changed.wait(min(left, 0.05))

    def settle(self, *, quiet_s: float = 0.15, timeout_s: float = 1.5) -> None:
        """Wait until nothing arrived for ``quiet_s`` (bytes in flight land before a verdict)."""
        began = time.monotonic()
        deadline = began + timeout_s
        # Quiet is measured from the later of the call and the last arrival, so bytes the kernel
        # already holds but the server thread has not read yet are counted.
        while time.monotonic() < deadline and time.monotonic() - max(began, self.last_activity) < quiet_s:
            time.sleep(0.02)

    def evidence(self) -> dict[str, Any]:
        hits = self.hits()
        return {"sink": f"{self.kind} {self.address}", "hits": len(hits), "first": [h.to_dict() for h in hits[:5]]}


# A stream responder sees the bytes so far and returns a reply to send (then the connection
# closes) or None to keep reading. A datagram handler returns (record it?, payload, reply).
StreamResponder = Callable[[bytes], bytes | None]
DatagramHandler = Callable[[bytes, Any], tuple[bool, bytes, bytes | None]]


class _Server:
    """One thread serving a set of listening and datagram sockets until stopped."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="contain-probe-canary", daemon=True)
        self._conns: dict[socket.socket, tuple[Sink, _Record, StreamResponder | None, float]] = {}
        self._owned: list[socket.socket] = [self._wake_r, self._wake_w]

    def add_stream(self, listener: socket.socket, sink: Sink, responder: StreamResponder | None) -> None:
        listener.setblocking(False)
        self._owned.append(listener)
        self._selector.register(listener, selectors.EVENT_READ, ("listen", (sink, responder)))

    def add_datagram(self, sock: socket.socket, sink: Sink, handler: DatagramHandler) -> None:
        sock.setblocking(False)
        self._owned.append(sock)
        self._selector.register(sock, selectors.EVENT_READ, ("dgram", (sink, handler)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        for conn in list(self._conns):
            self._close_conn(conn)
        for sock in self._owned:
            with contextlib.suppress(OSError):
                sock.close()
        self._selector.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                role, payload = key.data
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if role == "listen":
                    self._accept(sock, *payload)
                elif role == "dgram":
                    self._datagram(sock, *payload)
                elif role == "conn":
                    self._read(sock)
            now = time.monotonic()
            for conn, (sink, _, _, last) in list(self._conns.items()):
                if now - last > sink.bounds.idle_s:
                    self._close_conn(conn)

    def _accept(self, listener: socket.socket, sink: Sink, responder: StreamResponder | None) -> None:
        try:
            conn, peer = listener.accept()
        except OSError:
            return
        record = _Record(sink.kind, _peer_text(peer), time.time())
        if not sink._add(record):
            conn.close()
            return
        conn.setblocking(False)
        self._conns[conn] = (sink, record, responder, time.monotonic())
        self._selector.register(conn, selectors.EVENT_READ, ("conn", None))
        if sink.is_full():  # bounded accept loop: further attempts are refused by the kernel
            self._selector.unregister(listener)
            listener.close()

    def _read(self, conn: socket.socket) -> None:
        sink, record, responder, _ = self._conns[conn]
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close_conn(conn)
            return
        sink._extend(record, data)
        self._conns[conn] = (sink, record, responder, time.monotonic())
        reply = responder(bytes(record.data)) if responder is not None else None
        if reply is not None:
            with contextlib.suppress(OSError):
                conn.setblocking(True)
                conn.settimeout(1.0)
                conn.sendall(reply)
            self._close_conn(conn)
        elif len(record.data) >= sink.bounds.max_bytes:
            self._close_conn(conn)

    def _close_conn(self, conn: socket.socket) -> None:
        self._conns.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def _datagram(self, sock: socket.socket, sink: Sink, handler: DatagramHandler) -> None:
        try:
            data, peer = sock.recvfrom(65536)
        except OSError:
            return
        keep, recorded, reply = handler(data, peer)
        if keep:
            record = _Record(sink.kind, _peer_text(peer), time.time(), bytearray(recorded[: sink.bounds.max_bytes]))
            if not sink._add(record):
                return
        if reply is not None and peer:
            with contextlib.suppress(OSError):
                sock.sendto(reply, peer)


def _peer_text(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2 and isinstance(peer[0], str):
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _bind(kind: int, host: str, port: int = 0) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    if kind == socket.SOCK_STREAM:
        sock.listen(16)
    return sock


def _keep_all(data: bytes, peer: Any) -> tuple[bool, bytes, bytes | None]:
    return True, data, None


@contextlib.contextmanager
def _serving(build: Callable[[_Server], Sink]) -> Iterator[Sink]:
    server = _Server()
    try:
        sink = build(server)
        server.start()
        yield sink
    finally:
        server.stop()


@contextlib.contextmanager
def tcp_canary(host: str = _LOOPBACK, *, bounds: Bounds | None = None) -> Iterator[Sink]:
    """A TCP listener on ``host`` (default the host's loopback), random port; records every
    connection and the bytes sent on it. Never answers."""

    def build(server: _Server) -> Sink:
        listener = _bind(socket.SOCK_STREAM, host)
        sink = Sink("tcp", host, listener.getsockname()[1], bounds or Bounds())
        server.add_stream(listener, sink, None)
        return sink

    with _serving(build) as sink:
        yield sink


@contextlib.contextmanager
def unix_canary(
    path: str | None = None, *, abstract: str | None = None, bounds: Bounds | None = None
) -> Iterator[Sink]:
    """A Unix stream listener at ``path`` (mode 0777, removed on exit) or at the abstract name
    ``abstract`` (in the probe's network namespace); records connections and bytes."""
    if (path is None) == (abstract is None):
        raise ValueError("give exactly one of path or abstract")

    def build(server: _Server) -> Sink:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if path is not None:
            sock.bind(path)
            os.chmod(path, 0o777)
        else:
            sock.bind("\0" + str(abstract))
        sock.listen(16)
        sink = Sink("unix", path or f"@{abstract}", 0, bounds or Bounds())
        server.add_stream(sock, sink, None)
        return sink

    try:
        with _serving(build) as sink:
            yield sink
    finally:
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def http_response(status: int = 200, *, headers: Mapping[str, str] | None = None, body: bytes = b"ok\n") -> bytes:
    """A complete HTTP/1.1 response with ``Connection: close``."""
    reason = {200: "OK", 302: "Found", 404: "Not Found"}.get(status, "Status")
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _http_responder(reply: bytes) -> StreamResponder:
    def respond(data: bytes) -> bytes | None:
        head_end = data.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        length = 0
        for line in data[:head_end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length" and value.strip().isdigit():
                length = int(value.strip())
        if len(data) - head_end - 4 < min(length, 64 * 1024):
            return None
        return reply

    return respond


@contextlib.contextmanager
def http_canary(
    host: str = _LOOPBACK, *, response: bytes | None = None, bounds: Bounds | None = None
) -> Iterator[Sink]:
    """An HTTP listener: records each request (head and body) and answers ``response``
    (default ``200 ok``), then closes the connection."""
    reply = response if response is not None else http_response()

    def build(server: _Server) -> Sink:
        listener = _bind(socket.SOCK_STREAM, host)
        sink = Sink("http", host, listener.getsockname()[1], bounds or Bounds())
        server.add_stream(listener, sink, _http_responder(reply))
        return sink

    with _serving(build) as sink:
        yield sink


@contextlib.contextmanager
def udp_canary(host: str = _LOOPBACK, *, bounds: Bounds | None = None) -> Iterator[Sink]:
    """A UDP socket on ``host``, random port; records every datagram. Never answers."""

    def build(server: _Server) -> Sink:
        sock = _bind(socket.SOCK_DGRAM, host)
        sink = Sink("udp", host, sock.getsockname()[1], bounds or Bounds())
        server.add_datagram(sock, sink, _keep_all)
        return sink

    with _serving(build) as sink:
        yield sink


def parse_dns_query(data: bytes) -> tuple[str, int, int] | None:
    """(query name, qtype, offset past the question) of a DNS query, or None if malformed."""
    if len(data) < 12:
        return None
    labels, offset = [], 12
    while offset < len(data):
        length = data[offset]
        offset += 1
        if length == 0:
            break
        if length & 0xC0 or offset + length > len(data):
            return None
        labels.append(data[offset : offset + length].decode("ascii", "replace"))
        offset += length
    else:
        return None
    if offset + 4 > len(data):
        return None
    (qtype,) = struct.unpack("!H", data[offset : offset + 2])
    return ".".join(labels).lower(), qtype, offset + 4


def _dns_handler(data: bytes, peer: Any) -> tuple[bool, bytes, bytes | None]:
    parsed = parse_dns_query(data)
    if parsed is None:
        return True, data, None
    name, qtype, end = parsed
    # NXDOMAIN: flags QR=1, RD copied, RA=1, RCODE=3; one question, no answers.
    flags = 0x8000 | (struct.unpack("!H", data[2:4])[0] & 0x0100) | 0x0080 | 3
    reply = data[:2] + struct.pack("!HHHHH", flags, 1, 0, 0, 0) + data[12:end]
    return True, f"{name} type={qtype}".encode(), reply


@contextlib.contextmanager
def dns_canary(host: str = _LOOPBACK, *, port: int = 0, bounds: Bounds | None = None) -> Iterator[Sink]:
    """A DNS name server over UDP: records each query's name and type, answers NXDOMAIN."""

    def build(server: _Server) -> Sink:
        sock = _bind(socket.SOCK_DGRAM, host, port)
        sink = Sink("dns", host, sock.getsockname()[1], bounds or Bounds())
        server.add_datagram(sock, sink, _dns_handler)
        return sink

    with _serving(build) as sink:
        yield sink


# --- the network-namespace canary ------------------------------------------------------------


@dataclass(frozen=True)
class NetnsCanary:
    """A namespace the probe created, reachable from the host at ``address`` over a veth pair."""

    name: str  # the ``ip netns`` name, e.g. contain-probe-1a2b3c
    address: str  # namespace end, e.g. 10.37.142.6
    host_address: str  # host end, e.g. 10.37.142.5
    tcp: Sink  # TCP listener on address, random port
    udp: Sink  # UDP socket on address, random port
    dns: Sink  # DNS server on address:53
    packets: Sink  # every IPv4 packet addressed to ``address``, any protocol

    def sinks(self) -> tuple[Sink, ...]:
        return (self.tcp, self.udp, self.dns, self.packets)

    def received(self, needle: str | bytes) -> bool:
        return any(s.received(needle) for s in self.sinks())

    def settle(self) -> None:
        for sink in self.sinks():
            sink.settle()

    def evidence(self) -> dict[str, Any]:
        return {"netns": self.name, **{s.kind: s.evidence() for s in self.sinks()}}


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)
    if proc.returncode != 0:
        raise CanaryUnavailable(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")


def _taken_networks() -> list[ipaddress.IPv4Network]:
    proc = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=10, check=False)
    routes = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, timeout=10, check=False
    )
    taken = []
    for word in (proc.stdout + " " + routes.stdout).split():
        with contextlib.suppress(ValueError):
            if "/" in word or word.count(".") == 3:
                taken.append(ipaddress.IPv4Network(word, strict=False))
    return taken


def pick_test_network(taken: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """A random 10.a.b.c/30 that overlaps none of ``taken`` (the host's addresses and routes)."""
    for _ in range(200):
        a, b, c = secrets.randbelow(254) + 1, secrets.randbelow(256), secrets.randbelow(64) * 4
        net = ipaddress.IPv4Network(f"10.{a}.{b}.{c}/30")
        if not any(net.overlaps(t) for t in taken if t.prefixlen > 0):
            return net
    raise CanaryUnavailable("no free 10.x.y.z/30 for the namespace canary (every candidate overlaps a route)")


def _in_netns(name: str, build: Callable[[], list[socket.socket]]) -> list[socket.socket]:
    """Create sockets inside netns ``name`` (a socket keeps the namespace it was made in) from a
    short-lived thread, so no other thread of the probe ever changes namespace."""
    box: dict[str, Any] = {}

    def work() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            if libc.setns(target, _CLONE_NEWNET) != 0:
                box["error"] = f"setns into {name}: {os.strerror(ctypes.get_errno())}"
                return
            try:
                box["socks"] = build()
            except OSError as exc:
                box["error"] = f"creating sockets in {name}: {exc}"
            finally:
                if libc.setns(own, _CLONE_NEWNET) != 0:
                    box["error"] = "could not return to the probe's namespace"
        finally:
            os.close(own)
            os.close(target)

    thread = threading.Thread(target=work, name="contain-probe-netns")
    thread.start()
    thread.join(timeout=10)
    if "error" in box or "socks" not in box:
        for sock in box.get("socks", []):
            sock.close()
        raise CanaryUnavailable(box.get("error", "namespace setup thread did not finish"))
    socks: list[socket.socket] = box["socks"]
    return socks


def _packet_handler(address: str) -> DatagramHandler:
    wanted = socket.inet_aton(address)

    def handle(frame: bytes, peer: Any) -> tuple[bool, bytes, bytes | None]:
        if len(frame) < 34 or struct.unpack("!H", frame[12:14])[0] != _ETH_P_IP:
            return False, b"", None
        ip = frame[14:]
        if ip[16:20] != wanted:
            return False, b"", None
        header = (ip[0] & 0x0F) * 4
        label = f"{socket.inet_ntoa(ip[12:16])} proto={ip[9]} ".encode()
        return True, label + ip[header:], None

    return handle


@contextlib.contextmanager
def netns_canary(*, bounds: Bounds | None = None) -> Iterator[NetnsCanary]:
    """A fresh network namespace with a veth link to the host and listeners on its end.

    Raises:
        CanaryUnavailable: not root, no ``ip``, or the kernel refused a step (the cause says which).
    """
    if os.geteuid() != 0:
        raise CanaryUnavailable("the namespace canary needs root (CAP_NET_ADMIN) to create a netns and veth")
    token = secrets.token_hex(3)
    name, host_if, ns_if = f"contain-probe-{token}", f"cph{token}", f"cpn{token}"
    net = pick_test_network(_taken_networks())
    host_addr, ns_addr = str(net.network_address + 1), str(net.network_address + 2)
    limits = bounds or Bounds()
    server = _Server()
    created = False
    try:
        _ip("netns", "add", name)
        created = True
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", name)
        _ip("addr", "add", f"{host_addr}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", name, "addr", "add", f"{ns_addr}/30", "dev", ns_if)
        _ip("-n", name, "link", "set", ns_if, "up")
        _ip("-n", name, "link", "set", "lo", "up")

        def build() -> list[socket.socket]:
            sniff = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
            sniff.bind((ns_if, 0))
            return [
                _bind(socket.SOCK_STREAM, ns_addr),
                _bind(socket.SOCK_DGRAM, ns_addr),
                _bind(socket.SOCK_DGRAM, ns_addr, 53),
                sniff,
            ]

        tcp_sock, udp_sock, dns_sock, sniff = _in_netns(name, build)
        canary = NetnsCanary(
            name=name,
            address=ns_addr,
            host_address=host_addr,
            tcp=Sink("tcp", ns_addr, tcp_sock.getsockname()[1], limits),
            udp=Sink("udp", ns_addr, udp_sock.getsockname()[1], limits),
            dns=Sink("dns", ns_addr, 53, limits),
            packets=Sink("packet", ns_addr, 0, Bounds(max_hits=max(limits.max_hits, 256), max_bytes=limits.max_bytes)),
        )
        server.add_stream(tcp_sock, canary.tcp, None)
        server.add_datagram(udp_sock, canary.udp, _keep_all)
        server.add_datagram(dns_sock, canary.dns, _dns_handler)
        server.add_datagram(sniff, canary.packets, _packet_handler(ns_addr))
        server.start()
        yield canary
    finally:
        server.stop()
        if created:
            # Deleting the namespace destroys the namespace end, and with it the host end.
            with contextlib.suppress(CanaryUnavailable):
                _ip("netns", "del", name)
            with contextlib.suppress(CanaryUnavailable):
                _ip("link", "del", host_if)


# --- running attack code and deciding ---------------------------------------------------------

# The attack prelude and its report are shared with the host-side cases (contain.probe.context);
# network attacks also need socket and time.
_NETWORK_IMPORTS = "import socket, time\n"


def attack_source(body: str, **params: Any) -> str:
    """Attack code: the shared prelude, ``P`` (the JSON-decoded ``params``), then ``body``."""
    return attack(_NETWORK_IMPORTS + body, **params)


def read_report(run: AttackRun) -> dict[str, Any] | None:
    """The record the attack printed last with ``done()``, or None when it never reported."""
    return attack_report(run)


def run_evidence(run: AttackRun, *, limit: int = 1500) -> dict[str, Any]:
    """A trimmed, JSON-safe account of one run."""
    out: dict[str, Any] = {
        "exit_code": run.exit_code,
        "signal": run.signal,
        "timed_out": run.timed_out,
        "duration_s": round(run.duration_s, 3),
        "stdout": run.stdout[-limit:].decode("utf-8", "replace"),
        "stderr": run.stderr[-limit:].decode("utf-8", "replace"),
    }
    if run.egress_events:
        out["egress_events"] = [dict(e) for e in run.egress_events][:30]
    return out


def decide(
    case_id: str,
    *,
    breaches: list[str],
    control_failures: list[str],
    missing: list[str],
    contained: str,
    control: str,
    evidence: dict[str, Any],
) -> CaseResult:
    """The verdict order: a breach is ESCAPED; then a failed control or a missing reading is
    INCONCLUSIVE (never a pass); only then CONTAINED.

    Args:
        breaches: what an outside judge (or the kernel's answer, for SY) saw get through.
        control_failures: positive controls that did not show the breach they should have.
        missing: readings the case needed and did not get (the attack never reported...).
        contained: one-line summary when nothing escaped.
        control: what the controls showed, in words.
    """
    if breaches:
        return CaseResult(case_id, Verdict.ESCAPED, "; ".join(breaches)[:500], evidence, control)
    if control_failures:
        summary = "positive control failed: " + "; ".join(control_failures)
        return CaseResult(case_id, Verdict.INCONCLUSIVE, summary[:500], evidence, control)
    if missing:
        return CaseResult(case_id, Verdict.INCONCLUSIVE, "; ".join(missing)[:500], evidence, control)
    return CaseResult(case_id, Verdict.CONTAINED, contained, evidence, control)
