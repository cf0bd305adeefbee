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


class _Warm:
    """A WarmSandboxes that hands out the given sandboxes in order and records take/close."""

    def __init__(self, *sandboxes: FakeSandbox) -> None:
        self.sandboxes = list(sandboxes)
        self.takes: list[tuple[str, int]] = []
        self.closed = False

    def take(self, key: str, make: Any, *, keep: int) -> tuple[Any, bool]:
        self.takes.append((key, keep))
        return self.sandboxes.pop(0), True

    def close(self) -> int:
        self.closed = True
        return 3


def _spec(**change: Any) -> JobSpec:
    spec = JobSpec(
        job_id="j1", attempt=1, argv=("sh", "-c", "x"), inputs=(("/work/in", b"data", 0o600),),
        outputs=("/work/out",), timeout_s=5.0, boundary_dump=Boundary().model_dump(mode="json"),
        manifest_digest="d1", backend="process", warm_sandboxes=2, call_key_prefix="fj-" + "a" * 32,
    )
    return replace(spec, **change)


def test_a_job_puts_its_inputs_runs_with_its_key_prefix_brings_outputs_back_and_closes_the_sandbox() -> None:
    sandbox = FakeSandbox(files={"/work/out": b"result"})
    warm = _Warm(sandbox)
    outcome = NodePool(node_id="n1", facts=FACTS, warm=warm).run_job(_spec())
    assert (outcome.status, outcome.node_id, outcome.outputs, outcome.warm) == ("done", "n1", {"/work/out": b"result"}, True)
    assert outcome.result is not None and outcome.result.stdout.data == b"ran"
    assert sandbox.calls == [
        ("put_file", "/work/in", b"data", 0o600),
        ("run", ("sh", "-c", "x"), 5.0, {
            "CONTAIN_FLEET_JOB_ID": "j1", "CONTAIN_CALL_KEY_PREFIX": "fj-" + "a" * 32,
            "CONTAIN_CALL_KEY_COUNTER": f"/work/{CALL_COUNTER_NAME}",
        }),
    ]
    assert sandbox.closed and warm.takes == [("d1", 2)]


def test_a_missing_output_fails_the_job_but_keeps_its_result() -> None:
    sandbox = FakeSandbox()
    outcome = NodePool(node_id="n1", facts=FACTS, warm=_Warm(sandbox)).run_job(_spec())
    assert outcome.status == "failed" and "/work/out" in outcome.cause and outcome.result is not None
    assert sandbox.closed


def test_a_backend_the_nodes_own_facts_rule_out_fails_before_any_sandbox_is_taken() -> None:
    warm = _Warm()
    outcome = NodePool(node_id="n1", facts=FACTS, warm=warm).run_job(_spec(backend="microvm"))
    assert outcome.status == "failed" and "cannot run microvm" in outcome.cause and warm.takes == []


def test_records_without_a_broker_fail_the_job_with_a_fix() -> None:
    boundary = Boundary.model_validate({"principal": "alice", "records": [{"name": "r", "actions": ["a"]}]})
    pool = NodePool(node_id="n1", facts=FACTS, warm=_TakeCallsMake())
    outcome = pool.run_job(_spec(boundary_dump=boundary.model_dump(mode="json")))
    assert outcome.status == "failed" and "no broker" in outcome.cause and "--broker-config" in outcome.fix


class _TakeCallsMake(_Warm):
    def take(self, key: str, make: Any, *, keep: int) -> tuple[Any, bool]:
        return make(), False


def test_an_unexpected_error_is_this_jobs_failure_and_never_escapes_run_job() -> None:
    sandbox = FakeSandbox(run_error=RuntimeError("boom"))
    outcome = NodePool(node_id="n1", facts=FACTS, warm=_Warm(sandbox)).run_job(_spec())
    assert outcome.status == "failed" and "internal error" in outcome.cause and "boom" in outcome.cause
    assert sandbox.closed


def test_cancel_all_kills_the_running_sandbox_closes_the_warm_ones_and_refuses_later_jobs() -> None:
    sandbox = FakeSandbox(block_run=True)
    warm = _Warm(sandbox)
    pool = NodePool(node_id="n1", facts=FACTS, warm=warm)
    outcomes: list[Any] = []
    runner = threading.Thread(target=lambda: outcomes.append(pool.run_job(_spec())))
    runner.start()
    assert sandbox.running.wait(10)

    report = pool.cancel_all(timeout_s=10)

    runner.join(10)
    assert (report.killed, report.closed_warm, report.unfinished) == (1, 3, ())
    assert sandbox.destroyed and sandbox.closed and warm.closed
    assert outcomes[0].status == "cancelled"
    later = pool.run_job(_spec(job_id="j2"))
    assert later.status == "cancelled" and warm.takes == [("d1", 2)]


def test_a_sandbox_taken_while_the_cancel_happened_is_closed_without_running() -> None:
    sandbox = FakeSandbox()
    pool: NodePool

    class _CancelDuringTake(_Warm):
        def take(self, key: str, make: Any, *, keep: int) -> tuple[Any, bool]:
            pool.cancel_all(timeout_s=0)
            return sandbox, True

    pool = NodePool(node_id="n1", facts=FACTS, warm=_CancelDuringTake())
    outcome = pool.run_job(_spec())
    assert outcome.status == "cancelled" and sandbox.closed and sandbox.calls == []
