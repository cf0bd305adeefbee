"""Broker benchmark: durable, authorized writes per second through the broker vs raw SQLite.

Not a test: it prints numbers and asserts nothing. In one run, on the same disk:

* raw: the same rows inserted straight into a SQLite file (WAL, ``synchronous=FULL``, one
  transaction per row) by one writer: the floor of what a durable row costs here;
* broker: ``contain broker serve`` in its own process (SQLite ledger, WAL, synchronous=FULL),
  action ``insert_row`` (authorization "the row's owner is the principal", a business rule, an
  idempotency key per row) whose executor inserts the same row into its own SQLite file exactly as
  the raw writer does (one writer and connection, one transaction per row, ``insert_durably``).
  That writer is, by default, a process of its own that the executor talks to over a Unix socket,
  as an executor talks to any external system (``--target process``); ``--target thread`` puts it
  in the broker's process instead, where every statement it runs competes for the broker's GIL
  (about 10% fewer writes/s at 16 clients, and more clients do not raise it). Each write is
  acknowledged only after request+decision+intent are durable, the row is durable, and the
  outcome is durable. The clients are one thread holding one kept-alive connection per client
  over the Unix socket (as a load generator such as wrk does), one authorized write per call;
  ``--clients threads`` runs a thread per client with ``BrokerClient`` instead, which costs the
  two CPUs that everything here shares a thread wake-up and a GIL hand-off per reply (about 5%
  fewer writes/s at 32 clients).

Both sides are measured warm. A SQLite file whose write-ahead log is still growing pays for the
file's growth in every fsync (metadata goes through the file system journal); once the log has
been checkpointed and is rewritten in place, a durable row costs about half as much here (about
5,000 vs 10,000 rows/s on the development VM). The broker's ledger and target files are long-lived,
so before anything is timed ``--warmup`` rows go into the raw file and ``--warmup`` writes through
the broker; every raw round then appends to that same warm file. The fresh-file rate is printed
too, for reference only: comparing it with a warm broker would flatter the broker by about 2x
(earlier versions of this benchmark did exactly that).

Reported: writes/s and p50/p99 latency per concurrency level, and the ratio to warm raw; per
write, the broker process's CPU, how many times its threads were scheduled in and how long they
waited, runnable, for a CPU (Linux ``schedstat``; a thread hand-off is a wake-up). Also
measured at the highest concurrency: the same calls to ``noop_row``, whose executor writes
nothing (same authorization, business rule, idempotency and ledger): the broker's own ceiling,
what it would reach if the external write cost nothing.

Run: ``.venv/bin/python benchmarks/broker_bench.py [--rows 2000] [--concurrency 1 8 16 32] [--target thread]
[--clients threads]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

HERE = Path(__file__).resolve().parent
_CLI = "import sys; from contain.cli import main; sys.exit(main())"
ROOT = HERE.parent


# -- the action under test (imported by the broker process as broker_bench:insert_row) -------------


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")
    row_id: int
    owner: str
    amount_cents: int


def _open(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS rows (row_id INTEGER, owner TEXT, amount_cents INTEGER, key TEXT)")
    return conn


def insert_durably(conn: sqlite3.Connection, row: tuple[Any, ...]) -> None:
    """One row, one durable transaction (WAL, synchronous=FULL): the raw baseline and the broker's
    executor both write every row through this."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO rows VALUES (?,?,?,?)", row)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def insert_row(options: Mapping[str, Any]) -> Any:
    """``insert_row``: the executor hands the row to the target's one writer (a process or a thread)."""
    path = str(options["database"])
    writer = _process_writer(path) if options.get("target", "process") == "process" else _thread_writer(path)
    return _insert_action("insert_row", path, writer, options.get("rules", "loop") == "loop")


def noop_row(options: Mapping[str, Any]) -> Any:
    """``noop_row``: the same action with an executor that writes nothing (the broker's ceiling)."""
    quick = options.get("rules", "loop") == "loop"
    return _insert_action("noop_row", str(options["database"]), lambda row: None, quick)


Writer = Any  # Callable[[tuple[Any, ...]], None]: returns once the row's transaction committed


