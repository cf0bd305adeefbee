"""The same storage / ledger / idempotency suite on SQLite and on a real PostgreSQL server.

PostgreSQL: a private cluster is created for this session (initdb into a temp dir, as the
``postgres`` OS user when running as root, since initdb refuses root), listening only on a Unix
socket in that dir, and stopped at the end. Skipped only when the server binaries are absent.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "broker"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "broker"))

from contain.broker import (
    BrokerRequest,
    IdempotencyRecord,
    PostgresStore,
    SqliteStore,
    Store,
    mint_token,
    plan_entry,
    verify_entries,
)
from contain.broker.tokens import TokenKey
from contain.errors import LedgerInUse


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries are absent (/usr/lib/postgresql/*/bin/postgres); install postgresql")
    base = Path(tempfile.mkdtemp(prefix="contain-pg-"))
    data = base / "data"
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    base.chmod(0o755)
    run = lambda argv: subprocess.run(prefix + argv, check=True, capture_output=True, text=True)  # noqa: E731
    run([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"])
    run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "start",
         "-o", f"-k {base} -c listen_addresses='' -c fsync=on"])
    try:
        yield f"host={base} dbname=postgres user=postgres"
    finally:
        run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: list[Store] = []
    if request.param == "sqlite":
        def make(**options: Any) -> Store:
            made.append(SqliteStore(str(tmp_path / "s.db"), **options))
            return made[-1]
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS ledger, idempotency, grant_uses")

        def make(**options: Any) -> Store:
            made.append(PostgresStore(dsn, **options))
            return made[-1]
    yield make
    for s in made:
        s.close()


def _append(txn: Any, n: int) -> int:
    entry = plan_entry(txn.head(), kind="request", task="t", principal="p", action="a", idempotency_key=f"k{n}",
                       argument_digest="d", detail={"n": n, "f": 0.5}, now=1_800_000_000.123456 + n)
    txn.append(entry)
    return entry.seq


def test_appends_chain_and_verify(store_factory: Any) -> None:
    store = store_factory()
    store.start()
    seqs = [store.run(lambda t, n=n: _append(t, n)) for n in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    rows = store.raw_rows()
    assert verify_entries(rows) == [] and rows[0]["detail"] == {"n": 0, "f": 0.5}


def test_concurrent_appends_from_threads_stay_one_chain(store_factory: Any) -> None:
    store = store_factory()
    store.start()
    threads = [threading.Thread(target=lambda i=i: [store.run(lambda t, n=n: _append(t, n)) for n in range(i * 25, i * 25 + 25)])
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = store.raw_rows()
    assert [r["seq"] for r in rows] == list(range(1, 201)) and verify_entries(rows) == []
    assert store.commits < 200  # group commit shared transactions between threads


def test_a_failing_function_rolls_back_only_its_own_savepoint(store_factory: Any) -> None:
    store = store_factory()
    store.start()
    store.run(lambda t: _append(t, 0))

    def bad(t: Any) -> None:
        _append(t, 1)
        raise ValueError("no")

    with pytest.raises(ValueError):
        store.run(bad)
    store.run(lambda t: _append(t, 2))
    rows = store.raw_rows()
    assert [r["detail"]["n"] for r in rows] == [0, 2] and verify_entries(rows) == []


def test_idempotency_records_and_grant_uses(store_factory: Any) -> None:
    store = store_factory()
    store.start()
    record = IdempotencyRecord("p", "k", "a", "d", "in_flight", 0, {}, 3)
    store.run(lambda t: t.put_record(record))
    assert store.run(lambda t: t.get_record("p", "k")) == record
    assert [r.key for r in store.run(lambda t: t.in_flight())] == ["k"]
    done = IdempotencyRecord("p", "k", "a", "d", "done", 200, {"status": "succeeded"}, 3)
    store.run(lambda t: t.put_record(done))
    assert store.run(lambda t: t.get_record("p", "k")) == done and store.run(lambda t: t.in_flight()) == []
    assert store.run(lambda t: t.get_record("q", "k")) is None
    store.run(lambda t: t.delete_record("p", "k"))
    assert store.run(lambda t: t.get_record("p", "k")) is None
    assert [store.run(lambda t: t.consume_use("g", 2)) for _ in range(3)] == [True, True, False]
    assert all(store.run(lambda t: t.consume_use("u", None)) for _ in range(3))


def test_broker_semantics_on_this_store(store_factory: Any, tmp_path: Path) -> None:
    import invoice_actions
    from broker_testkit import Clock, make_broker

    db = str(tmp_path / "inv.db")
    invoice_actions.create_database(db, api_key="k-secret-1")
    clock = Clock()
    broker = make_broker(tmp_path, db, clock, store=store_factory())
    broker.start()
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=60, now=clock.now)
    ok = {"invoice_id": "INV-1", "amount_cents": 10500}
    statuses = [broker.handle(BrokerRequest(token, "update_invoice", args, key)).status for args, key in (
        (ok, "k1"), (ok, "k1"), ({"invoice_id": "INV-1", "amount_cents": 10600}, "k1"),
        ({"invoice_id": "INV-2", "amount_cents": 20000}, None), ({"invoice_id": "INV-3", "amount_cents": 90000}, None))]
    assert statuses == [200, 200, 422, 403, 202]
    broker.close()
    assert verify_entries(broker.store.raw_rows()) == []


@pytest.mark.parametrize("apply", [True, False])
def test_crash_recovery_on_this_store(store_factory: Any, tmp_path: Path, apply: bool) -> None:
    import sqlite3

    import invoice_actions
    from broker_testkit import Clock, make_broker

    from contain.broker import Action

    db = str(tmp_path / "inv.db")
    invoice_actions.create_database(db, api_key="k-secret-1")
    clock = Clock()
    first = make_broker(tmp_path, db, clock, store=store_factory())
    first.start()
    action = first.actions["update_invoice"]

    class Crash(BaseException):
        pass

    def crashing(args: Any, ctx: Any) -> Any:
        if apply:
            action.execute(args, ctx)
        raise Crash()

    first.actions["update_invoice"] = Action(**{**action.__dict__, "execute": crashing})
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=60, now=clock.now)
    args = {"invoice_id": "INV-1", "amount_cents": 10500}
    with pytest.raises(Crash):
        first.handle(BrokerRequest(token, "update_invoice", args, "c1"))
    first.store.close()
    second = make_broker(tmp_path, db, clock, store=store_factory())
    assert [r["result"] for r in second.start()] == ["applied" if apply else "not_applied"]
    reply = second.handle(BrokerRequest(token, "update_invoice", args, "c1"))
    assert reply.status == 200 and reply.body["replayed"] is apply
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM applied").fetchone()[0] == 1
    conn.close()
    second.close()
    assert verify_entries(second.store.raw_rows()) == []


def test_a_failing_function_in_a_shared_batch_undoes_only_itself(store_factory: Any) -> None:
    """One caller leads while three queue behind it; their batch has one failure, which is replayed
    with savepoints so the other two commit and the chain stays whole."""
    store = store_factory()
    store.start()
    release = threading.Event()
    leading = threading.Event()

    def slow(t: Any) -> int:
        leading.set()
        release.wait(5)
        return _append(t, 0)

    def bad(t: Any) -> None:
        _append(t, 99)
        raise ValueError("no")

    outcomes: dict[str, Any] = {}

    def call(name: str, fn: Any) -> None:
        try:
            outcomes[name] = store.run(fn)
        except ValueError as exc:
            outcomes[name] = exc

    first = threading.Thread(target=call, args=("slow", slow))
    first.start()
    assert leading.wait(5)
    others = [threading.Thread(target=call, args=(n, f)) for n, f in
              (("a", lambda t: _append(t, 1)), ("bad", bad), ("b", lambda t: _append(t, 2)))]
    for t in others:
        t.start()
    while len(store._pending) < 3:  # all three queued behind the leader: they form the next batch
        threading.Event().wait(0.01)
    commits = store.commits
    release.set()
    for t in [first, *others]:
        t.join()
    assert isinstance(outcomes["bad"], ValueError) and outcomes["slow"] == 1
    assert sorted([outcomes["a"], outcomes["b"]]) == [2, 3] and store.commits == commits + 2
    rows = store.raw_rows()
    assert sorted(r["detail"]["n"] for r in rows) == [0, 1, 2] and verify_entries(rows) == []


def test_buffered_writes_read_back_as_the_database_would(store_factory: Any) -> None:
    store = store_factory()
    store.start()
    first = IdempotencyRecord("p", "k", "a", "d", "in_flight", 0, {}, 3)
    later = IdempotencyRecord("p", "k", "other", "x", "done", 200, {"n": 1.0}, 9)

    def inside(t: Any) -> list[Any]:
        seen = [t.get_record("p", "k")]
        t.put_record(first)
        t.put_record(later)  # an update keeps action, digest and intent_seq (ON CONFLICT ... SET state, ...)
        seen.append(t.get_record("p", "k"))
        t.delete_record("p", "gone")
        seen.append(t.get_record("p", "gone"))
        return seen

    store.run(lambda t: t.put_record(IdempotencyRecord("p", "gone", "a", "d", "done", 200, {}, 1)))
    before, buffered, deleted = store.run(inside, records=[("p", "k"), ("p", "gone")])
    stored = store.run(lambda t: t.get_record("p", "k"))
    assert before is None and deleted is None and store.run(lambda t: t.get_record("p", "gone")) is None
    assert buffered == stored == IdempotencyRecord("p", "k", "a", "d", "done", 200, {"n": 1.0}, 3)
    assert [r.key for r in store.run(lambda t: t.in_flight())] == []


# -- one broker per store --------------------------------------------------------------------------

_HOLDER = """
import sys, time
from contain.broker import PostgresStore, SqliteStore
kind, where = sys.argv[1], sys.argv[2]
store = SqliteStore(where) if kind == "sqlite" else PostgresStore(where)
store.start()
print("ready", flush=True)
time.sleep(120)
"""


def _where(store: Store) -> tuple[str, str]:
    return ("sqlite", store.path) if isinstance(store, SqliteStore) else ("postgres", store.dsn)  # type: ignore[attr-defined]


def test_a_second_broker_on_a_store_in_use_refuses_and_gets_it_once_free(store_factory: Any) -> None:
    first = store_factory()
    first.start()
    first.run(lambda t: _append(t, 0))
    second = store_factory(instance_wait_s=0.2)
    with pytest.raises(LedgerInUse) as refused:
        second.start()
    assert "another broker is serving this ledger" in str(refused.value)
    assert (f"pid {os.getpid()}" in str(refused.value)) if isinstance(first, SqliteStore) else "advisory lock" in str(refused.value)
    with pytest.raises(RuntimeError, match="not running"):  # the refused store changed nothing and serves nothing
        second.run(lambda t: _append(t, 1))
    assert getattr(second, "_lock_fd", None) is None and getattr(second, "_lock_conn", None) is None  # nothing kept
    first.close()
    second.start()
    assert second.run(lambda t: _append(t, 1)) == 2  # the head comes from the database, not from a cache
    assert verify_entries(second.raw_rows()) == []


def test_a_killed_broker_frees_its_store_for_the_next(store_factory: Any) -> None:
    probe = store_factory()
    kind, where = _where(probe)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, kind, where], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        busy = store_factory(instance_wait_s=0.2)
        with pytest.raises(LedgerInUse):
            busy.start()
        holder.kill()
        holder.wait(10)
        probe.start()  # waits (up to 5 s) for the server to notice the killed session, if it has to
        assert probe.run(lambda t: _append(t, 0)) == 1
    finally:
        holder.kill()
        holder.wait(10)


def test_the_cached_head_survives_a_failed_batch(store_factory: Any) -> None:
    """The store keeps the head between transactions; a batch that rolls back must not leave its
    appended (never committed) head behind."""
    store = store_factory()
    store.start()
    store.run(lambda t: _append(t, 0))

    def append_then_fail(t: Any) -> None:
        _append(t, 1)
        raise ValueError("no")

    with pytest.raises(ValueError):
        store.run(append_then_fail)
    assert store.run(lambda t: _append(t, 2)) == 2
    assert store.run(lambda t: t.head())[0] == 2
    assert verify_entries(store.raw_rows()) == []


def test_run_all_commits_its_calls_together_in_order_and_a_failure_is_its_own(store_factory: Any) -> None:
    store = store_factory()
    store.start()
    store.run(lambda t: _append(t, 0))
    commits = store.commits

    def bad(t: Any) -> None:
        _append(t, 99)
        raise ValueError("no")

    calls = [(lambda t, n=n: _append(t, n), ()) for n in (1, 2)] + [(bad, ()), (lambda t: _append(t, 3), ())]
    results = store.run_all(calls)
    assert [value for value, _ in results] == [2, 3, None, 4]
    assert [type(error) for _, error in results] == [type(None), type(None), ValueError, type(None)]
    assert store.commits == commits + 1  # one transaction (replayed once with savepoints) for all four
    rows = store.raw_rows()
    assert [r["detail"]["n"] for r in rows] == [0, 1, 2, 3] and verify_entries(rows) == []
    assert store.run_all([]) == []


def test_run_all_interleaves_with_callers_on_other_threads(store_factory: Any) -> None:
    """Calls from a thread that leads and from threads queued behind it make one chain; run_all
    returns only when every one of its calls is durable."""
    store = store_factory()
    store.start()
    done: list[list[Any]] = []

    def batches(i: int) -> None:
        for b in range(10):
            calls = [(lambda t, n=n: _append(t, n), ()) for n in range(i * 100 + b * 5, i * 100 + b * 5 + 5)]
            done.append([value for value, error in store.run_all(calls) if error is None])

    def singles() -> None:
        for n in range(1000, 1050):
            store.run(lambda t, n=n: _append(t, n))

    threads = [threading.Thread(target=batches, args=(i,)) for i in range(3)] + [threading.Thread(target=singles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = store.raw_rows()
    assert [r["seq"] for r in rows] == list(range(1, 201)) and verify_entries(rows) == []
    assert all(len(seqs) == 5 and seqs == sorted(seqs) for seqs in done)


# -- file modes (SQLite) ---------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return os.lstat(path).st_mode & 0o7777


def test_the_database_its_wal_and_shm_are_0600_whatever_the_umask_and_a_new_directory_is_0700(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state" / "broker.db"
    old = os.umask(0o022)  # the red team found broker.db and its WAL at 0644 under this umask
    try:
        store = SqliteStore(str(db))
        store.start()
        store.run(lambda t: t.put_record(IdempotencyRecord("p", "k", "a", "d", "done", 200, {}, 1)))
        names = {p.name: _mode(p) for p in db.parent.iterdir()}
        store.close()
    finally:
        os.umask(old)
    assert _mode(db.parent) == 0o700
    assert names == {n: 0o600 for n in ("broker.db", "broker.db-wal", "broker.db-shm", "broker.db-broker.lock")}


def test_existing_files_left_readable_by_others_are_made_0600_on_start(tmp_path: Path) -> None:
    db = tmp_path / "broker.db"
    store = SqliteStore(str(db))
    store.start()
    store.close()
    for path in (db, Path(f"{db}-wal")):
        path.touch()
        path.chmod(0o644)
    again = SqliteStore(str(db))
    again.start()
    try:
        assert _mode(db) == 0o600 and _mode(Path(f"{db}-wal")) == 0o600
    finally:
        again.close()


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_a_database_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    from contain.errors import BrokerStateUnsafe

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with pytest.raises(BrokerStateUnsafe) as raised:
        SqliteStore(str(shared / "broker.db")).start()
    assert str(shared) in raised.value.cause and "chmod go-w" in raised.value.fix
    assert not (shared / "broker.db").exists()  # refused before anything was created there


def test_a_database_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    from contain.errors import BrokerStateUnsafe

    target = tmp_path / "elsewhere.db"
    target.write_bytes(b"")
    (tmp_path / "broker.db").symlink_to(target)
    with pytest.raises(BrokerStateUnsafe):
        SqliteStore(str(tmp_path / "broker.db")).start()


def test_the_socket_is_refused_in_a_directory_others_can_write(tmp_path: Path) -> None:
    from contain.broker import BrokerServer
    from contain.errors import BrokerStateUnsafe

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(BrokerStateUnsafe):
        BrokerServer(None, socket_path=str(shared / "broker.sock"))  # type: ignore[arg-type]
    assert not (shared / "broker.sock").exists()
