"""The fleet on a real Ray cluster: a head and a second node, each a separate `ray start` process.

One cluster serves the module (starting one costs about 11 s here): 60 jobs across both nodes;
a mixed batch of the other backends this host has (``container:runc`` advertised by the head
only, ``container:runsc`` and ``microvm`` by the second node only), each job landing only where
its backend is advertised; a cancel of sleeping jobs on every backend that must leave no process,
cgroup, container state or QEMU on either node; the second node killed mid-batch while jobs write
through a real broker (every job completes exactly once, the ledger has one write per call); and
finally the cluster stopped with no Ray process left. The tests run in that order (the kill
removes the second node). Each node has its own temp directory, 1 CPU, a 100 MB object store, 2
process slots, 2 slots of its container runtime and (second node) 1 microVM slot.

Which other backends this host has is ``contain doctor``'s verdict (the backends' own probes:
``observe_host`` then ``build_report``) and the fleet's placement row; a backend either rules out
is not advertised, and its checks skip with the reason.
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
# Which node offers which backend (0: the head). process is on both; every other backend on one
# node only, so "lands only where advertised" is a fact the placement must get right.
OTHER_BACKENDS: dict[str, tuple[int, int, dict[str, Any]]] = {  # backend -> (node, slots, manifest)
    "container:runc": (0, SLOTS, {"runtime": {"backend": "container"}}),
    "container:runsc": (1, SLOTS, {"runtime": {"backend": "container", "container": {"runtime": "runsc"}}}),
    # TCG here: a cold start takes 3-8 s, so one slot and a pool of one.
    "microvm": (1, 1, {"runtime": {"backend": "microvm"}}),
}
_DOCTOR_NAMES = {"container:runc": "container:runc", "container:runsc": "container:runsc", "microvm": "microvm backend"}


@pytest.fixture(scope="module")
def absent_backends() -> dict[str, str]:
    """backend -> why the fleet cannot run it here: `contain doctor`'s verdict (the backends' own probes),
    then the placement row (empty: all here)."""
    from contain.fleet.placement import gather_node_facts, is_backend_supported
    from contain.host.doctor import Status, build_report
    from contain.host.facts import detect_host
    from contain.host.observe import observe_host

    facts = detect_host()
    verdicts = {v.name: v for v in build_report(facts, observe_host(facts)).verdicts}
    node = gather_node_facts()
    absent = {}
    for backend, name in _DOCTOR_NAMES.items():
        verdict = verdicts.get(name)
        if verdict is None or verdict.status is not Status.OK:
            absent[backend] = f"{name}: {verdict.detail if verdict else 'no doctor verdict'}"
        elif (why := is_backend_supported(node, backend)) is not None:  # the fleet would not advertise it
            absent[backend] = f"{name} works, but the fleet's placement does not offer it here: {why}"
    return absent


@pytest.fixture(scope="module")
def cluster(absent_backends: dict[str, str]) -> Iterator[LocalCluster]:
    from contain.fleet.placement import gather_node_facts, plan_node_resources, resource_name

    offered = plan_node_resources(gather_node_facts(), slots=SLOTS)  # what this host's facts allow
    assert offered.get("contain_backend_process") == SLOTS, offered
    per_node: list[dict[str, float]] = [{"contain_backend_process": SLOTS}, {"contain_backend_process": SLOTS}]
    for backend, (node, slots, _) in OTHER_BACKENDS.items():
        if backend not in absent_backends:
            per_node[node][str(resource_name(backend))] = float(slots)
    local = LocalCluster(nodes=2, num_cpus=1, resources=per_node)
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


@pytest.fixture(scope="module")
def mixed_reports(cluster: LocalCluster, shared_tmp: Path, absent_backends: dict[str, str]) -> list[JobReport]:
    """One batch mixing every other backend this host has: 6 jobs each (2 for the microVM)."""
    lines = []
    for backend, (_, _, body) in OTHER_BACKENDS.items():
        if backend in absent_backends:
            continue
        name = "mixed-" + backend.replace(":", "-")
        manifest = _manifest(shared_tmp, name, {**body, "fleet": {"warm_sandboxes": 1}})
        lines += [
            json.dumps({
                "id": f"{backend}-{i}", "manifest": manifest,
                "command": ["sh", "-c", 'tr a-z A-Z < /work/in > /work/out.txt; echo "$CONTAIN_FLEET_JOB_ID"'],
                "inputs": [{"path": "/work/in", "text": f"{backend} {i}"}], "outputs": ["/work/out.txt"],
            })
            for i in range(2 if backend == "microvm" else 6)
        ]
    if not lines:
        pytest.skip("no backend other than process here: " + "; ".join(absent_backends.values()))
    return list(_batch(shared_tmp, "mixed", lines))


@pytest.mark.parametrize("backend", sorted(OTHER_BACKENDS))
def test_a_mixed_batchs_jobs_of_each_backend_land_only_on_the_node_advertising_it(
    backend: str, cluster: LocalCluster, mixed_reports: list[JobReport], absent_backends: dict[str, str]
) -> None:
    if backend in absent_backends:
        pytest.skip(f"{backend} is not offered here: {absent_backends[backend]}")
    node, _, _ = OTHER_BACKENDS[backend]
    reports = [r for r in mixed_reports if r.backend == backend]
    count = 2 if backend == "microvm" else 6
    assert sorted(r.job_id or "" for r in reports) == sorted(f"{backend}-{i}" for i in range(count))
    assert {r.status for r in reports} == {"done"}, [(r.job_id, r.cause) for r in reports if r.status != "done"]
    assert {r.node_id for r in reports} == {cluster.nodes[node].node_id}, "only the node advertising it"
    for report in reports:
        assert report.result is not None and report.result.exit_code == 0, report.result
        assert report.result.backend == backend  # the RunResult says which backend ran it
        assert report.result.stdout.data == f"{report.job_id}\n".encode()
        index = (report.job_id or "").rsplit("-", 1)[1]
        assert report.outputs == {"/work/out.txt": f"{backend} {index}".upper().encode()}


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


def _owned(name: str, owner_pids: set[int]) -> bool:
    """Whether a cgroup leaf or container directory was made by one of these sandbox owners."""
    return any(name.startswith(f"contain-{pid}-") for pid in owner_pids)


def _sandbox_cgroups(owner_pids: set[int]) -> list[str]:
    """Sandbox cgroups of these owners under every backend kind's parent, in every hierarchy."""
    import posixpath

    from contain.host.facts import detect_host
    from contain.runtime.backend_names import BACKEND_KINDS
    from contain.runtime.cgroup_plan import plan_parent_dirs

    found = []
    for contain_parent in plan_parent_dirs(detect_host()):
        for kind in BACKEND_KINDS:
            parent = posixpath.join(posixpath.dirname(contain_parent), kind.cgroup_parent)
            try:
                names = os.listdir(parent)
            except OSError:
                continue
            found += [f"{parent}/{n}" for n in names if _owned(n, owner_pids)]
    return found


