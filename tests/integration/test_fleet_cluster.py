"""The fleet on a real Ray cluster: a head and a second node, each a separate `ray start` process.

One cluster serves the module (starting one costs about 11 s here): 60 jobs across both nodes,
a cancel that must leave nothing on either node, the second node killed mid-batch while jobs
write through a real broker (every job completes exactly once, the ledger has one write per
call), and finally the cluster stopped with no Ray process left. The tests run in that order
(the kill removes the second node). Each node has its own temp directory, 1 CPU, a 100 MB object
store and 2 sandbox slots.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "broker"))

from broker_testkit import make_broker

from contain.broker import BrokerServer
from contain.fleet.batch import Batch, run_batch
from contain.fleet.jobs import prepare_jobs, read_job_lines
from contain.fleet.local_cluster import LocalCluster, session_members
from contain.fleet.messages import JobReport
from contain.fleet.ray_nodes import RayDispatcher

pytest.importorskip("ray", reason="the fleet tests need Ray (pip install 'contain[fleet]')")
pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]

SLOTS = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    from contain.fleet.placement import gather_node_facts, plan_node_resources

    resources = plan_node_resources(gather_node_facts(), slots=SLOTS)  # what this host's facts allow
    assert resources.get("contain_backend_process") == SLOTS, resources
    local = LocalCluster(nodes=2, num_cpus=1, resources=resources)
    local.start()
    yield local
    local.stop()  # the last test checks that stop leaves nothing; this is for a failure before it


@pytest.fixture(scope="module")
def shared_tmp() -> Iterator[Path]:
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="contain-fleet-test-"))
    path.chmod(0o755)  # the sandbox user must traverse it to reach the broker socket
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _batch(folder: Path, name: str, lines: list[str], **options: Any) -> Batch:
    jobs = folder / f"{name}.jsonl"
    jobs.write_text("\n".join(lines) + "\n")
    items = list(prepare_jobs(read_job_lines(jobs), base_dir=folder))
    return run_batch(items, dispatcher=RayDispatcher(**options))


def _manifest(folder: Path, name: str, body: dict[str, Any]) -> str:
    (folder / f"{name}.json").write_text(json.dumps({"version": 1, "task": name, **body}))
    return f"{name}.json"


def test_sixty_jobs_on_two_nodes_each_complete_exactly_once_with_their_outputs(
    cluster: LocalCluster, shared_tmp: Path
) -> None:
    manifest = _manifest(shared_tmp, "sixty", {"fleet": {"warm_sandboxes": 1}})
    lines = [
        json.dumps({
            "id": f"job-{i}", "manifest": manifest,
            "command": ["sh", "-c", 'tr a-z A-Z < /work/in > /work/out.txt; echo "$CONTAIN_FLEET_JOB_ID"'],
            "inputs": [{"path": "/work/in", "text": f"payload {i}"}], "outputs": ["/work/out.txt"],
        })
        for i in range(60)
    ]
    lines.append(json.dumps({"id": "bad-manifest", "manifest": {"task": "x", "filez": []}, "command": ["true"]}))
    lines.append("{not json")
    reports = list(_batch(shared_tmp, "sixty", lines))

    assert Counter(r.job_id for r in reports if r.job_id) == Counter([f"job-{i}" for i in range(60)] + ["bad-manifest"])
    assert len(reports) == 62
    done = {r.job_id: r for r in reports if r.status == "done"}
    assert len(done) == 60
    for i in range(60):
        report = done[f"job-{i}"]
        assert report.result is not None and report.result.exit_code == 0, report.result
        assert report.result.stdout.data == f"job-{i}\n".encode()
        assert report.outputs == {"/work/out.txt": f"PAYLOAD {i}".encode()}
        assert report.attempts == 1 and report.backend == "process"
    assert {r.node_id for r in done.values()} == {n.node_id for n in cluster.nodes}, "both nodes ran jobs"
    failed = {r.job_id or f"line {r.line}": r for r in reports if r.status == "failed"}
    assert set(failed) == {"bad-manifest", "line 62"}
    assert "filez" in failed["bad-manifest"].cause and "manifest is invalid" in failed["bad-manifest"].cause
    assert "Invalid JSON" in failed["line 62"].cause


OTHER_BACKENDS = {
    "container:runc": {"runtime": {"backend": "container"}},
    "container:runsc": {"runtime": {"backend": "container", "container": {"runtime": "runsc"}}},
    "microvm": {"runtime": {"backend": "microvm"}},
}


@pytest.mark.parametrize("backend", sorted(OTHER_BACKENDS))
def test_jobs_of_another_backend_run_on_both_nodes_where_this_host_offers_it(
    backend: str, cluster: LocalCluster, shared_tmp: Path
) -> None:
    from contain.fleet.placement import gather_node_facts, is_backend_supported

    why_not = is_backend_supported(gather_node_facts(), backend)
    if why_not is not None:
        pytest.skip(f"{backend} is not offered here: {why_not}")
    manifest = _manifest(shared_tmp, backend.replace(":", "-"), OTHER_BACKENDS[backend])
    lines = [json.dumps({"id": f"{backend}-{i}", "manifest": manifest, "command": ["echo", str(i)]}) for i in range(8)]
    reports = list(_batch(shared_tmp, backend.replace(":", "-"), lines))
    assert {r.status for r in reports} == {"done"} and {r.backend for r in reports} == {backend}
    assert sorted(r.result.stdout.data for r in reports) == sorted(f"{i}\n".encode() for i in range(8))  # type: ignore[union-attr]


def _processes_with_argv(argv: list[str]) -> list[int]:
    wanted = ("\0".join(argv) + "\0").encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if handle.read() == wanted:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _sandbox_cgroups(owner_pids: set[int]) -> list[str]:
    from contain.host.facts import detect_host
    from contain.runtime.cgroup_plan import plan_parent_dirs

    found = []
    for parent in plan_parent_dirs(detect_host()):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        found += [f"{parent}/{n}" for n in names if any(n.startswith(f"contain-{pid}-") for pid in owner_pids)]
    return found


def _iterate_in_background(batch: Batch) -> tuple[list[JobReport], threading.Thread]:
    reports: list[JobReport] = []
    thread = threading.Thread(target=lambda: reports.extend(batch), daemon=True)
    thread.start()
    return reports, thread


def _wait_until(predicate: Any, *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # integration test polling a real cluster


def test_cancelling_a_batch_kills_every_sandbox_on_both_nodes_and_leaves_no_cgroup(
    cluster: LocalCluster, shared_tmp: Path
) -> None:
    sleeper = ["sleep", "61.25"]  # an argv no other test on this machine runs
    manifest = _manifest(shared_tmp, "cancel", {"resources": {"wall_s": 300}, "fleet": {"warm_sandboxes": 2}})
    lines = [json.dumps({"id": f"c{i}", "manifest": manifest, "command": sleeper}) for i in range(10)]
    batch = _batch(shared_tmp, "cancel", lines)
    reports, thread = _iterate_in_background(batch)
    _wait_until(lambda: len(_processes_with_argv(sleeper)) == 2 * SLOTS, timeout_s=60, what="4 sleeping jobs")
    actor_pids = {node.description.pid for node in batch.nodes.values()}
    assert len(actor_pids) == 2
    assert len(_sandbox_cgroups(actor_pids)) >= 2 * SLOTS, "running and warm sandboxes have cgroups"

    batch.cancel()
    thread.join(90)

    assert not thread.is_alive()
    assert sorted(r.job_id for r in reports if r.job_id) == sorted(f"c{i}" for i in range(10))
    assert {r.status for r in reports} == {"cancelled"}
    assert _processes_with_argv(sleeper) == []
    assert _sandbox_cgroups(actor_pids) == []
    assert {n: (r.killed, r.unfinished) for n, r in batch.cancel_reports.items()} == {  # type: ignore[union-attr]
        n.node_id: (SLOTS, ()) for n in cluster.nodes
    }


@pytest.fixture
def live_broker(shared_tmp: Path) -> Iterator[tuple[BrokerServer, str, str]]:
    import invoice_actions

    from contain.broker.tokens import TokenKey

    private = shared_tmp / "broker-private"
    private.mkdir(mode=0o700)
    db = str(private / "invoices.db")
    invoice_actions.create_database(db, api_key="k-secret-1")
    broker = make_broker(private, db, time.time)
    broker.start()
    server = BrokerServer(broker, socket_path=str(shared_tmp / "broker.sock"))
    server.start()
    key_file = private / "token.key"
    key_file.write_bytes(b"t" * 32)
    key_file.chmod(0o600)
    TokenKey.load_or_create(key_file)  # the same key the broker checks tokens with
    config = private / "broker.yaml"
    config.write_text(json.dumps({
        "storage": {"sqlite": str(private / "broker.db")}, "socket_path": server.socket_path,
        "token_key_file": str(key_file), "grant_key_file": str(private / "grant.key"),
        "checkpoint_key_file": str(private / "checkpoint.key"),
        "ledger_checkpoints": str(private / "ledger.checkpoints"),
        "actions": [{"ref": "invoice_actions:update_invoice", "options": {"database": db}}],
    }))
    yield server, db, str(config)
    server.shutdown()
    broker.close()


WRITE_THEN_WAIT = r'''
import json, runpy, time, os
bc = runpy.run_path("/.contain/broker-client")
reply = bc["BrokerClient"]().call("update_invoice", {"invoice_id": "INV-1", "amount_cents": AMOUNT})
print(json.dumps({"status": reply.status, "replayed": reply.body.get("replayed"), "key": reply.body.get("idempotency_key")}))
time.sleep(3)
'''


def test_killing_the_second_node_mid_batch_retries_its_jobs_and_the_ledger_shows_no_duplicate_write(
    cluster: LocalCluster, shared_tmp: Path, live_broker: tuple[BrokerServer, str, str]
) -> None:
    server, db, config = live_broker
    manifest = _manifest(shared_tmp, "kill", {
        "principal": "alice", "records": [{"name": "invoices", "actions": ["update_invoice"]}],
        "fleet": {"retries": 2, "warm_sandboxes": 1},
    })
    count = 12
    lines = [
        json.dumps({"id": f"k{i}", "manifest": manifest, "code": WRITE_THEN_WAIT.replace("AMOUNT", str(10_000 + i))})
        for i in range(count)
    ]
    batch = _batch(shared_tmp, "kill", lines, broker_config=config)
    second = cluster.nodes[1].node_id
    killed_after_write: list[str] = []

    def kill_once_a_job_on_the_second_node_has_written() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # Written less than a second ago: the job is surely still in its 3 s sleep when killed
            # (a job that wrote long ago may finish on the second node before the kill lands).
            fresh = _rows(db, "SELECT new_amount_cents FROM applied WHERE applied_at > ?", (time.time() - 1.0,))
            written = {f"k{amount - 10_000}" for (amount,) in fresh}
            on_second = [job for job, node in batch.in_flight().items() if node == second and job in written]
            if on_second:
                killed_after_write.extend(on_second)
                cluster.kill_node(1)
                return
            time.sleep(0.05)  # integration test polling a real database

    killer = threading.Thread(target=kill_once_a_job_on_the_second_node_has_written, daemon=True)
    killer.start()
    reports = list(batch)
    killer.join(10)

    assert killed_after_write, "the second node was killed while a job on it had already written"
    assert Counter(r.job_id for r in reports) == Counter(f"k{i}" for i in range(count)), "each job reported once"
    assert {r.status for r in reports} == {"done"}, [r.cause for r in reports if r.status != "done"]
    assert all(r.result is not None and r.result.exit_code == 0 for r in reports)
    retried = {r.job_id: r for r in reports if r.retried}
    assert set(killed_after_write) <= set(retried)
    assert all(r.node_id == cluster.nodes[0].node_id for r in retried.values()), "retries ran on the head node"
    assert all(second in why for r in retried.values() for why in r.retried_after)
    for job in killed_after_write:  # its lost attempt wrote; the retry got that write's answer back
        answer = json.loads(retried[job].result.stdout.data)  # type: ignore[union-attr]
        assert (answer["status"], answer["replayed"]) == (200, True)
    # Exactly one write per job: in the invoices database and in the broker's hash-chained ledger.
    applied = _rows(db, "SELECT idempotency_key, new_amount_cents FROM applied")
    assert sorted(amount for _, amount in applied) == [10_000 + i for i in range(count)]
    assert len({key for key, _ in applied}) == count
    intents = Counter(row["idempotency_key"] for row in server.broker.store.raw_rows() if row["kind"] == "intent")
    assert len(intents) == count and set(intents.values()) == {1}, intents
    assert all(key.endswith("-1") and "fj-" in key for key in intents), intents
    # The dead node's sandboxes died with its actor (bubblewrap's --die-with-parent); their cgroups
    # stay until the sweep contain runs at a sandbox's start removes them, empty as they are.
    from contain.host.facts import detect_host
    from contain.runtime.cgroup_sweep import sweep_stale_cgroups

    dead_actor = batch.nodes[second].description.pid
    sweep_stale_cgroups(detect_host())
    assert _sandbox_cgroups({dead_actor}) == []


def _rows(db: str, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db, timeout=5)
    try:
        return conn.execute(sql, parameters).fetchall()
    finally:
        conn.close()


def test_stopping_the_cluster_leaves_no_ray_process(cluster: LocalCluster) -> None:
    sessions = [node.process.pid for node in cluster.nodes]
    root = cluster.nodes[0].temp_dir.parent

    survivors = cluster.stop()

    assert survivors == []
    assert all(session_members(sid) == [] for sid in sessions)
    leftovers = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if str(root).encode() in handle.read():
                        leftovers.append(int(entry))
            except OSError:
                continue
    assert leftovers == []
