"""The pool actor's run_job and cancel_all, with fake sandboxes (no Ray, no kernel)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from contain.boundary.model import Boundary
from contain.fleet.messages import JobSpec
from contain.fleet.node import CALL_COUNTER_NAME, NodePool
from contain.fleet.placement import NodeFacts
from contain.host.facts import HostFacts

from .fleet_fakes import FakeSandbox

FACTS = NodeFacts(
    host=HostFacts(arch="x86_64", is_root=True, uid=0, gid=0, bwrap_path="/usr/bin/bwrap", user_namespaces=True,
                   seccomp=True, landlock_abi=3),
    built_backends=("process",), binaries={}, has_kvm=False, cpus=2,
)


class _Lease:
    def __init__(self, sandbox: FakeSandbox) -> None:
        self.sandbox = sandbox

    def destroy(self) -> None:
        self.sandbox.destroy()

    def close(self) -> None:
        self.sandbox.close()


class _Pool:
    """A warm pool that hands out the given sandboxes in order (warm) and records its use."""

    def __init__(self, *sandboxes: FakeSandbox) -> None:
        self.sandboxes = list(sandboxes)
        self.taken = 0
        self.closed = False

    def acquire_or_start(self) -> tuple[Any, bool]:
        self.taken += 1
        return _Lease(self.sandboxes.pop(0)), True

    def close(self) -> int:
        self.closed = True
        return 3


class _Pools:
    """A PoolFactory: one _Pool per manifest; records (boundary task, size) per opening."""

    def __init__(self, *sandboxes: FakeSandbox, pool: _Pool | None = None) -> None:
        self.pool = pool if pool is not None else _Pool(*sandboxes)
        self.opened: list[int] = []
        self.made_attachments: list[Any] = []

    def __call__(self, boundary: Any, size: int, attachments_for_each: Any) -> _Pool:
        self.opened.append(size)
        self.made_attachments.append(attachments_for_each)
        return self.pool


def _spec(**change: Any) -> JobSpec:
    spec = JobSpec(
        job_id="j1", attempt=1, argv=("sh", "-c", "x"), inputs=(("/work/in", b"data", 0o600),),
        outputs=("/work/out",), timeout_s=5.0, boundary_dump=Boundary().model_dump(mode="json"),
        manifest_digest="d1", backend="process", warm_sandboxes=2, call_key_prefix="fj-" + "a" * 32,
    )
    return replace(spec, **change)


def test_a_job_puts_its_inputs_runs_with_its_key_prefix_brings_outputs_back_and_closes_the_sandbox() -> None:
    sandbox = FakeSandbox(files={"/work/out": b"result"})
    pools = _Pools(sandbox)
    outcome = NodePool(node_id="n1", facts=FACTS, open_pool=pools).run_job(_spec())
    assert (outcome.status, outcome.node_id, outcome.outputs, outcome.warm) == ("done", "n1", {"/work/out": b"result"}, True)
    assert outcome.result is not None and outcome.result.stdout.data == b"ran"
    assert sandbox.calls == [
        ("put_file", "/work/in", b"data", 0o600),
        ("run", ("sh", "-c", "x"), 5.0, {
            "CONTAIN_FLEET_JOB_ID": "j1", "CONTAIN_CALL_KEY_PREFIX": "fj-" + "a" * 32,
            "CONTAIN_CALL_KEY_COUNTER": f"/work/{CALL_COUNTER_NAME}",
        }),
    ]
    assert sandbox.closed and pools.opened == [2] and pools.pool.taken == 1


def test_a_missing_output_fails_the_job_but_keeps_its_result() -> None:
    sandbox = FakeSandbox()
    outcome = NodePool(node_id="n1", facts=FACTS, open_pool=_Pools(sandbox)).run_job(_spec())
    assert outcome.status == "failed" and "/work/out" in outcome.cause and outcome.result is not None
    assert sandbox.closed


def test_a_backend_the_nodes_own_facts_rule_out_fails_before_any_sandbox_is_taken() -> None:
    pools = _Pools()
    outcome = NodePool(node_id="n1", facts=FACTS, open_pool=pools).run_job(_spec(backend="microvm"))
    assert outcome.status == "failed" and "cannot run microvm" in outcome.cause and pools.opened == []


def test_records_without_a_broker_fail_the_job_with_a_fix_before_any_pool_or_sandbox() -> None:
    boundary = Boundary.model_validate({"principal": "alice", "records": [{"name": "r", "actions": ["a"]}]})
    made: list[Any] = []
    for warm in (2, 0):
        pools = _Pools()
        pool = NodePool(node_id="n1", facts=FACTS, open_pool=pools, make_sandbox=lambda b, a: made.append(b))
        outcome = pool.run_job(_spec(boundary_dump=boundary.model_dump(mode="json"), warm_sandboxes=warm))
        assert outcome.status == "failed" and "no broker" in outcome.cause and "--broker-config" in outcome.fix
        assert pools.opened == [] and made == []


def test_without_warm_sandboxes_each_job_starts_its_own_sandbox_and_no_pool_is_opened() -> None:
    made = [FakeSandbox("a"), FakeSandbox("b")]
    given = list(made)
    pools = _Pools()
    node = NodePool(node_id="n1", facts=FACTS, open_pool=pools, make_sandbox=lambda b, a: given.pop(0))
    outcomes = [node.run_job(_spec(job_id=f"j{i}", warm_sandboxes=0, outputs=())) for i in range(2)]
    assert [(o.status, o.warm) for o in outcomes] == [("done", False)] * 2
    assert all(sb.started and sb.closed for sb in made) and pools.opened == []


def test_one_pool_per_manifest_is_opened_and_every_pool_is_closed_by_shutdown() -> None:
    opened: dict[int, _Pool] = {}

    def open_pool(boundary: Any, size: int, each: Any) -> _Pool:
        opened[len(opened)] = _Pool(*(FakeSandbox() for _ in range(3)))
        return opened[len(opened) - 1]

    node = NodePool(node_id="n1", facts=FACTS, open_pool=open_pool)
    for job, digest in (("a", "d1"), ("b", "d2"), ("c", "d1")):
        assert node.run_job(_spec(job_id=job, manifest_digest=digest, outputs=())).status == "done"
    assert [p.taken for p in opened.values()] == [2, 1]
    assert node.shutdown() == 6 and all(p.closed for p in opened.values())


def test_an_unexpected_error_is_this_jobs_failure_and_never_escapes_run_job() -> None:
    sandbox = FakeSandbox(run_error=RuntimeError("boom"))
    outcome = NodePool(node_id="n1", facts=FACTS, open_pool=_Pools(sandbox)).run_job(_spec())
    assert outcome.status == "failed" and "internal error" in outcome.cause and "boom" in outcome.cause
    assert sandbox.closed


def test_cancel_all_kills_the_running_sandbox_closes_the_warm_ones_and_refuses_later_jobs() -> None:
    sandbox = FakeSandbox(block_run=True)
    pools = _Pools(sandbox)
    pool = NodePool(node_id="n1", facts=FACTS, open_pool=pools)
    outcomes: list[Any] = []
    runner = threading.Thread(target=lambda: outcomes.append(pool.run_job(_spec())))
    runner.start()
    assert sandbox.running.wait(10)

    report = pool.cancel_all(timeout_s=10)

    runner.join(10)
    assert (report.killed, report.closed_warm, report.unfinished) == (1, 3, ())
    assert sandbox.destroyed and sandbox.closed and pools.pool.closed
    assert outcomes[0].status == "cancelled"
    later = pool.run_job(_spec(job_id="j2"))
    assert later.status == "cancelled" and pools.pool.taken == 1


def test_a_sandbox_taken_while_the_cancel_happened_is_closed_without_running() -> None:
    sandbox = FakeSandbox()
    node: NodePool

    class _CancelDuringTake(_Pool):
        def acquire_or_start(self) -> tuple[Any, bool]:
            node.cancel_all(timeout_s=0)
            return _Lease(sandbox), True

    node = NodePool(node_id="n1", facts=FACTS, open_pool=_Pools(pool=_CancelDuringTake()))
    outcome = node.run_job(_spec())
    assert outcome.status == "cancelled" and sandbox.closed and sandbox.calls == []


def test_a_job_arriving_after_the_cancel_opens_no_pool() -> None:
    pools = _Pools()
    node = NodePool(node_id="n1", facts=FACTS, open_pool=pools)
    node.cancel_all(timeout_s=0)
    assert node.run_job(_spec()).status == "cancelled" and pools.opened == []


# -- the node on the real SandboxPool (recording backend: no kernel) -----------------------------------


def test_on_a_real_sandbox_pool_each_job_gets_a_fresh_sandbox_and_cancel_leaves_none(tmp_path: Any) -> None:
    import socket

    from contain.runtime.backend import RecordingBackend
    from contain.runtime.pool import SandboxPool
    from contain.runtime.supervisor_channel import Exited

    ours, theirs = socket.socketpair()
    theirs.send(b"x")
    backend = RecordingBackend(wakeup_fd=ours.fileno(), replies=[Exited(status=0, utime_us=1, stime_us=1, maxrss_kb=1)] * 3)
    pools: list[SandboxPool] = []
    host = replace(FACTS.host, libseccomp_path="/usr/lib/x86_64-linux-gnu/libseccomp.so.2")  # a fact, not probed

    def open_pool(boundary: Any, size: int, each: Any) -> SandboxPool:
        pools.append(SandboxPool(boundary, backend=backend, size=size, facts=host, attachments_for_each=each))
        return pools[-1]

    boundary = Boundary.model_validate({"hardening": {"cgroups": "off"}}).model_dump(mode="json")
    node = NodePool(node_id="n1", facts=FACTS, open_pool=open_pool)
    try:
        outcomes = [
            node.run_job(_spec(job_id=f"j{i}", inputs=(), outputs=(), boundary_dump=boundary)) for i in range(3)
        ]
        assert [o.status for o in outcomes] == ["done"] * 3, [o.cause for o in outcomes]
        assert len(pools) == 1 and pools[0].settings.size == 2
        assert pools[0].wait_ready(timeout_s=10)
        stats = pools[0].stats()
        assert stats.handed_out == 0 and stats.started + stats.cold_started == 3 + stats.ready
        report = node.cancel_all(timeout_s=10)
        assert report.closed_warm == 2 and report.killed == 0
        assert not pools[0]._thread.is_alive()
        starts = len([c for c in backend.calls if c[0] == "start"])
        assert len([c for c in backend.calls if c[0] == "close"]) == starts  # every sandbox closed
    finally:
        node.shutdown()
        ours.close()
        theirs.close()


# -- the slot gate: the node runs at most its slots per backend; the rest wait, cancel frees them -----


def test_a_job_beyond_the_nodes_slots_waits_for_one_and_a_cancel_releases_it_without_a_sandbox() -> None:
    first = FakeSandbox("first", block_run=True)
    pools = _Pools(first, FakeSandbox("second"))
    node = NodePool(node_id="n1", facts=FACTS, open_pool=pools, slots={"process": 1})
    outcomes: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: outcomes.update(a=node.run_job(_spec(job_id="a", outputs=()))))
    runner.start()
    assert first.running.wait(10)
    waiter = threading.Thread(target=lambda: outcomes.update(b=node.run_job(_spec(job_id="b", outputs=()))))
    waiter.start()
    with node._lock:
        assert node._lock.wait_for(lambda: "b" in node._busy, 10)

    report = node.cancel_all(timeout_s=10)

    runner.join(10)
    waiter.join(10)
    assert (outcomes["a"].status, outcomes["b"].status) == ("cancelled", "cancelled")
    assert pools.pool.taken == 1, "the waiting job took no sandbox"
    assert report.unfinished == () and report.killed == 1


def test_a_freed_slot_is_taken_by_the_waiting_job() -> None:
    first = FakeSandbox("first", block_run=True)
    second = FakeSandbox("second")
    node = NodePool(node_id="n1", facts=FACTS, open_pool=_Pools(first, second), slots={"process": 1})
    outcomes: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: outcomes.update(a=node.run_job(_spec(job_id="a", outputs=()))))
    runner.start()
    assert first.running.wait(10)
    waiter = threading.Thread(target=lambda: outcomes.update(b=node.run_job(_spec(job_id="b", outputs=()))))
    waiter.start()
    first.destroy()  # the first job's command ends (as SandboxLost): its slot frees
    runner.join(10)
    waiter.join(10)
    assert outcomes["b"].status == "done" and second.closed and first.closed


# -- retiring pools: a long session must not keep every manifest's warm sandboxes forever -------------


def _pool_factory(opened: list[_Pool]) -> Any:
    def open_pool(boundary: Any, size: int, each: Any) -> _Pool:
        opened.append(_Pool(*(FakeSandbox() for _ in range(4))))
        return opened[-1]

    return open_pool


def test_a_pool_no_job_took_from_for_five_minutes_is_closed_at_the_next_take() -> None:
    from contain.fleet.node import _POOL_IDLE_S

    now = [0.0]
    opened: list[_Pool] = []
    node = NodePool(node_id="n1", facts=FACTS, open_pool=_pool_factory(opened), clock=lambda: now[0])
    assert node.run_job(_spec(job_id="a", manifest_digest="old", outputs=())).status == "done"
    now[0] = _POOL_IDLE_S - 1
    assert node.run_job(_spec(job_id="b", manifest_digest="new", outputs=())).status == "done"
    assert [p.closed for p in opened] == [False, False]
    now[0] = _POOL_IDLE_S + 0.5  # "old" idle for longer than the limit, "new" not
    assert node.run_job(_spec(job_id="c", manifest_digest="new", outputs=())).status == "done"
    assert [p.closed for p in opened] == [True, False]
    assert node.run_job(_spec(job_id="d", manifest_digest="old", outputs=())).status == "done"
    assert len(opened) == 3 and not opened[2].closed  # a fresh pool for it


def test_beyond_eight_manifests_the_least_recently_used_pool_is_closed() -> None:
    from contain.fleet.node import _POOLS_MAX

    now = [0.0]
    opened: list[_Pool] = []
    node = NodePool(node_id="n1", facts=FACTS, open_pool=_pool_factory(opened), clock=lambda: now[0])
    for index in range(_POOLS_MAX + 2):
        now[0] += 1
        assert node.run_job(_spec(job_id=f"j{index}", manifest_digest=f"m{index}", outputs=())).status == "done"
    assert [p.closed for p in opened] == [True, True] + [False] * _POOLS_MAX
    assert node.shutdown() == 3 * _POOLS_MAX and all(p.closed for p in opened)


def test_a_job_whose_pool_was_retired_under_it_takes_from_a_fresh_one() -> None:
    from contain.errors import PoolUnavailable

    opened: list[_Pool] = []
    node: NodePool

    class _RetiredWhileTaken(_Pool):
        def acquire_or_start(self) -> tuple[Any, bool]:
            with node._lock:  # another job's take retired this pool between lookup and use
                node._pools.pop("d1")
                node._pool_used.pop("d1")
            self.closed = True
            raise PoolUnavailable("the sandbox pool is closed", "")

    def open_pool(boundary: Any, size: int, each: Any) -> _Pool:
        opened.append(_RetiredWhileTaken() if not opened else _Pool(FakeSandbox()))
        return opened[-1]

    node = NodePool(node_id="n1", facts=FACTS, open_pool=open_pool)
    outcome = node.run_job(_spec(outputs=()))
    assert outcome.status == "done" and len(opened) == 2 and opened[1].taken == 1