def _container_dirs(owner_pids: set[int]) -> list[str]:
    """The container backend's per-sandbox directories (runtime state, rootfs, pins) of these owners."""
    from contain.runtime.container.backend import CONTAINER_ROOT

    try:
        return [str(CONTAINER_ROOT / n) for n in os.listdir(CONTAINER_ROOT) if _owned(n, owner_pids)]
    except FileNotFoundError:
        return []


def _sandbox_processes(owner_pids: set[int]) -> dict[tuple[int, str], str]:
    """(pid, start time) -> executable name of every host process in a sandbox cgroup of these
    owners: the process backend's bwrap and workload, runc's container, runsc's sentry and gofer,
    QEMU."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup") as handle:
                paths = [line.rstrip("\n").split(":", 2)[2] for line in handle]
            with open(f"/proc/{entry}/stat", "rb") as handle:
                started = handle.read().rsplit(b")", 1)[1].split()[19].decode()
            exe = os.path.basename(os.readlink(f"/proc/{entry}/exe"))
        except (OSError, IndexError):
            continue
        if any(_owned(part, owner_pids) for path in paths for part in path.split("/")):
            found[(int(entry), started)] = exe
    return found


def _still_alive(processes: dict[tuple[int, str], str]) -> list[str]:
    """The ones still running (same pid and start time, not a zombie), with their state and parent."""
    alive = []
    for (pid, started), exe in processes.items():
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/cgroup") as handle:
                where = handle.readline().strip()
        except (OSError, IndexError):
            continue
        # A zombie (Z, or X while being reaped) runs nothing and holds nothing but its pid; sandbox
        # processes whose parent died are re-parented to pid 1, which reaps them in its own time.
        if fields[19].decode() == started and fields[0] not in (b"Z", b"X"):
            alive.append(f"{pid} {exe} state {fields[0].decode()} parent {fields[1].decode()} in {where}")
    return alive


def _iterate_in_background(batch: Batch) -> tuple[list[JobReport], threading.Thread]:
    reports: list[JobReport] = []
    thread = threading.Thread(target=lambda: reports.extend(batch), daemon=True)
    thread.start()
    return reports, thread


def _wait_until(predicate: Any, *, timeout_s: float, what: str, state: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}" + (f": {state()}" if state else "")
        time.sleep(0.1)  # integration test polling a real cluster


def test_cancelling_a_batch_kills_every_sandbox_on_both_nodes_and_leaves_no_cgroup_container_or_vm(
    cluster: LocalCluster, shared_tmp: Path, absent_backends: dict[str, str]
) -> None:
    sleeper = ["sleep", "61.25"]  # an argv no other test on this machine runs
    manifest = _manifest(shared_tmp, "cancel", {"resources": {"wall_s": 300}, "fleet": {"warm_sandboxes": 2}})
    lines = [json.dumps({"id": f"c{i}", "manifest": manifest, "command": sleeper}) for i in range(10)]
    present = [b for b in OTHER_BACKENDS if b not in absent_backends]
    for backend in present:
        name = "cancel-" + backend.replace(":", "-")
        body = {**OTHER_BACKENDS[backend][2], "resources": {"wall_s": 300}, "fleet": {"warm_sandboxes": 1}}
        other = _manifest(shared_tmp, name, body)
        lines += [json.dumps({"id": f"{name}-{i}", "manifest": other, "command": sleeper}) for i in range(3)]
    batch = _batch(shared_tmp, "cancel", lines)
    reports, thread = _iterate_in_background(batch)
    # The process and runc sleepers are host processes with that argv; runsc's run inside its
    # sentry and the microVM's inside the guest: for those, their runtime's processes in a
    # sandbox cgroup of the node's actor (runsc's sentry, QEMU) show they are up.
    host_visible = 2 * SLOTS + (SLOTS if "container:runc" in present else 0)

    def state() -> str:
        ended = [(r.job_id, r.status, r.cause) for r in reports]
        return f"{len(_processes_with_argv(sleeper))} sleepers; in flight {batch.in_flight()}; reports {ended}"

    _wait_until(
        lambda: len(_processes_with_argv(sleeper)) >= host_visible, timeout_s=90, what="sleeping jobs", state=state
    )
    actor_pids = {node.description.pid for node in batch.nodes.values()}
    assert len(actor_pids) == 2
    wanted_runtimes = {"runsc": "container:runsc", "qemu-system-x86_64": "microvm"}
    wanted = {exe for exe, backend in wanted_runtimes.items() if backend in present}
    _wait_until(
        lambda: wanted <= set(_sandbox_processes(actor_pids).values()), timeout_s=90, what=str(wanted),
        state=lambda: _sandbox_processes(actor_pids),
    )
    before = _sandbox_processes(actor_pids)
    assert len(_sandbox_cgroups(actor_pids)) >= 2 * SLOTS, "running and warm sandboxes have cgroups"
    if "container:runc" in present or "container:runsc" in present:
        assert _container_dirs(actor_pids), "the container sandboxes have their state directories"

    batch.cancel()
    thread.join(120)

    assert not thread.is_alive()
    cancel_reports = {n: r for n, r in batch.cancel_reports.items() if not isinstance(r, str)}
    assert set(cancel_reports) == {n.node_id for n in cluster.nodes}, batch.cancel_reports
    assert all(r.unfinished == () and r.killed >= SLOTS for r in cancel_reports.values()), cancel_reports
    assert sorted(r.job_id for r in reports if r.job_id) == sorted(json.loads(line)["id"] for line in lines)
    assert {r.status for r in reports} == {"cancelled"}, [(r.job_id, r.cause) for r in reports if r.status != "cancelled"]
    assert _processes_with_argv(sleeper) == []
    survivors = _still_alive(before)
    assert survivors == [], f"survived the cancel: {survivors}; cgroups {_sandbox_cgroups(actor_pids)}"
    assert _sandbox_processes(actor_pids) == {}
    assert _sandbox_cgroups(actor_pids) == []
    assert _container_dirs(actor_pids) == [], "runc/runsc state and rootfs directories are gone"


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


_SUBMIT = "import ray; ray.init(address='{address}'); print(ray.get(ray.remote(lambda: 'ran').remote(), timeout=30))"


def test_the_cluster_runs_work_only_for_a_client_with_its_token(cluster: LocalCluster, tmp_path: Path) -> None:
    import subprocess

    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    clean["HOME"] = str(tmp_path)  # no ~/.ray/auth_token of the user's to fall back on
    token_file = cluster.nodes[0].temp_dir.parent / "auth_token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    argv = [sys.executable, "-c", _SUBMIT.format(address=cluster.address)]
    without = subprocess.run(argv, env=clean, capture_output=True, timeout=90, check=False)
    with_token = subprocess.run(
        argv, env={**clean, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)},
        capture_output=True, timeout=90, check=False,
    )
    assert (with_token.returncode, with_token.stdout.strip().splitlines()[-1:]) == (0, [b"ran"]), with_token.stderr[-2000:]
    assert without.returncode != 0 and b"ran" not in without.stdout


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
