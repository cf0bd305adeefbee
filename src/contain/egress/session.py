"""One sandbox's egress: listeners inside its network namespace, served by a host-side loop.

``start_egress`` is the orchestrator, in order:

1. Build the policy from the boundary and probe this host's own addresses (facts, once).
2. Open the sandbox's netns file once; the fd pins the namespace against pid reuse.
3. Plan the listeners: proxy on 127.0.0.1:3128, DNS stub on 127.0.0.1:53 (UDP and TCP), and a
   capture listener on ``placeholder:port`` for every exact allowed name and port.
4. Bind them all inside the netns (``netns.bind_in_netns``) before any workload exists.
5. Start a background thread with its own event loop, serve every listener there, and return
   only when all are serving. Any error on the way raises ``SandboxStartError`` and leaves
   nothing behind.

Wildcard names (``*.example.com``) get their placeholder and capture listeners when the stub
first resolves a concrete name, before it answers.

Fail closed: when the loop stops for any reason (``close``, or a crash), every listening socket
is closed, so connections inside the sandbox are refused; nothing falls back to an open path.
Bounded here: at most ``MAX_OPEN_CONNECTIONS`` connections open at once across every listener
(``ConnectionLimit``; over it a connection is aborted and recorded as a refusal); the events
themselves are bounded by bytes in ``log.py``.
Not enforced here: anything inside an allowed tunnel (see ``proxy.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import threading
import time
from collections.abc import Callable

from contain._log import LazyLogger
from contain.boundary.hostnames import HostnameError, canonical_hostname
from contain.boundary.plain import PlainBoundary
from contain.egress.addresses import local_interface_addresses
from contain.egress.capture import PLACEHOLDER_NETWORK, CaptureServer, Handler, PlaceholderTable
from contain.egress.dnsstub import DnsStub
from contain.egress.log import EgressEvent, EventBatch, EventLog
from contain.egress.netns import SocketSpec, bind_in_netns, close_quietly, open_netns
from contain.egress.policy import EgressPolicy, Via
from contain.egress.proxy import ProxyServer
from contain.egress.resolve import Lookup, Resolver, system_lookup
from contain.errors import SandboxStartError

__all__ = [
    "DNS_ADDRESS",
    "MAX_OPEN_CONNECTIONS",
    "PROXY_ADDRESS",
    "RESOLV_CONF_TEXT",
    "ConnectionLimit",
    "EgressSession",
    "plan_loopback_captures",
    "plan_sandbox_env",
    "start_egress",
]

log = LazyLogger(__name__)

PROXY_ADDRESS = ("127.0.0.1", 3128)
DNS_ADDRESS = ("127.0.0.1", 53)
START_TIMEOUT_S = 10.0
BIND_FIX = (
    "check that the sandbox's network namespace exists and has lo up, that this process runs "
    "as root (setns and port 53 need it), and that nothing in the sandbox started before egress"
)

# Connections the sandbox may hold open at once to all egress listeners together. Each costs the
# host a task, a transport and its buffers (up to MAX_HEAD_BYTES of request head, the stream
# reader's 64 KiB limit): ~100 KiB at worst, so 512 of them stay under 64 MiB, while the sandbox's
# own fd and pid limits would let it open 100,000. Tools open a few dozen at most.
MAX_OPEN_CONNECTIONS = 512

# glibc reads at most three nameservers; one, with short timeouts, so a refused name fails fast.
RESOLV_CONF_TEXT = "nameserver 127.0.0.1\noptions timeout:2 attempts:2\n"


def plan_sandbox_env(proxy_url: str) -> dict[str, str]:
    """Proxy variables for every workload, including the tool-specific spellings."""
    no_proxy = "localhost,127.0.0.1,::1"
    env = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = proxy_url
        env[name.lower()] = proxy_url
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    env["npm_config_proxy"] = proxy_url  # npm reads its own config keys, not only the env
    env["npm_config_https_proxy"] = proxy_url
    env["npm_config_noproxy"] = no_proxy
    env["PIP_PROXY"] = proxy_url  # pip --proxy
    env["NODE_USE_ENV_PROXY"] = "1"  # Node >= 24 honours HTTP(S)_PROXY for fetch with this set
    return env


def plan_loopback_captures(policy: EgressPolicy) -> tuple[tuple[str, int], ...]:
    """Capture listeners for the host loopback destinations the manifest names.

    Inside the sandbox, 127.0.0.1 is the sandbox's own loopback, and clients skip the proxy for
    it (``NO_PROXY`` lists it, and programs that ignore proxy variables never use one). So a named
    host loopback service (``127.0.0.1:8080``, ``[::1]:5432``) gets a capture listener at the same
    address and port inside the sandbox; a connection there is decided exactly like ``CONNECT
    127.0.0.1:8080`` and dialled from the host. Only single addresses are listened on (a range such
    as 127.0.0.0/8 is reachable through the proxy only), and only addresses the manifest names, so
    nothing opens that the manifest did not name.

    Raises:
        SandboxStartError: a named destination is one of the sandbox's own egress listeners.
    """
    reserved = {PROXY_ADDRESS, DNS_ADDRESS}
    planned: list[tuple[str, int]] = []
    for entry in policy.entries:
        network = entry.network
        if network is None or not network.is_loopback or network.num_addresses != 1:
            continue
        address = str(network.network_address)
        for port in sorted(entry.ports):
            if (address, port) in reserved or network.network_address in PLACEHOLDER_NETWORK:
                raise SandboxStartError(
                    f"network.allow names {address}:{port}, which is the sandbox's own egress listener "
                    f"(proxy {PROXY_ADDRESS[0]}:{PROXY_ADDRESS[1]}, DNS port 53, placeholders {PLACEHOLDER_NETWORK})",
                    "reach that host service on another loopback address or port",
                )
            if (address, port) not in planned:
                planned.append((address, port))
    return tuple(planned)


class ConnectionLimit:
    """Bounds the connections open at once across every listener of one session.

    A connection over the limit is aborted as soon as it is accepted and recorded as a refusal
    (``egress.connection_limit``) in the bounded event log. Runs on the session's loop thread
    only, so the counter needs no lock.
    """

    def __init__(self, record: Callable[[EgressEvent], None], *, limit: int = MAX_OPEN_CONNECTIONS) -> None:
        self.record = record
        self.limit = limit
        self.open = 0

    def wrap(self, handler: Handler, *, via: str) -> Handler:
        """``handler``, refusing connections while ``limit`` are already open."""

        async def limited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if self.open >= self.limit:
                writer.transport.abort()
                self.record(
                    EgressEvent(
                        time=time.time(),
                        host="",
                        port=0,
                        address=None,
                        verdict="deny",
                        reason=f"more than {self.limit} egress connections open at once; this one was closed",
                        rule_id="egress.connection_limit",
                        via=via,
                        bytes_up=0,
                        bytes_down=0,
                    )
                )
                return
            self.open += 1
            try:
                await handler(reader, writer)
            finally:
                self.open -= 1

        return limited


class EgressSession:
    """A running egress for one sandbox. Built by ``start_egress``."""

    def __init__(self, boundary: PlainBoundary, netns_fd: int, *, lookup: Lookup) -> None:
        self.policy = EgressPolicy.from_boundary(boundary)
        self.events = EventLog()
        self.placeholders = PlaceholderTable()
        self.resolver = Resolver(self.policy, host_addresses=local_interface_addresses(), lookup=lookup)
        self.proxy = ProxyServer(self.resolver.decide, self.events.record)
        self.capture = CaptureServer(self.resolver.decide, self.events.record)
        self.dns = DnsStub(self._answer)
        self.connections = ConnectionLimit(self.events.record)
        self._netns_fd = netns_fd
        self._sockets: list[socket.socket] = []
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: list[BaseException] = []
        self._stop: asyncio.Event | None = None
        self._alloc_lock: asyncio.Lock | None = None
        self._servers: list[asyncio.Server] = []
        self._main_task: asyncio.Task[None] | None = None
        self._closed = False

    # ---- public surface -------------------------------------------------------------------

    def sandbox_env(self) -> dict[str, str]:
        """Proxy variables for every workload in this sandbox."""
        host, port = PROXY_ADDRESS
        return plan_sandbox_env(f"http://{host}:{port}")

    def drain_events(self) -> EventBatch:
        """Attempts recorded since the last drain, oldest first, and the count of those not kept
        (the log is bounded by bytes: ``contain.egress.log``)."""
        return self.events.drain()

    def settle(self, timeout_s: float = 1.0) -> None:
        """Wait (bounded) until every connection handler has finished and recorded its event.

        Called after a run's processes are dead: their connections are closing, and a tunnel's
        event (with its byte counts) is written only when it closes.
        """
        loop, main = self._loop, self._main_task
        if self._closed or main is None or not loop.is_running():
            return

        async def quiet() -> None:
            deadline = loop.time() + timeout_s
            while loop.time() < deadline:
                if not [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and t is not main]:
                    return
                await asyncio.sleep(0.005)

        with contextlib.suppress(Exception):  # a stopped loop has nothing left to record
            asyncio.run_coroutine_threadsafe(quiet(), loop).result(timeout_s + 1.0)

    def is_serving(self) -> bool:
        """True while the loop thread is alive and listeners are open."""
        return self._thread is not None and self._thread.is_alive() and not self._closed

    def close(self) -> None:
        """Stop the loop and close every listener; idempotent."""
        if self._closed:
            return
        self._closed = True
        stop = self._stop
        if stop is not None and self._loop.is_running():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
        close_quietly(self._sockets)
        if self._thread is None and not self._loop.is_closed():
            self._loop.close()
        with contextlib.suppress(OSError):
            os.close(self._netns_fd)

    # ---- start-up -------------------------------------------------------------------------

    def _start(self) -> None:
        specs = [
            SocketSpec("tcp", *PROXY_ADDRESS),
            SocketSpec("udp", *DNS_ADDRESS),
            SocketSpec("tcp", *DNS_ADDRESS),
        ]
        captures: list[tuple[str, int]] = []
        for name in self.policy.exact_names():
            placeholder = self.placeholders.allocate(name)
            for port in sorted(self.policy.ports_for_name(name)):
                specs.append(SocketSpec("tcp", str(placeholder), port))
                captures.append((name, port))
        for address, port in plan_loopback_captures(self.policy):
            specs.append(SocketSpec("tcp", address, port))
            captures.append((address, port))
        self._sockets = bind_in_netns(self._netns_fd, specs)
        self._thread = threading.Thread(target=self._run, args=(captures,), name="contain-egress", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise TimeoutError(f"egress listeners did not start within {START_TIMEOUT_S}s")
        if self._failure:
            raise self._failure[0]

    def _run(self, captures: list[tuple[str, int]]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main(captures))
        except BaseException as exc:  # recorded for start_egress; egress is stopped below
            self._failure.append(exc)
            log.exception("egress loop stopped")
        finally:
            close_quietly(self._sockets)  # fail closed: no listener survives the loop
            self._ready.set()
            self._loop.close()

    async def _main(self, captures: list[tuple[str, int]]) -> None:
        self._stop = asyncio.Event()
        self._alloc_lock = asyncio.Lock()
        self._main_task = asyncio.current_task()
        proxy_sock, udp_sock, dns_tcp_sock, *capture_socks = self._sockets
        limit = self.connections.wrap
        servers = [await asyncio.start_server(limit(self.proxy.handle, via=str(Via.CONNECT)), sock=proxy_sock)]
        servers.append(await asyncio.start_server(limit(self.dns.handle_tcp, via=str(Via.DNS)), sock=dns_tcp_sock))
        udp_transport, _ = await self._loop.create_datagram_endpoint(self.dns.datagram_protocol, sock=udp_sock)
        for (name, port), sock in zip(captures, capture_socks, strict=True):
            handler = limit(self.capture.handler_for(name, port), via=str(Via.TRANSPARENT))
            servers.append(await asyncio.start_server(handler, sock=sock))
        self._servers = servers
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            udp_transport.close()
            for server in self._servers:
                server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ---- the stub's answer: policy + placeholders ----------------------------------------

    def _deny_dns(self, host: str, rule_id: str, reason: str) -> None:
        self.events.record(
            EgressEvent(
                time=time.time(),
                host=host,
                port=0,
                address=None,
                verdict="deny",
                reason=reason,
                rule_id=rule_id,
                via=str(Via.DNS),
                bytes_up=0,
                bytes_down=0,
            )
        )

    async def _answer(self, qname: str) -> ipaddress.IPv4Address | None:
        try:
            name = canonical_hostname(qname)
        except HostnameError as exc:
            self._deny_dns(
                qname[:253],
                "egress.hostname",
                f"{qname!r} is not an acceptable hostname: {exc} (DNS answered NXDOMAIN)",
            )
            return None
        ports = self.policy.ports_for_name(name)
        if not ports:
            self._deny_dns(
                name,
                "egress.not_allowed",
                f"{name} is not in network.allow (DNS answered NXDOMAIN)",
            )
            return None
        existing = self.placeholders.get(name)
        if existing is not None:
            return existing
        assert self._alloc_lock is not None
        async with self._alloc_lock:
            return await self._allocate(name, ports)

    async def _allocate(self, name: str, ports: frozenset[int]) -> ipaddress.IPv4Address | None:
        existing = self.placeholders.get(name)
        if existing is not None:
            return existing
        if self.placeholders.is_full():
            self._deny_dns(
                name,
                "egress.internal_error",
                f"{name} refused: more than {self.placeholders.max_names} names resolved in this sandbox",
            )
            return None
        placeholder = self.placeholders.allocate(name)
        order = sorted(ports)
        specs = [SocketSpec("tcp", str(placeholder), port) for port in order]
        try:
            # to_thread runs bind_in_netns in an executor thread, which itself starts a fresh
            # thread for setns: the pooled thread never changes namespace.
            socks = await asyncio.to_thread(bind_in_netns, self._netns_fd, specs)
        except OSError as exc:
            self._deny_dns(
                name,
                "egress.internal_error",
                f"{name} refused: cannot listen on its placeholder ({exc})",
            )
            return None
        self._sockets.extend(socks)
        for port, sock in zip(order, socks, strict=True):
            handler = self.connections.wrap(self.capture.handler_for(name, port), via=str(Via.TRANSPARENT))
            self._servers.append(await asyncio.start_server(handler, sock=sock))
        return placeholder


def start_egress(boundary: PlainBoundary, *, netns_path: str, lookup: Lookup | None = None) -> EgressSession:
    """Start egress for one sandbox whose network namespace is ``netns_path``.

    Call after the sandbox's namespaces exist and before any workload runs.

    Args:
        boundary: the validated boundary (``network.allow`` and ``network.hosts`` are used).
        netns_path: e.g. ``/proc/<pid>/ns/net`` of the sandbox's pid 1.
        lookup: the host resolver (default ``getaddrinfo``); a seam for tests and embedders.

    Returns:
        A serving ``EgressSession``; every listener is bound and served.

    Raises:
        SandboxStartError: the namespace cannot be opened or entered, a listener cannot bind,
            or the loop does not start. Nothing is left running.
    """
    try:
        netns_fd = open_netns(netns_path)
    except OSError as exc:
        raise SandboxStartError(
            f"cannot open the sandbox network namespace {netns_path}: {exc.strerror}",
            "start egress after the sandbox's namespaces exist, with its pid 1 still running",
        ) from exc
    session = EgressSession(boundary, netns_fd, lookup=lookup or system_lookup)
    try:
        session._start()
    except SandboxStartError:  # already names its cause and fix
        session.close()
        raise
    except Exception as exc:  # any start-up failure refuses the sandbox (fail closed)
        session.close()
        raise SandboxStartError(f"egress could not start in {netns_path}: {exc}", BIND_FIX) from exc
    return session