def _thread_writer(path: str) -> Writer:
    # One writer, as the raw baseline writes: a thread with its own connection inserts the rows
    # one durable transaction each, in arrival order. Handlers hand it their row and wait for the
    # commit. (Concurrent connections would sleep in SQLite's busy handler; a lock handed from
    # handler to handler puts a thread wake-up between every two commits.)
    jobs: queue.SimpleQueue[tuple[tuple[Any, ...], list[BaseException], threading.Lock]] = queue.SimpleQueue()

    def write_rows() -> None:
        conn = _open(path)
        while True:
            row, failed, done = jobs.get()
            try:
                insert_durably(conn, row)
            except Exception as exc:  # handed to the executor that asked, which raises it
                failed.append(exc)
            done.release()

    threading.Thread(target=write_rows, name="insert-row-writer", daemon=True).start()

    def write(row: tuple[Any, ...]) -> None:
        failed: list[BaseException] = []
        done = threading.Lock()
        done.acquire()
        jobs.put((row, failed, done))
        done.acquire()  # released by the writer once the row's transaction committed (or failed)
        if failed:
            raise failed[0]

    return write


# The target database's writer process: JSON rows, one per line, from any number of connections;
# each is inserted with insert_durably in arrival order and answered "ok" or "error" once committed.
# It exits when its stdin closes, that is when the broker that started it is gone.
_TARGET_WRITER = r"""
import json, selectors, socket, sys
sys.path.insert(0, sys.argv[3])
from broker_bench import _open, insert_durably
conn = _open(sys.argv[1])
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[2])
server.listen(256)
events = selectors.DefaultSelector()
events.register(server, selectors.EVENT_READ)
events.register(sys.stdin, selectors.EVENT_READ)
pending = {}
print("ready", flush=True)
while True:
    for key, _ in events.select():
        if key.fileobj is sys.stdin:
            sys.exit(0)
        if key.fileobj is server:
            peer, _ = server.accept()
            events.register(peer, selectors.EVENT_READ)
            pending[peer] = b""
            continue
        peer = key.fileobj
        data = peer.recv(65536)
        if not data:
            events.unregister(peer)
            peer.close()
            del pending[peer]
            continue
        pending[peer] += data
        while b"\n" in pending[peer]:
            line, pending[peer] = pending[peer].split(b"\n", 1)
            try:
                insert_durably(conn, tuple(json.loads(line)))
                peer.sendall(b"ok\n")
            except Exception:
                peer.sendall(b"error\n")
"""


