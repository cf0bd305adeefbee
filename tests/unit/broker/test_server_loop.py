"""The server loop: many requests' writes share transactions, a slow executor holds up nobody
else, slow or silent clients cost nothing but a descriptor, failures answer 503 and the loop lives
on, and shutdown finishes what is in progress."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from contain.broker import (
    Action,
    Broker,
    BrokerClient,
    BrokerServer,
    Checkpointer,
    Decision,
    SecretStore,
    SqliteStore,
    TokenKey,
    load_checkpoint_key,
    mint_token,
)
from contain.broker.ledger import verify_entries
from contain.broker.server_loop import ServerLimits
from contain.gate.grants import GrantKey


class Args(BaseModel):
    n: int


class Actions:
    """Executors the tests steer: ``hold`` waits for ``release``; ``crash`` raises SystemExit."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.holding = threading.Event()
        self.calls: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def _action(self, name: str, execute: Any) -> Action:
        return Action(
            name=name,
            description=f"{name} for the server loop tests",
            arguments=Args,
            authorize=lambda p, a: Decision.allow("any"),
            validate=lambda p, a: Decision.allow("any"),
            execute=execute,
        )

    def all(self) -> dict[str, Action]:
        def record(name: str, n: int) -> dict[str, int]:
            with self.lock:
                self.calls.append((name, n))
            return {"n": n}

        def hold(args: Args, ctx: Any) -> dict[str, int]:
            self.holding.set()
            assert self.release.wait(10)
            return record("hold", args.n)

        def crash(args: Args, ctx: Any) -> dict[str, int]:
            raise SystemExit("an executor that exits")

        def slow_rule(principal: Any, args: Args) -> Decision:  # a rule that reads a slow record
            self.holding.set()
            assert self.release.wait(10)
            return Decision.allow("slow")

        actions = [
            self._action("count", lambda args, ctx: record("count", args.n)),
            self._action("hold", hold),
            self._action("crash", crash),
            Action(
                name="slow_rule",
                description="an action whose authorization rule blocks",
                arguments=Args,
                authorize=slow_rule,
                validate=lambda p, a: Decision.allow("any"),
                execute=lambda args, ctx: record("slow_rule", args.n),
            ),
        ]
        return {a.name: a for a in actions}


@pytest.fixture
def actions() -> Actions:
    return Actions()


def _broker(tmp_path: Path, actions: Actions) -> Broker:
    b = Broker(
        actions=actions.all(),
        store=SqliteStore(str(tmp_path / "broker.db")),
        token_key=TokenKey(b"t" * 32),
        grant_key=GrantKey.from_bytes(b"g" * 32),
        secrets=SecretStore({}),
        checkpointer=Checkpointer(load_checkpoint_key(tmp_path / "checkpoint.key"), tmp_path / "ledger.checkpoints"),
    )
    b.start()
    return b


@pytest.fixture
def broker(tmp_path: Path, actions: Actions) -> Iterator[Broker]:
    b = _broker(tmp_path, actions)
    yield b
    b.close()


def _serve(broker: Broker, tmp_path: Path, **kw: Any) -> BrokerServer:
    server = BrokerServer(broker, socket_path=str(tmp_path / "b.sock"), **kw)
    server.start()
    return server


@pytest.fixture
def served(broker: Broker, tmp_path: Path) -> Iterator[BrokerServer]:
    server = _serve(broker, tmp_path)
    yield server
    server.shutdown()


def _client(server: BrokerServer) -> BrokerClient:
    token = mint_token(
        TokenKey(b"t" * 32), task="t1", principal="alice", actions=["count", "hold", "crash", "slow_rule"], ttl_s=3600
    )
    return BrokerClient(server.socket_path, token)


def _connect(server: BrokerServer) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(server.socket_path)
    return sock


