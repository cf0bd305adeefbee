"""A measurement prototype, not a broker: the staged shape that docs/broker.md ("Benchmark") names
as the next step for throughput. Run it only through ``broker_bench.py --server staged-prototype``.

One thread serves every connection from a selector loop. Whatever requests have arrived form a
batch. The batch then moves through four stages:

1. each request is decided: token, action, arguments, digest, key, authorization and business
   rule, and its request, decision and intent entries are drafted;
2. one transaction (``Store.run``) claims every key and appends every intent;
3. the executors run concurrently on a thread pool;
4. one transaction appends every outcome and stores every reply, and then the replies are sent.

It reuses the broker's own pieces (``Broker._decide``, ``_draft``, ``_claim``, ``_chain``, the
store), so the ledger it writes verifies like any other.

What it does not do: anything off the happy path. It has no refusals with their ledger entries,
no review or grants, no replay answer for a key already done, and no 409. It does not enforce the
HTTP limits or idle timeouts, offers no TCP, does not reconcile in-flight intents beyond what
``Broker.start`` does, and does not overlap one batch's executors with the next batch's
decisions. Never point it at records that matter.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import selectors
import socket
import sys
from typing import Any

from contain.broker.actions import Intent, Principal
from contain.broker.config import load_config
from contain.broker.core import BrokerReply, _Ctx, _DeferredUse
from contain.broker.idempotency import IdempotencyRecord
from contain.broker.service import build_broker
from contain.gate.digests import DIGEST_PREFIX, canonical_json


def _decide(broker: Any, token: str, name: str, data: dict[str, Any]) -> tuple[Any, ...]:
    ctx = _Ctx(action=name)
    scope = broker.verify(token).scope
    ctx.task, ctx.principal = scope.task, scope.principal
    action = broker.actions[name]
    args = action.arguments.model_validate(data["arguments"])
    canonical = canonical_json(args.model_dump(mode="json"))
    arguments = json.loads(canonical)
    ctx.digest = DIGEST_PREFIX + hashlib.sha256(canonical).hexdigest()
    ctx.key = data["idempotency_key"]
    decision, _ = broker._decide(action, Principal(scope.principal, scope.task), args)
    ctx.extra = {"token_id": scope.token_id, "rule_id": decision.rule_id}
    drafts = (
        broker._draft(ctx, "request", {"replayed": False}),
        broker._draft(ctx, "decision", {"verdict": decision.verdict, "reason": decision.reason}),
        broker._draft(ctx, "intent", {"arguments": arguments}),
    )
    return ctx, action, args, Intent(action.name, ctx.principal, ctx.task, ctx.key, ctx.digest, arguments), drafts


def _send(conn: socket.socket, reply: BrokerReply) -> None:
    data = json.dumps(reply.body, sort_keys=True).encode()
    head = f"HTTP/1.1 {reply.status} -\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    conn.setblocking(True)
    conn.sendall(head.encode() + data)
    conn.setblocking(False)


def _read_requests(conn: socket.socket, buffers: dict[socket.socket, bytes]) -> list[tuple[Any, ...]] | None:
    try:
        data = conn.recv(262144)
    except BlockingIOError:
        return []
    if not data:
        return None
    buf, out = buffers[conn] + data, []
    while (end := buf.find(b"\r\n\r\n")) >= 0:
        lines = buf[:end].decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        if len(buf) < end + 4 + length:
            break
        body, buf = buf[end + 4 : end + 4 + length], buf[end + 4 + length :]
        out.append((conn, lines[0].split(" ")[1].rsplit("/", 1)[1], headers["authorization"][7:], json.loads(body)))
    buffers[conn] = buf
    return out


def _serve_batch(broker: Any, pool: concurrent.futures.Executor, batch: list[tuple[Any, ...]]) -> None:
    decided = [(conn, _decide(broker, token, name, data)) for conn, name, token, data in batch]
    uses = _DeferredUse()
    claimed = broker.store.run(
        lambda t: [broker._claim(t, d[0], d[4], uses) for _, d in decided],
        records=[(d[0].principal, d[0].key) for _, d in decided],
    )
    replies = [(conn, seq) for (conn, _), seq in zip(decided, claimed, strict=True) if isinstance(seq, BrokerReply)]
    todo = [(conn, d, seq) for (conn, d), seq in zip(decided, claimed, strict=True) if not isinstance(seq, BrokerReply)]
    returned = list(pool.map(lambda job: job[1][1].execute(job[1][2], job[1][1].context(job[1][3], broker._secrets)),
                             todo))
    finishing = []
    for (conn, (ctx, action, _, _, _), seq), value in zip(todo, returned, strict=True):
        result = json.loads(canonical_json(dict(value)))
        body = {"action": action.name, "idempotency_key": ctx.key, "argument_digest": ctx.digest, "intent_seq": seq,
                "status": "succeeded", "result": result}
        detail = {"status": "succeeded", "http_status": 200, "intent_seq": seq, "result": result, "error": None}
        outcome = broker._draft(ctx, "outcome", detail)
        finishing.append((conn, ctx, body, outcome, seq))

    def finish(txn: Any) -> list[int]:
        seqs = []
        for _, ctx, body, outcome, seq in finishing:
            seqs.append(broker._chain(txn, outcome))
            txn.put_record(IdempotencyRecord(ctx.principal, ctx.key, ctx.action, ctx.digest, "done", 200, body, seq))
        return seqs

    if finishing:
        for (conn, _, body, _, _), seq in zip(finishing, broker.store.run(finish), strict=True):
            replies.append((conn, BrokerReply(200, {**body, "ledger_seq": seq, "replayed": False})))
    for conn, reply in replies:
        _send(conn, reply)


def main() -> None:
    config = load_config(sys.argv[1])
    broker = build_broker(config)
    broker.start()
    if os.path.exists(config.socket_path):
        os.unlink(config.socket_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(config.socket_path)
    server.listen(256)
    server.setblocking(False)
    events = selectors.DefaultSelector()
    events.register(server, selectors.EVENT_READ)
    buffers: dict[socket.socket, bytes] = {}
    pool = concurrent.futures.ThreadPoolExecutor(64)
    print(f"contain broker: listening on {config.socket_path} (staged prototype)", file=sys.stderr, flush=True)
    while True:
        batch: list[tuple[Any, ...]] = []
        for key, _ in events.select():
            if key.fileobj is server:
                while True:
                    try:
                        conn, _ = server.accept()
                    except BlockingIOError:
                        break
                    conn.setblocking(False)
                    events.register(conn, selectors.EVENT_READ)
                    buffers[conn] = b""
                continue
            conn = key.fileobj  # type: ignore[assignment]
            arrived = _read_requests(conn, buffers)
            if arrived is None:
                events.unregister(conn)
                conn.close()
                del buffers[conn]
            else:
                batch.extend(arrived)
        if batch:
            _serve_batch(broker, pool, batch)


if __name__ == "__main__":
    main()