def _process_writer(path: str) -> Writer:
    # Started on the first write (not when the action is loaded: ``mint-token`` loads actions too).
    sock_path = path + ".writer.sock"
    started: list[subprocess.Popen[bytes]] = []
    start_lock = threading.Lock()
    local = threading.local()

    def connect() -> Any:
        with start_lock:
            if not started:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(sock_path)
                proc = subprocess.Popen([sys.executable, "-c", _TARGET_WRITER, path, sock_path, str(HERE)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != b"ready":
                    raise RuntimeError("the target writer did not start")
                started.append(proc)
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.connect(sock_path)
        local.peer, local.replies = peer, peer.makefile("rb")
        return peer

    def write(row: tuple[Any, ...]) -> None:
        peer = getattr(local, "peer", None) or connect()
        peer.sendall(json.dumps(list(row)).encode() + b"\n")
        if local.replies.readline() != b"ok\n":
            raise RuntimeError("the target writer did not commit the row")

    return write


def _insert_action(name: str, path: str, write: Writer, quick_rules: bool) -> Any:
    from contain.broker import Action, CheckResult, Decision

    def execute(args: Row, ctx: Any) -> Mapping[str, Any]:
        write((args.row_id, args.owner, args.amount_cents, ctx.intent.scoped_key))
        return {"row_id": args.row_id}

    def check(intent: Any, ctx: Any) -> Any:
        conn = _open(path)
        try:
            found = conn.execute("SELECT 1 FROM rows WHERE key = ?", (intent.scoped_key,)).fetchone()
        finally:
            conn.close()
        return CheckResult("applied" if found else "not_applied", {"row_id": intent.arguments["row_id"]})

    return Action(
        name=name,
        description="insert one row owned by the principal",
        arguments=Row,
        authorize=lambda p, a: Decision.allow("owner") if a.owner == p.name else Decision.deny("owner", "not yours"),
        validate=lambda p, a: Decision.allow("amount") if a.amount_cents >= 0 else Decision.deny("amount", "negative"),
        execute=execute,
        check=check,
        quick_rules=quick_rules,  # True by default: the rules compare fields of the arguments, no I/O
    )


# -- measurement ------------------------------------------------------------------------------------


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def bench_raw(path: Path, rows: int, offset: int) -> tuple[float, list[float]]:
    """Insert ``rows`` rows into the SQLite file at ``path`` (created if missing), timed."""
    conn = _open(str(path))
    lat: list[float] = []
    began = time.perf_counter()
    for i in range(offset, offset + rows):
        t = time.perf_counter()
        insert_durably(conn, (i, "alice", 1000 + i, f"alice/k{i}"))
        lat.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - began
    conn.close()
    return rows / elapsed, lat


def start_broker(work: Path, target: str = "process", rules: str = "loop") -> tuple[subprocess.Popen[bytes], str]:
    config = {
        "storage": {"sqlite": str(work / "broker.db")},
        "socket_path": str(work / "broker.sock"),
        "token_key_file": str(work / "token.key"),
        "grant_key_file": str(work / "grant.key"),
        "checkpoint_key_file": str(work / "checkpoint.key"),
        "ledger_checkpoints": str(work / "ledger.checkpoints"),
        "import_paths": [str(HERE)],
        "actions": [{"ref": f"broker_bench:{name}",
                     "options": {"database": str(work / "target.db"), "target": target, "rules": rules}}
                    for name in ("insert_row", "noop_row")],
    }
    (work / "broker.yaml").write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cli = [sys.executable, "-c", _CLI, "broker"]
    mint = [*cli, "mint-token", "--config", str(work / "broker.yaml"), "--task", "bench", "--principal", "alice",
            "--action", "insert_row", "--action", "noop_row"]
    token = subprocess.run(mint, env=env, check=True, capture_output=True, text=True).stdout.strip()
    serve = [*cli, "serve", "--config", str(work / "broker.yaml")]
    proc = subprocess.Popen(serve, env=env, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    if "listening" not in line:
        raise RuntimeError(f"broker did not start: {line}")
    return proc, token


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU seconds used so far by process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _schedstat(pid: int) -> dict[str, tuple[float, int]]:
    """Per live thread of ``pid``: seconds spent runnable but waiting for a CPU, and times scheduled
    in (/proc/PID/task/*/schedstat: run time, run-queue wait, timeslices)."""
    out: dict[str, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):
            _, wait_ns, count = (task / "schedstat").read_text().split()
            out[task.name] = (int(wait_ns) / 1e9, int(count))
    return out


def _sched_delta(before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]]) -> tuple[float, int]:
    # per thread, so that threads ending meanwhile (the last run's handlers) do not subtract
    waited = sum(w - before.get(tid, (0.0, 0))[0] for tid, (w, _) in after.items())
    slices = sum(n - before.get(tid, (0.0, 0))[1] for tid, (_, n) in after.items())
    return waited, slices


class Measured(NamedTuple):
    rate: float  # writes/s
    latencies: list[float]
    failures: int
    slices_per_write: float  # times the broker's threads were scheduled in, per write
    queue_ms_per_write: float  # ms the broker's threads waited for a CPU, summed over threads, per write


def bench_broker(
    work: Path, token: str, rows: int, concurrency: int, offset: int, action: str = "insert_row",
    broker_pid: int | None = None,
) -> Measured:
    from contain.broker import BrokerClient

    lat: list[float] = []
    failures = [0]
    lock = threading.Lock()
    prefix = "k" if action == "insert_row" else action[0]  # a key names one write of one action

    def worker(start: int) -> None:
        client = BrokerClient(str(work / "broker.sock"), token)
        mine: list[float] = []
        for i in range(start, rows, concurrency):
            n = offset + i
            t = time.perf_counter()
            reply = client.call(action, {"row_id": n, "owner": "alice", "amount_cents": 1000 + i},
                                idempotency_key=f"{prefix}{n}")
            mine.append(time.perf_counter() - t)
            if reply.status != 200:
                with lock:
                    failures[0] += 1
        with lock:
            lat.extend(mine)
        finished.wait()  # keep the connection, and so the broker's handler thread, until sampled
        hang_up.wait()

    # The broker's handler threads end when their connections close, taking their counters with
    # them: sample the scheduler while every client is done but still connected.
    finished = threading.Barrier(concurrency + 1)
    hang_up = threading.Event()
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(concurrency)]
    before = _schedstat(broker_pid) if broker_pid else {}
    began = time.perf_counter()
    for t in threads:
        t.start()
    finished.wait()
    elapsed = time.perf_counter() - began
    waited, slices = _sched_delta(before, _schedstat(broker_pid)) if broker_pid else (0.0, 0)
    hang_up.set()
    for t in threads:
        t.join()
    return Measured(rows / elapsed, lat, failures[0], slices / rows, waited * 1000 / rows)