class LoopClock:
    """The server loop's monotonic clock, advanced by the test (no test waits for real time to pass)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _round_trip(sock: socket.socket) -> None:
    """A barrier: once the reply is here, the loop has handled everything that reached it before
    the request (one select() returns every ready socket, and the next pass starts after this one)."""
    sock.sendall(b"GET /v1/health HTTP/1.1\r\n\r\n")
    assert b"200 OK" in sock.recv(65536)


def _is_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_concurrent_writes_share_transactions_and_each_executes_once(served: BrokerServer, actions: Actions) -> None:
    replies: list[int] = []
    lock = threading.Lock()

    def caller(start: int) -> None:
        client = _client(served)
        for n in range(start, 200, 16):
            status = client.call("count", {"n": n}, idempotency_key=f"k{n}").status
            with lock:
                replies.append(status)

    commits = served.broker.store.commits
    threads = [threading.Thread(target=caller, args=(s,)) for s in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert replies == [200] * 200
    assert sorted(n for _, n in actions.calls) == list(range(200))
    # each write is two durable steps (claim, outcome); batched, they took far fewer commits
    assert served.broker.store.commits - commits < 300
    rows = served.broker.store.raw_rows()
    assert verify_entries(rows) == [] and sum(r["kind"] == "outcome" for r in rows) == 200


def test_a_slow_executor_holds_up_no_other_request(served: BrokerServer, actions: Actions) -> None:
    held: dict[str, Any] = {}
    slow = threading.Thread(target=lambda: held.update(reply=_client(served).call("hold", {"n": 1})))
    slow.start()
    assert actions.holding.wait(10)
    began = time.monotonic()
    assert _client(served).call("count", {"n": 2}).status == 200
    assert _client(served).request("GET", "/v1/health").status == 200
    assert time.monotonic() - began < 5 and "reply" not in held  # answered while the executor still runs
    actions.release.set()
    slow.join(10)
    assert held["reply"].status == 200 and held["reply"].body["result"] == {"n": 1}


def test_a_rule_that_blocks_holds_up_no_other_request(served: BrokerServer, actions: Actions) -> None:
    held: dict[str, Any] = {}
    slow = threading.Thread(target=lambda: held.update(reply=_client(served).call("slow_rule", {"n": 1})))
    slow.start()
    assert actions.holding.wait(10)
    assert _client(served).call("count", {"n": 2}).status == 200 and "reply" not in held
    actions.release.set()
    slow.join(10)
    assert held["reply"].status == 200 and ("slow_rule", 1) in actions.calls


def test_a_client_that_never_reads_its_replies_does_not_stall_the_others(served: BrokerServer) -> None:
    hog = _connect(served)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"
    hog.settimeout(0.2)
    sent = 0
    with pytest.raises(TimeoutError):  # the broker stops reading it once its replies back up
        for _ in range(5000):
            hog.sendall(request)
            sent += 1
    assert sent < 5000
    began = time.monotonic()
    assert _client(served).call("count", {"n": 7}).status == 200
    assert time.monotonic() - began < 5
    hog.close()


def test_pipelined_requests_are_answered_in_order(served: BrokerServer) -> None:
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["count"], ttl_s=3600)
    sock = _connect(served)
    body = b'{"arguments": {"n": %d}}'
    for n in (10, 11, 12):
        payload = body % n
        sock.sendall(
            b"POST /v1/actions/count HTTP/1.1\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s"
            % (token.encode(), len(payload), payload)
        )
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 4
    assert [data.find(b'"n": %d' % n) for n in (10, 11, 12)] == sorted(data.find(b'"n": %d' % n) for n in (10, 11, 12))
    assert data.rstrip().endswith(b'{"ok": true}')


def test_idle_and_stalled_connections_are_closed_after_their_timeouts_and_not_before(
    broker: Broker, tmp_path: Path
) -> None:
    clock = LoopClock()
    limits = ServerLimits(idle_timeout_s=60, request_timeout_s=60, sweep_every_s=0.05)  # only loop time passes
    server = _serve(broker, tmp_path, limits=limits, loop_clock=clock)
    try:
        silent, stalled, busy = _connect(server), _connect(server), _connect(server)
        stalled.sendall(b"POST /v1/actions/count HTTP/1.1\r\nContent-Length: 50\r\n\r\n{")
        _round_trip(busy)  # all three accepted, the stalled request's bytes read
        clock.advance(59.9)  # just short of both timeouts
        _round_trip(busy)  # this pass sweeps ...
        _round_trip(busy)  # ... and has finished once the next one answers
        assert _is_open(silent) and _is_open(stalled)
        clock.advance(0.2)
        _round_trip(busy)
        _round_trip(busy)  # a connection in use stays open
        assert _read_to_end(silent) == b""  # idle: closed without a word
        assert _read_to_end(stalled).startswith(b"HTTP/1.1 408 ")  # mid-request: told why, then closed
    finally:
        server.shutdown()


def test_connections_over_the_cap_are_closed_at_once(broker: Broker, tmp_path: Path) -> None:
    server = _serve(broker, tmp_path, limits=ServerLimits(max_connections=2))
    try:
        held = [_connect(server), _connect(server)]
        for sock in held:
            _round_trip(sock)
        assert _closed_by_peer(_connect(server))
        held[0].close()
        _round_trip(held[1])  # the loop has seen the close
        _round_trip(_connect(server))  # so the freed slot is usable again
    finally:
        server.shutdown()


def test_an_executor_that_exits_answers_503_leaves_its_intent_in_flight_and_the_loop_serves_on(
    served: BrokerServer,
) -> None:
    client = _client(served)
    reply = client.call("crash", {"n": 1}, idempotency_key="c1", retries=0)
    assert reply.status == 503 and reply.body["error"]["code"] == "unavailable"
    assert [r.key for r in served.broker.store.run(lambda t: t.in_flight())] == ["t1/c1"]  # reconciled on start
    assert client.call("count", {"n": 2}).status == 200


def test_a_store_that_fails_answers_503_and_the_loop_serves_on(tmp_path: Path, actions: Actions) -> None:
    server = _serve(_broker(tmp_path, actions), tmp_path)
    try:
        client = _client(server)
        server.broker.store.close()  # every write now fails: nothing may be answered as done
        reply = client.call("count", {"n": 1}, retries=0)
        assert reply.status == 503 and reply.body["error"]["code"] == "unavailable"
        assert client.request("GET", "/v1/health").status == 200
        assert actions.calls == []
    finally:
        server.shutdown()


def test_shutdown_finishes_a_write_in_progress_and_refuses_new_connections(
    broker: Broker, tmp_path: Path, actions: Actions
) -> None:
    server = _serve(broker, tmp_path)
    held: dict[str, Any] = {}
    slow = threading.Thread(target=lambda: held.update(reply=_client(server).call("hold", {"n": 5}, retries=0)))
    slow.start()
    assert actions.holding.wait(10)
    watcher = _connect(server)
    _round_trip(watcher)  # an idle connection: closed as soon as shutdown stops accepting
    stopper = threading.Thread(target=server.shutdown)
    stopper.start()
    assert _read_to_end(watcher) == b""  # shutdown has begun ...
    assert stopper.is_alive()  # ... and waits for the write in progress (its reply is asserted below)
    actions.release.set()
    stopper.join(10)
    slow.join(10)
    assert held["reply"].status == 200 and held["reply"].body["result"] == {"n": 5}
    assert [r["kind"] for r in broker.store.raw_rows()][-1] == "outcome"
    with pytest.raises(OSError):
        _connect(server)


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize(
    ("trickle", "status"),
    [
        (b"\r\n", b"400"),  # blank lines: refused at the third, long before the deadline
        (b"POST /v1/actions/count HTTP/1.1\r\nX-Pad: " + b"a" * 4000, b"408"),
        (b"GET /v1/health HTTP/1.1\r\nX: y\r\n", b"408"),  # headers that never end
        (b"POST /v1/actions/count HTTP/1.1\r\nContent-Length: 900\r\n\r\n" + b" " * 900, b"408"),
    ],
    ids=["blank-lines", "one-long-header", "headers-never-ending", "a-slow-body"],
)
def test_a_request_that_trickles_in_is_refused_by_its_deadline_from_the_first_byte(
    broker: Broker, tmp_path: Path, trickle: bytes, status: bytes
) -> None:
    # Before, every byte restarted the idle timer and blank lines were skipped without limit.
    server = _serve(broker, tmp_path, limits=ServerLimits(request_timeout_s=0.5, idle_timeout_s=60, sweep_every_s=0.05))
    try:
        sock = _connect(server)
        sock.settimeout(0.1)  # one byte per 0.1 s: each recv that times out is the pause
        began = time.monotonic()
        data = b""
        for position in range(200):
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(trickle[position % len(trickle) : position % len(trickle) + 1])
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            break
        elapsed = time.monotonic() - began
        sock.settimeout(5)
        data += _read_to_end(sock)
        assert data.startswith(b"HTTP/1.1 " + status + b" ") and b"Connection: close" in data
        assert elapsed < 3 and (status == b"400" or elapsed > 0.4)
    finally:
        server.shutdown()


def test_connections_of_one_peer_over_its_cap_are_closed_at_once_and_others_are_served(
    broker: Broker, tmp_path: Path
) -> None:
    server = _serve(broker, tmp_path, limits=ServerLimits(max_connections_per_peer=3))
    try:
        held = [_connect(server) for _ in range(3)]
        for sock in held:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\n\r\n")
            assert b"200 OK" in sock.recv(65536)
        extra = _connect(server)
        assert _closed_by_peer(extra)  # this uid holds its three already
        held[0].close()
        _round_trip(held[1])  # the loop has seen the close
        _round_trip(_connect(server))  # so the peer's freed slot is usable again
        refused = [r for r in server.broker.refusals.take_due(now=time.time(), everything=True)]
        assert refused and sum(w.by_code["503 too_many_connections"] for w in refused) >= 1
    finally:
        server.shutdown()


def test_body_bytes_announced_and_unread_are_capped_across_connections(broker: Broker, tmp_path: Path) -> None:
    server = _serve(broker, tmp_path, limits=ServerLimits(max_body_bytes_in_flight=1000, max_body_bytes_per_peer=1000))
    try:
        head = b"POST /v1/actions/count HTTP/1.1\r\nContent-Length: 600\r\n\r\n"
        first = _connect(server)
        first.sendall(head + b"{")  # 600 reserved, one byte read
        second = _connect(server)
        second.sendall(head)  # 600 more would pass the 1000 in flight
        second.settimeout(5)
        reply = _read_to_end(second)
        assert reply.startswith(b"HTTP/1.1 503 ") and b'"busy"' in reply
        first.sendall(b" " * 599)  # the first body completes: its reservation ends
        first.settimeout(5)
        assert first.recv(65536).startswith(b"HTTP/1.1 401 ")  # no token: refused, but read whole
        third = _connect(server)
        third.sendall(head + b" " * 600)
        third.settimeout(5)
        assert third.recv(65536).startswith(b"HTTP/1.1 401 ")
    finally:
        server.shutdown()


def test_a_reply_the_client_does_not_take_in_time_closes_its_connection(broker: Broker, tmp_path: Path) -> None:
    # Before, a client that never read its replies held its connection until the 60 s idle timer.
    server = _serve(broker, tmp_path, limits=ServerLimits(request_timeout_s=0.3, sweep_every_s=0.05))
    try:
        hog = _connect(server)
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.settimeout(0.2)
        with pytest.raises(TimeoutError):  # until the broker stops reading it: its replies back up
            for _ in range(5000):
                hog.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        began = time.monotonic()
        hog.settimeout(0.1)
        closed = False
        while not closed and time.monotonic() - began < 5:
            try:
                hog.send(b"x")  # fails with EPIPE once the broker has closed its end
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
        assert closed and time.monotonic() - began < 3
    finally:
        server.shutdown()
