"""Crash test (issue 6, Done when): SIGKILL the broker at random points during writes, 200 trials.

A zygote process imports the broker once and forks a fresh broker process per trial (so 200
restarts fit in CI time). Each trial: start a broker (which reconciles what the last one left in
flight), send writes from three client threads, SIGKILL the broker after a random delay, start a
new one, retry every unacknowledged key with the same key and arguments until acknowledged. After
every trial: no key has two effects, every acknowledged key has exactly one, and the ledger
verifies against its signed checkpoints. The executor sleeps a random 0-2 ms before and after its
write, so kills land before the intent, between intent and effect, between effect and outcome,
and after the outcome.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from contain.broker import BrokerClient, load_public_key, mint_token, read_checkpoints, verify_entries
from contain.broker.ledger import LedgerEntry
from contain.broker.report import summarize
from contain.broker.storage import SqliteStore
from contain.broker.tokens import TokenKey

TRIALS = 200
ROOT = Path(__file__).resolve().parents[2]

ZYGOTE = r'''
import json, os, random, sqlite3, sys, time
from pydantic import BaseModel
from contain.broker import (Action, Broker, BrokerServer, CheckResult, Checkpointer, Decision, SecretStore,
                            SqliteStore, TokenKey, load_checkpoint_key)
from contain.gate.grants import GrantKey

work = sys.argv[1]
effects = os.path.join(work, "effects.db")
conn = sqlite3.connect(effects, isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL, n INTEGER NOT NULL)")
conn.execute("CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY, n INTEGER NOT NULL)")
conn.close()

class Args(BaseModel):
    n: int

def execute(args, ctx):
    time.sleep(random.random() * 0.002)
    db = sqlite3.connect(effects, isolation_level=None, timeout=30)
    db.execute("PRAGMA synchronous=FULL")
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO effects VALUES (?, ?)", (ctx.intent.scoped_key, args.n))
    db.execute("INSERT INTO applied VALUES (?, ?)", (ctx.intent.scoped_key, args.n))
    db.execute("COMMIT")
    db.close()
    time.sleep(random.random() * 0.002)
    return {"n": args.n}

def check(intent, ctx):
    db = sqlite3.connect(effects)
    row = db.execute("SELECT n FROM applied WHERE key = ?", (intent.scoped_key,)).fetchone()
    db.close()
    return CheckResult("applied", {"n": row[0]}) if row else CheckResult("not_applied")

action = Action(name="count", description="insert one effect row", arguments=Args,
                authorize=lambda p, a: Decision.allow("any"), validate=lambda p, a: Decision.allow("any"),
                execute=execute, check=check)

def serve():
    random.seed()
    broker = Broker(actions={"count": action}, store=SqliteStore(os.path.join(work, "broker.db")),
                    token_key=TokenKey(b"c" * 32), grant_key=GrantKey.from_bytes(b"g" * 32), secrets=SecretStore({}),
                    checkpointer=Checkpointer(load_checkpoint_key(os.path.join(work, "cp.key")),
                                              os.path.join(work, "checkpoints")), checkpoint_every=16)
    report = broker.start()
    server = BrokerServer(broker, socket_path=os.path.join(work, "broker.sock"))
    server.start()
    return report

for line in sys.stdin:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break
    if line.strip() != "start":
        continue
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        report = serve()
        os.write(write_end, (json.dumps(report) + "\n").encode())
        os.close(write_end)
        while True:
            time.sleep(3600)
    os.close(write_end)
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    print(json.dumps({"pid": pid, "reconciled": json.loads(data or b"null")}), flush=True)
'''


class Zygote:
    def __init__(self, work: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(work)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.pid = 0

    def start(self) -> list[dict]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write("start\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        data = json.loads(line)
        self.pid = data["pid"]
        return data["reconciled"] or []

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(10)


def _effects(work: Path) -> dict[str, int]:
    conn = sqlite3.connect(work / "effects.db")
    try:
        return dict(conn.execute("SELECT key, count(*) FROM effects GROUP BY key").fetchall())
    finally:
        conn.close()


def _send(client: BrokerClient, keys: list[str], acked: set[str], lock: threading.Lock) -> None:
    for key in keys:
        try:
            reply = client.call("count", {"n": int(key.rsplit("-", 1)[1])}, idempotency_key=key, retries=0)
        except (OSError, http.client.HTTPException):
            return  # the broker died under us: everything from here on is unacknowledged
        if reply.status == 200:
            with lock:
                acked.add(key)


def test_sigkill_at_random_points_never_duplicates_or_loses_a_write(tmp_path: Path) -> None:
    work = tmp_path
    token = mint_token(TokenKey(b"c" * 32), task="crash", principal="p", actions=["count"], ttl_s=3600)
    zygote = Zygote(work)
    rng = random.Random(6)
    acked: set[str] = set()
    sent: list[str] = []
    kinds_reconciled: dict[str, int] = {}
    lock = threading.Lock()
    began = time.monotonic()
    try:
        zygote.start()
        client = BrokerClient(str(work / "broker.sock"), token, timeout=10)
        for trial in range(TRIALS):
            batches = [[f"t{trial}-{c}-{i}" for i in range(rng.randint(1, 4))] for c in range(3)]
            keys = [k for b in batches for k in b]
            sent.extend(keys)
            threads = [threading.Thread(target=_send, args=(client, b, acked, lock)) for b in batches]
            for t in threads:
                t.start()
            time.sleep(rng.random() * 0.03)
            zygote.kill()
            for t in threads:
                t.join(30)
            for item in zygote.start():
                kinds_reconciled[item["result"]] = kinds_reconciled.get(item["result"], 0) + 1
            for key in keys:
                if key not in acked:
                    reply = client.call("count", {"n": int(key.rsplit("-", 1)[1])}, idempotency_key=key, retries=50)
                    assert reply.status == 200, (key, reply)
                    acked.add(key)
            effects = _effects(work)
            duplicated = {k: n for k, n in effects.items() if n > 1}
            assert not duplicated, f"trial {trial}: duplicated effects {duplicated}"
            missing = [k for k in keys if effects.get(f"p/crash/{k}") != 1]
            assert not missing, f"trial {trial}: acknowledged writes missing {missing}"
    finally:
        zygote.close()
    elapsed = time.monotonic() - began
    store = SqliteStore(str(work / "broker.db"))
    rows = store.raw_rows()
    problems = verify_entries(rows, read_checkpoints(work / "checkpoints"), load_public_key(work / "cp.key.pub"))
    assert problems == [], [str(p) for p in problems[:5]]
    writes = summarize(LedgerEntry.from_dict(r) for r in rows).writes
    succeeded = {w.idempotency_key for w in writes if w.status == "succeeded"}
    assert succeeded == set(sent), "the ledger's succeeded writes are exactly the acknowledged ones"
    assert len(_effects(work)) == len(sent)
    print(f"\ncrash test: {TRIALS} trials, {len(sent)} writes, reconciled {kinds_reconciled}, {elapsed:.1f}s")
    assert kinds_reconciled, "no kill ever landed between intent and outcome; the test did not test recovery"