def bench_broker_one_thread(
    work: Path, token: str, rows: int, concurrency: int, offset: int, action: str = "insert_row",
    broker_pid: int | None = None,
) -> Measured:
    """The same calls as ``bench_broker``, from one thread holding ``concurrency`` kept-alive
    connections (as a load generator such as wrk does): the clients cost the two CPUs that the
    broker, the target writer and the raw baseline share one wake-up per reply, not a thread
    wake-up and a GIL hand-off each."""
    import selectors

    prefix = "k" if action == "insert_row" else action[0]
    events = selectors.DefaultSelector()
    lat: list[float] = []
    failures = 0
    todo = iter(range(rows))
    state: dict[socket.socket, list[Any]] = {}  # socket: [sent at, bytes received]

    def send(sock: socket.socket) -> bool:
        i = next(todo, None)
        if i is None:
            return False
        n = offset + i
        body = json.dumps({"arguments": {"row_id": n, "owner": "alice", "amount_cents": 1000 + i},
                           "idempotency_key": f"{prefix}{n}"}).encode()
        head = (f"POST /v1/actions/{action} HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        state[sock] = [time.perf_counter(), b""]
        sock.sendall(head.encode() + body)
        return True

    socks = []
    for _ in range(concurrency):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(work / "broker.sock"))
        socks.append(sock)
    before = _schedstat(broker_pid) if broker_pid else {}
    began = time.perf_counter()
    busy = 0
    for sock in socks:
        if send(sock):
            events.register(sock, selectors.EVENT_READ)
            busy += 1
    while busy:
        for key, _ in events.select():
            sock = key.fileobj  # type: ignore[assignment]
            entry = state[sock]
            entry[1] += sock.recv(65536)
            end = entry[1].find(b"\r\n\r\n")
            if end < 0:
                continue
            head = entry[1][:end].decode("latin-1").split("\r\n")
            length = next(int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:"))
            if len(entry[1]) < end + 4 + length:
                continue
            lat.append(time.perf_counter() - entry[0])
            if head[0].split(" ")[1] != "200":
                failures += 1
            if not send(sock):
                events.unregister(sock)
                busy -= 1
    elapsed = time.perf_counter() - began
    waited, slices = _sched_delta(before, _schedstat(broker_pid)) if broker_pid else (0.0, 0)
    for sock in socks:
        sock.close()
    events.close()
    return Measured(rows / elapsed, lat, failures, slices / rows, waited * 1000 / rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000, help="rows per measurement")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 16, 32])
    parser.add_argument("--target", choices=["process", "thread"], default="process",
                        help="where the target database's one writer runs (default: a process of its own)")
    parser.add_argument("--rules", choices=["loop", "executor"], default="loop",
                        help="where authorize/validate run: on the server loop (quick_rules, the default: "
                             "these rules do no I/O) or on executor threads (as rules that do I/O)")
    parser.add_argument("--clients", choices=["one-thread", "threads"], default="one-thread",
                        help="how the clients run: one thread holding every connection (default), or a thread "
                             "each with BrokerClient")
    parser.add_argument("--rounds", type=int, default=3, help="raw and broker runs interleaved, medians reported")
    parser.add_argument("--warmup", type=int, default=3000,
                        help="untimed rows into the raw file and writes through the broker before measuring")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="broker-bench-", dir="/var/tmp"))
    sys.path.insert(0, str(ROOT / "src"))
    proc, token = start_broker(work, args.target, args.rules)
    raw: list[tuple[float, list[float]]] = []
    fresh: list[float] = []
    brokered: dict[int, list[Measured]] = {c: [] for c in args.concurrency}
    ceiling: list[Measured] = []
    cpu: dict[int, list[tuple[float, float]]] = {c: [] for c in args.concurrency}  # broker ms per write
    warm_raw = work / "raw.db"
    top = max(args.concurrency)
    try:
        bench = bench_broker_one_thread if args.clients == "one-thread" else bench_broker
        bench_raw(warm_raw, args.warmup, 0)
        bench(work, token, args.warmup, top, 0)
        offset = args.warmup
        for round_ in range(args.rounds):
            fresh.append(bench_raw(work / f"fresh{round_}.db", args.rows, 0)[0])
            raw.append(bench_raw(warm_raw, args.rows, offset))
            for level in args.concurrency:
                before = _cpu_seconds(proc.pid)
                brokered[level].append(bench(work, token, args.rows, level, offset, broker_pid=proc.pid))
                after = _cpu_seconds(proc.pid)
                cpu[level].append(tuple((b - a) * 1000 / args.rows for a, b in zip(before, after, strict=True)))
                offset += args.rows
            ceiling.append(bench(work, token, args.rows, top, offset, "noop_row", proc.pid))
    finally:
        proc.terminate()
        proc.wait(30)
    raw_rate = statistics.median(r for r, _ in raw)
    raw_lat = [x for _, lat in raw for x in lat]
    print(f"rows per run {args.rows}, rounds {args.rounds} (interleaved), warm-up "
          f"{args.warmup}, target writer: {args.target}, clients: {args.clients}, rules on: {args.rules}; "
          "medians of rates; "
          "latency over all runs")
    print(f"raw SQLite, fresh file (reference only):        {statistics.median(fresh):8.0f} rows/s")
    print(f"raw SQLite (WAL, synchronous=FULL, 1 txn/row): {raw_rate:8.0f} rows/s    "
          f"p50 {_pct(raw_lat, .5):.2f} ms  p99 {_pct(raw_lat, .99):.2f} ms")
    for level, runs in brokered.items():
        rate = statistics.median(m.rate for m in runs)
        lat = [x for m in runs for x in m.latencies]
        failed = sum(m.failures for m in runs)
        user = statistics.median(u for u, _ in cpu[level])
        system = statistics.median(k for _, k in cpu[level])
        print(f"broker, {level:2d} client(s):                    {rate:8.0f} writes/s  "
              f"p50 {_pct(lat, .5):.2f} ms  p99 {_pct(lat, .99):.2f} ms  ratio {rate / raw_rate:.2f}x raw"
              f"{f'  FAILED {failed}' if failed else ''}")
        print(f"    broker per write: CPU {user:.3f} ms user + {system:.3f} ms sys; threads scheduled in "
              f"{statistics.median(m.slices_per_write for m in runs):.1f} times, waiting for a CPU "
              f"{statistics.median(m.queue_ms_per_write for m in runs):.2f} ms (summed over threads)")
    rate = statistics.median(m.rate for m in ceiling)
    lat = [x for m in ceiling for x in m.latencies]
    failed = sum(m.failures for m in ceiling)
    print(f"broker alone ({top} clients, executor writes nothing): {rate:5.0f} writes/s  "
          f"p50 {_pct(lat, .5):.2f} ms  p99 {_pct(lat, .99):.2f} ms  ratio {rate / raw_rate:.2f}x raw"
          f"{f'  FAILED {failed}' if failed else ''}")
    verify = subprocess.run([sys.executable, "-c", _CLI, "ledger", "verify", "--config", str(work / "broker.yaml")],
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), capture_output=True, text=True)
    print(verify.stdout.strip().splitlines()[-1])
    print(f"(work dir {work})")


if __name__ == "__main__":
    main()
