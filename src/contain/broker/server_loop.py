"""The broker's server loop: one thread holds every connection and drives every request's decision
path together, so that the writes of all of them share one transaction (one fsync).

Each request becomes a path (``Broker.steps``, a generator of steps). The loop advances every path
it holds until the path asks for a store write or a call that may block (``ExecutorCall``: the
executor, and rules not marked ``quick_rules``). The writes asked for by all paths in one round
run in one ``Store.run_all`` transaction: claims of new requests and outcomes of finished
executors together. Blocking calls run on executor threads, and a finished call wakes the loop.
A path still takes its own steps strictly in order: its claim is durable before its executor is
called, and its outcome is durable before its reply is sent.

Why one thread rather than a thread per connection (the design before this one): a write through
a thread per connection handed off between threads five or six times (socket, GIL, group commit
of the intent, executor, group commit of the outcome, reply), about 19 times scheduled in per
write at 32 clients; on a small machine each hand-off waits for a CPU, and that waiting, not CPU
or fsync, bounded throughput. Here it is about 9, and the broker alone (an executor that writes
nothing) went from about 0.5x to about 1x raw SQLite (docs/broker.md, "Benchmark").

Limits (each one a way one client could otherwise hold the broker for everyone else):

- who: a connection is admitted by the peer table of ``peers`` (SO_PEERCRED uid) and closed at
  accept otherwise; each peer holds at most ``max_connections_per_peer`` connections, and all
  together at most ``max_connections`` (one more is accepted and closed at once);
- time: a request must arrive whole within ``request_timeout_s`` of its first byte (blank lines
  before it count: their number is bounded by ``http_wire`` too), however its bytes trickle in,
  else it is answered 408 and the connection closed; a reply must be taken by the client within
  ``request_timeout_s`` of being queued, else the connection is closed; a connection with no
  request in progress and no bytes moving for ``idle_timeout_s`` is closed;
- memory: the framing of ``http_wire`` (1 MiB bodies, bounded heads); body bytes announced by
  heads and not yet read are reserved against ``max_body_bytes_in_flight`` in total and
  ``max_body_bytes_per_peer`` per peer, and a head whose body does not fit is answered 503
  (retry later) and its connection closed; a connection's next request is taken only once the
  reply to the last one is sent, and at most ``_READ_AHEAD_BYTES`` are read ahead of it, so a
  client that pipelines without reading its replies gets backpressure, not memory in the broker;
- the ledger: refusals no token vouches for (framing, timeouts, no room, no or bad token) go
  through the broker's per-peer refusal windows (``refusals``), and the loop writes the windows'
  summaries within a second of their end; refused connections are counted there too.

Not bounded here: how long an admitted request's executor runs (that is the action's own
business; it holds one executor thread and one connection of its peer's cap).
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contain._log import LazyLogger
from contain.broker.core import Broker, BrokerReply, ExecutorCall, Steps, StoreWrite
from contain.broker.http_wire import HttpError, HttpRequest, RequestReader, reply_bytes
from contain.broker.peers import PeerDecision, broker_uid, decide_peer, peer_uid

__all__ = ["ServerLimits", "ServerLoop"]

log = LazyLogger(__name__)

Route = Callable[[HttpRequest, str], "BrokerReply | Steps"]  # (request, peer)
_LISTEN, _WAKE = object(), object()
_SWEEP_EVERY_S = 1.0
_READ_AHEAD_BYTES = 1 << 16  # read this far past a request in progress, then stop reading


def _unavailable() -> BrokerReply:
    return BrokerReply(
        503,
        {
            "status": "refused",
            "error": {"code": "unavailable", "reason": "the broker cannot record this request; retry later"},
        },
    )


@dataclass(frozen=True)
class ServerLimits:
    """What one connection, one peer and all of them together may hold (module docstring)."""

    idle_timeout_s: float = 60.0  # no request in progress and no bytes moving
    request_timeout_s: float = 10.0  # first byte to whole request; reply queued to reply taken
    max_connections: int = 1024
    max_connections_per_peer: int = 128  # a peer is a uid (SO_PEERCRED), or every TCP client together
    max_body_bytes_in_flight: int = 64 << 20  # announced by heads, not yet read, all connections
    max_body_bytes_per_peer: int = 16 << 20
    allowed_peer_uids: tuple[int, ...] = ()  # admitted besides the rows of peers.PEER_RULES
    sweep_every_s: float = _SWEEP_EVERY_S  # how often deadlines are checked and summaries written


class _Conn:
    __slots__ = (
        "active",
        "closed",
        "closing",
        "deadline",
        "eof",
        "events",
        "last",
        "out",
        "peer",
        "reader",
        "reserved",
        "sock",
    )

    def __init__(self, sock: socket.socket, now: float, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.deadline: float | None = None  # a request being read, or a reply being sent, must be done by then
        self.reserved = 0  # body bytes reserved for the head read last
        self.reader = RequestReader()
        self.out = bytearray()
        self.active = False  # a request of this connection is on its path
        self.closing = False  # close once ``out`` is sent
        self.closed = False
        self.eof = False  # the client sent all it will send; answer what is buffered, then close
        self.events = 0
        self.last = now


class _Path:
    __slots__ = ("conn", "keep", "steps")

    def __init__(self, conn: _Conn, steps: Steps, keep: bool) -> None:
        self.conn = conn
        self.steps = steps
        self.keep = keep


class ServerLoop:
    """Serves ``route`` over the listening sockets until ``stop``; ``run`` is the loop's thread body."""

    def __init__(
        self,
        broker: Broker,
        listeners: Sequence[socket.socket],
        route: Route,
        *,
        limits: ServerLimits | None = None,
        executor_threads: int = 64,
        drain_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` (seconds, monotonic) times deadlines, idle connections, sweeps and the drain;
        tests inject one they advance. ``select`` still waits at most ``sweep_every_s`` real seconds."""
        self._broker = broker
        self._clock = clock
        self._route = route
        self._limits = limits = limits or ServerLimits()
        self._idle_timeout_s = limits.idle_timeout_s
        self._request_timeout_s = limits.request_timeout_s
        self._max_connections = limits.max_connections
        self._max_per_peer = limits.max_connections_per_peer
        self._max_body_bytes = limits.max_body_bytes_in_flight
        self._max_body_bytes_per_peer = limits.max_body_bytes_per_peer
        self._allowed_uids = frozenset(limits.allowed_peer_uids)
        self._broker_uid = broker_uid()
        self._drain_timeout_s = drain_timeout_s
        self._sweep_every_s = limits.sweep_every_s
        self._per_peer: collections.Counter[str] = collections.Counter()  # connections held
        self._body_bytes = 0  # reserved by all connections
        self._body_bytes_of: collections.Counter[str] = collections.Counter()  # reserved, per peer
        self._refused_peers: set[str] = set()  # logged once each (bounded)
        self._selector = selectors.DefaultSelector()
        self._listeners = list(listeners)
        for listener in self._listeners:
            listener.setblocking(False)
            self._selector.register(listener, selectors.EVENT_READ, _LISTEN)
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._selector.register(self._wake_fd, selectors.EVENT_READ, _WAKE)
        self._wake_lock = threading.Lock()
        self._wake_armed = False
        self._finished: collections.deque[tuple[_Path, Any, BaseException | None]] = collections.deque()
        self._calls: queue.SimpleQueue[tuple[_Path, ExecutorCall] | None] = queue.SimpleQueue()
        self._max_executors = executor_threads
        self._executors: list[threading.Thread] = []
        self._idle_executors = 0  # changed by executor threads, under _wake_lock
        self._conns: set[_Conn] = set()
        self._ready: collections.deque[_Conn] = collections.deque()  # answered; may hold a pipelined request
        self._writes: list[tuple[_Path, StoreWrite]] = []  # asked for since the last commit
        self._paths = 0  # paths started and not yet answered
        self._stopping = False
        self._refusing = False  # at max_connections
        self._summary_failed = False  # the last refusal summary could not be written (logged once)

    # -- control (any thread) ----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop accepting; finish the paths in progress (up to ``drain_timeout_s``); ``run`` returns."""
        self._stopping = True
        self._wake()

    def _wake(self, *, executor_idle: bool = False) -> None:
        """Wake the loop unless a wake-up is already pending (one eventfd write per loop pass)."""
        with self._wake_lock:
            if executor_idle:
                self._idle_executors += 1
            if self._wake_armed:
                return
            self._wake_armed = True
        os.eventfd_write(self._wake_fd, 1)

    # -- the loop -----------------------------------------------------------------------------------

    def run(self) -> None:
        drain_deadline: float | None = None
        next_sweep = self._clock() + self._sweep_every_s
        try:
            while True:
                for key, mask in self._selector.select(timeout=self._sweep_every_s):
                    if key.data is _LISTEN:
                        self._accept(key.fileobj)  # type: ignore[arg-type]
                    elif key.data is _WAKE:
                        with contextlib.suppress(BlockingIOError):
                            os.eventfd_read(self._wake_fd)
                        with self._wake_lock:
                            self._wake_armed = False
                    else:
                        conn: _Conn = key.data
                        if mask & selectors.EVENT_WRITE:
                            self._flush(conn)
                        if mask & selectors.EVENT_READ and not conn.closed:
                            self._read(conn)
                self._take_ready()
                while self._finished:
                    path, value, error = self._finished.popleft()
                    self._advance(path, value, error)
                self._commit()
                self._take_ready()
                now = self._clock()
                if now >= next_sweep:
                    self._sweep(now)
                    self._write_refusal_summaries()
                    self._take_ready()
                    next_sweep = now + self._sweep_every_s
                if self._stopping:
                    if drain_deadline is None:
                        drain_deadline = now + self._drain_timeout_s
                        self._stop_accepting()
                    if self._paths == 0 or now >= drain_deadline:
                        if self._paths:
                            log.warning("broker stopped with %d requests unfinished (reconciled on start)", self._paths)
                        return
        finally:
            for conn in list(self._conns):
                self._close(conn)
            self._selector.close()
            os.close(self._wake_fd)
            for _ in self._executors:
                self._calls.put(None)  # an executor still in a call ends after it

    def _stop_accepting(self) -> None:
        for listener in self._listeners:
            self._selector.unregister(listener)
        for conn in list(self._conns):
            if not conn.active and not conn.out:
                self._close(conn)
            else:
                conn.closing = True

    # -- connections --------------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors: leave the rest in the backlog for now
                log.warning("broker cannot accept a connection: %s", exc)
                return
            decision = self._admit(sock)
            if decision is None:
                sock.close()
                continue
            self._refusing = False
            sock.setblocking(False)
            conn = _Conn(sock, self._clock(), decision.peer)
            self._per_peer[conn.peer] += 1
            self._conns.add(conn)
            self._interest(conn)

    def _admit(self, sock: socket.socket) -> PeerDecision | None:
        """The peer of a new connection, or None when it is refused (the caller closes it)."""
        try:
            decision = decide_peer(peer_uid(sock), broker_uid=self._broker_uid, allowed_uids=self._allowed_uids)
        except OSError:  # no credentials to judge: fail closed
            return None
        if not decision.admitted:
            self._refuse_connection(decision.peer, "peer_refused", f"{decision.rule}: not admitted (peer table)")
            return None
        if len(self._conns) >= self._max_connections:
            if not self._refusing:  # once per episode, not once per connection
                log.warning("broker holds %d connections; refusing more until some close", len(self._conns))
            self._refusing = True
            self._refuse_connection(decision.peer, "too_many_connections", "the broker holds all it may")
            return None
        if self._per_peer[decision.peer] >= self._max_per_peer:
            reason = f"{decision.peer} holds {self._max_per_peer} connections already"
            self._refuse_connection(decision.peer, "too_many_connections", reason)
            return None
        return decision

    def _refuse_connection(self, peer: str, code: str, reason: str) -> None:
        """Count a refused connection in its peer's refusal window (summarized, never an fsync each)."""
        self._broker.refusals.note(
            peer, now=self._broker.now(), status=503, code=code, reason=reason, action="-", own_entry=False
        )
        if peer not in self._refused_peers and len(self._refused_peers) < 4096:
            self._refused_peers.add(peer)
            log.warning("broker refused a connection from %s (%s): %s", peer, code, reason)

    def _interest(self, conn: _Conn) -> None:
        """Watch for reads unless input ended or is read far enough ahead; for writes only while a
        reply is queued. (Unchanged across a request, so a request costs no epoll_ctl.)"""
        if conn.closed:
            return
        waiting = conn.active or bool(conn.out)  # bytes read now wait for this request's reply
        reading = not (conn.closing or conn.eof or (waiting and conn.reader.buffered > _READ_AHEAD_BYTES))
        events = selectors.EVENT_READ if reading else 0
        if conn.out:
            events |= selectors.EVENT_WRITE
        if events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        if conn.events:
            self._selector.unregister(conn.sock)
            conn.events = 0
        conn.closed = True
        conn.sock.close()
        self._release_body(conn)
        self._conns.discard(conn)
        self._per_peer[conn.peer] -= 1
        if not self._per_peer[conn.peer]:
            del self._per_peer[conn.peer]

    def _release_body(self, conn: _Conn) -> None:
        if conn.reserved:
            self._body_bytes -= conn.reserved
            self._body_bytes_of[conn.peer] -= conn.reserved
            if not self._body_bytes_of[conn.peer]:
                del self._body_bytes_of[conn.peer]
            conn.reserved = 0

    def _reserve_body(self, conn: _Conn, length: int) -> bool:
        """Reserve ``length`` body bytes for the head just read; False when there is no room."""
        if (
            self._body_bytes + length > self._max_body_bytes
            or self._body_bytes_of[conn.peer] + length > self._max_body_bytes_per_peer
        ):
            return False
        conn.reserved = length
        self._body_bytes += length
        self._body_bytes_of[conn.peer] += length
        return True

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_READ_AHEAD_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:  # the client is done sending: answer what it sent whole, then close
            conn.eof = True
        else:
            conn.last = self._clock()
            if conn.deadline is None and not conn.active and not conn.out:  # the first byte of a request
                conn.deadline = conn.last + self._request_timeout_s
            conn.reader.feed(data)
        self._next_request(conn)
        self._interest(conn)  # stop reading at the end of input, or past the read-ahead

    def _flush(self, conn: _Conn) -> None:
        if conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:  # the caller went away; whatever the broker did is in the ledger
                self._close(conn)
                return
            if sent:
                del conn.out[:sent]
                conn.last = self._clock()
                if not conn.out:
                    # the reply is out; bytes already read ahead are the next request's first
                    conn.deadline = conn.last + self._request_timeout_s if conn.reader.buffered else None
                    self._ready.append(conn)  # a pipelined request may be waiting for this reply to go
        if not conn.out and conn.closing:
            self._close(conn)
            return
        self._interest(conn)

    def _sweep(self, now: float) -> None:
        for conn in list(self._conns):
            if conn.active or conn.closed:
                continue
            if conn.deadline is not None and now >= conn.deadline:
                if conn.out or conn.closing:  # a reply (or a refusal) the client did not take in time
                    self._close(conn)
                else:  # a request that did not arrive whole in time, however its bytes trickled in
                    reason = f"the request did not arrive whole within {self._request_timeout_s:g} s"
                    conn.reader = RequestReader()  # what it sent so far is dropped
                    self._release_body(conn)
                    self._refuse(conn, 408, "request_timeout", reason)
            elif now - conn.last > self._idle_timeout_s:
                self._close(conn)  # silent between requests

    def _write_refusal_summaries(self) -> None:
        """Commit the summaries of refusal windows that are over (at most once per sweep)."""
        step = self._broker.refusal_summary_write()
        if step is None:
            return
        try:
            self._broker.store.run(step.fn)
            self._summary_failed = False
        except Exception:
            if step.on_failure is not None:
                step.on_failure()  # kept for the next sweep
            if not self._summary_failed:
                log.exception("broker cannot write the summary of refusals (kept, retried)")
            self._summary_failed = True

    def _refuse(self, conn: _Conn, status: int, code: str, reason: str) -> None:
        """Answer a refusal made by the loop itself (framing, deadline, no room) and close after it."""
        conn.deadline = self._clock() + self._request_timeout_s  # for sending the refusal
        self._start(conn, self._broker.refusal_steps(status, code, reason, peer=conn.peer), keep=False)

    # -- paths --------------------------------------------------------------------------------------

    def _next_request(self, conn: _Conn) -> None:
        # One request at a time per connection, and the next only once the last reply is sent: a
        # client that pipelines without reading gets backpressure, not a growing buffer here.
        if conn.active or conn.closing or conn.closed or conn.out:
            return
        try:
            request = conn.reader.take()
        except HttpError as exc:
            self._release_body(conn)
            self._refuse(conn, exc.status, "bad_http", exc.reason)
            return
        if request is None:
            if conn.eof:  # a request cut off by the end of input is dropped with the connection
                conn.closing = True
                self._flush(conn)
                return
            expecting = conn.reader.expecting
            if expecting and not conn.reserved and not self._reserve_body(conn, expecting):
                reason = "the broker holds as many unfinished request bodies as it may; retry later"
                self._refuse(conn, 503, "busy", reason)
                return
            self._interest(conn)
            return
        self._release_body(conn)
        conn.deadline = None  # the request is whole; the path's own time is the action's business
        try:
            routed = self._route(request, conn.peer)
        except Exception:
            log.exception("broker failed to route a request")
            routed = _unavailable()
        self._start(conn, routed, keep=request.keep_alive)

    def _take_ready(self) -> None:
        while self._ready:
            self._next_request(self._ready.popleft())

    def _start(self, conn: _Conn, routed: BrokerReply | Steps, *, keep: bool) -> None:
        if isinstance(routed, BrokerReply):
            self._answer(conn, routed, keep)
            return
        conn.active = True
        self._paths += 1
        self._advance(_Path(conn, routed, keep), None, None)

    def _advance(self, path: _Path, value: Any, error: BaseException | None) -> None:
        """Send ``value`` (or throw ``error``) into the path and queue the step it asks for next."""
        try:
            step = path.steps.send(value) if error is None else path.steps.throw(error)
        except StopIteration as done:
            self._finish(path, done.value)
            return
        except BaseException:  # a broken path (or an executor's BaseException): no reply is made up
            log.exception("broker failed to handle a request")
            self._finish(path, _unavailable())
            return
        if isinstance(step, StoreWrite):
            self._writes.append((path, step))
        else:
            self._submit(path, step)

    def _submit(self, path: _Path, step: ExecutorCall) -> None:
        """Queue an executor call; start another executor thread when none is idle (up to the cap)."""
        with self._wake_lock:
            start = self._idle_executors == 0 and len(self._executors) < self._max_executors
            if not start:
                self._idle_executors -= 1
        if start:
            thread = threading.Thread(target=self._execute, name=f"broker-executor-{len(self._executors)}", daemon=True)
            self._executors.append(thread)
            thread.start()
        self._calls.put((path, step))

    def _execute(self) -> None:
        """An executor thread: call executors one after another and hand each result to the loop.

        Its own loop rather than ``ThreadPoolExecutor``: no future per call, no semaphore, and a
        thread that finds the next call queued takes it without sleeping."""
        while (job := self._calls.get()) is not None:
            path, step = job
            try:
                value, error = step.call(), None
            except BaseException as exc:  # the path decides what it means (it records the failure)
                value, error = None, exc
            self._finished.append((path, value, error))
            self._wake(executor_idle=True)

    def _commit(self) -> None:
        """Run every write the paths asked for in one transaction, then advance each path."""
        if not self._writes:
            return
        writes, self._writes = self._writes, []
        try:
            results = self._broker.store.run_all([(step.fn, step.records) for _, step in writes])
        except Exception as exc:  # the store is closed or broken: nothing was written
            results = [(None, exc)] * len(writes)
        for (path, step), (value, error) in zip(writes, results, strict=True):
            if error is None:
                self._advance(path, value, None)
                continue
            if step.on_failure is not None:
                step.on_failure()
            # Not thrown into the path: a write that did not happen is not a step the path can
            # take back; the request did not complete (a claim left in flight is reconciled).
            log.error("broker failed to record a request", exc_info=error)
            path.steps.close()
            self._finish(path, _unavailable())

    def _finish(self, path: _Path, reply: BrokerReply) -> None:
        self._paths -= 1
        path.conn.active = False
        self._answer(path.conn, reply, path.keep)

    def _answer(self, conn: _Conn, reply: BrokerReply, keep: bool) -> None:
        if conn.closed:
            return
        keep = keep and not self._stopping
        conn.out += reply_bytes(reply.status, reply.body, keep_alive=keep)
        conn.deadline = self._clock() + self._request_timeout_s  # the client must take its reply
        if not keep:
            conn.closing = True
        self._flush(conn)
