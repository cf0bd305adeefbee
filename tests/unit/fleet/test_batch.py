"""The batch driver over an in-memory dispatcher: placement, streaming, retries after node loss, cancel."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contain.fleet.batch import run_batch
from contain.fleet.jobs import JobProblem, PreparedJob, prepare_jobs, read_job_lines
from contain.fleet.messages import CancelReport, JobOutcome, JobSpec, NodeDescription
from contain.fleet.ray_nodes import NodeLost

from .fleet_fakes import run_result

Answer = Callable[[str, JobSpec], "JobOutcome | NodeLost | str | None"]


def done(node: str, spec: JobSpec) -> JobOutcome:
    return JobOutcome(spec.job_id, spec.attempt, node, "done", result=run_result())


class FakeDispatcher:
    """Nodes in a dict; each submitted attempt is answered by ``answer`` (None: still running)."""

    def __init__(self, nodes: dict[str, dict[str, float]], answer: Answer = done, refuse: set[str] | None = None):
        self._nodes = nodes
        self.answer = answer
        self.refuse = refuse or set()
        self.unsupported: dict[str, dict[str, str]] = {}  # node -> backends its own facts rule out
        self.sent: list[tuple[str, JobSpec]] = []
        self.in_flight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.peak_total = 0
        self.cancelled: list[str] = []
        self.stopped: list[str] = []
        self._refs: dict[int, tuple[str, JobSpec]] = {}

    def nodes(self) -> dict[str, dict[str, float]]:
        return dict(self._nodes)

    def start_nodes(self, slots: dict[str, int]) -> dict[str, tuple[Any, NodeDescription] | str]:
        self.started_with = dict(slots)
        return {
            node_id: "the actor could not be placed" if node_id in self.refuse
            else (node_id, NodeDescription(node_id, "host", 1, self.unsupported.get(node_id, {})))
            for node_id in slots
        }

    def submit(self, node: Any, spec: JobSpec) -> Any:
        ref = len(self.sent)
        self.sent.append((node, spec))
        self._refs[ref] = (node, spec)
        self.in_flight[node] += 1
        self.peak[node] = max(self.peak[node], self.in_flight[node])
        self.peak_total = max(self.peak_total, sum(self.in_flight.values()))
        return ref

    def wait(self, refs: Any, *, timeout_s: float) -> list[tuple[Any, Any]]:
        finished = []
        for ref in refs:
            node, spec = self._refs[ref]
            answer = self.answer(node, spec)
            if answer is not None:
                self.in_flight[node] -= 1
                finished.append((ref, answer))
        return finished

    def cancel(self, node: Any, *, timeout_s: float) -> CancelReport | str:
        self.cancelled.append(node)
        return CancelReport(node, killed=self.in_flight[node], closed_warm=0)

    def stop(self, node: Any) -> None:
        self.stopped.append(node)


def _items(tmp_path: Path, count: int, *, manifest: dict[str, Any] | None = None,
           extra: list[str] = ()) -> list[PreparedJob | JobProblem]:  # type: ignore[assignment]
    lines = [json.dumps({"id": f"j{i}", "manifest": manifest or {}, "command": ["true"]}) for i in range(count)]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join([*lines, *extra]) + "\n")
    return list(prepare_jobs(read_job_lines(path), base_dir=tmp_path))


PROCESS_2 = {"contain_backend_process": 2.0, "CPU": 2.0}


def test_every_job_is_reported_once_and_no_node_holds_more_than_twice_its_slots(tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"a": PROCESS_2, "b": {"contain_backend_process": 3.0}})
    reports = list(run_batch(_items(tmp_path, 40, extra=["nope"]), dispatcher=dispatcher))
    assert Counter(r.job_id for r in reports) == Counter([f"j{i}" for i in range(40)] + [None])
    assert reports[0].status == "failed" and reports[0].line == 41  # problems come first
    assert {r.status for r in reports[1:]} == {"done"} and all(r.attempts == 1 for r in reports[1:])
    # SENT_PER_SLOT: one running and one waiting on the node per slot (the node's gate runs at most its slots)
    assert dispatcher.peak["a"] <= 2 * 2 and dispatcher.peak["b"] <= 2 * 3
    assert dispatcher.started_with == {"a": {"process": 2}, "b": {"process": 3}}  # one actor per node, its slots
    assert {node for node, _ in dispatcher.sent} == {"a", "b"}
    assert sorted(dispatcher.stopped) == ["a", "b"]


def test_each_backends_slots_are_counted_on_their_own_so_a_busy_backend_does_not_block_another(
    tmp_path: Path,
) -> None:
    calls = Counter[str]()

    def answer(node: str, spec: JobSpec) -> Any:
        calls[spec.job_id] += 1  # hold every job until both backends ran side by side (bounded)
        return done(node, spec) if dispatcher.peak_total >= 4 or calls[spec.job_id] > 20 else None

    dispatcher = FakeDispatcher({"a": {"contain_backend_process": 2.0, "contain_backend_container_runc": 2.0}}, answer)
    items = _items(tmp_path, 3)
    path = tmp_path / "c.jsonl"
    path.write_text("".join(
        json.dumps({"id": f"c{i}", "manifest": {"runtime": {"backend": "container"}}, "command": ["x"]}) + "\n"
        for i in range(3)
    ))
    items += list(prepare_jobs(read_job_lines(path), base_dir=tmp_path))
    reports = list(run_batch(items, dispatcher=dispatcher))
    assert {r.status for r in reports} == {"done"} and len(reports) == 6
    assert dispatcher.peak_total >= 4, "process jobs do not hold back the runc ones on the node"
    assert dispatcher.started_with == {"a": {"process": 2, "container:runc": 2}}


def test_a_node_without_the_backend_resource_gets_no_job_and_a_backend_nobody_offers_fails(tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"a": PROCESS_2, "vm": {"contain_backend_microvm": 1.0}})
    items = _items(tmp_path, 4)
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "c", "manifest": {"runtime": {"backend": "container"}}, "command": ["x"]}) + "\n")
    items += list(prepare_jobs(read_job_lines(path), base_dir=tmp_path))
    reports = {r.job_id: r for r in run_batch(items, dispatcher=dispatcher)}
    assert {node for node, _ in dispatcher.sent} == {"a"}
    assert all(reports[f"j{i}"].status == "done" for i in range(4))
    assert reports["c"].status == "failed" and reports["c"].attempts == 0
    assert "no alive node advertises contain_backend_container_runc" in reports["c"].cause


def test_a_job_lost_with_its_node_is_retried_elsewhere_with_the_same_broker_keys(tmp_path: Path) -> None:
    def answer(node: str, spec: JobSpec) -> Any:
        return NodeLost("the raylet is gone") if node == "b" else done(node, spec)

    dispatcher = FakeDispatcher({"a": PROCESS_2, "b": PROCESS_2}, answer)
    reports = {r.job_id: r for r in run_batch(_items(tmp_path, 6), dispatcher=dispatcher)}
    retried = {job for job, r in reports.items() if r.retried}
    assert retried and all(reports[j].status == "done" for j in reports)
    for job in retried:
        assert reports[job].attempts == 2 and reports[job].node_id == "a"
        assert reports[job].retried_after == ("attempt 1 lost with node b: the raylet is gone",)
        prefixes = {spec.call_key_prefix for _, spec in dispatcher.sent if spec.job_id == job}
        assert len(prefixes) == 1
    lost_at = min(i for i, (node, _) in enumerate(dispatcher.sent) if node == "b")
    assert all(node == "a" for node, spec in dispatcher.sent[lost_at + 1:] if spec.attempt == 2)


def test_a_job_lost_more_often_than_its_manifest_allows_fails_and_says_so(tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"a": PROCESS_2}, lambda node, spec: NodeLost("gone"))
    [report] = list(run_batch(_items(tmp_path, 1, manifest={"fleet": {"retries": 0}}), dispatcher=dispatcher))
    assert report.status == "failed" and "fleet.retries is 0" in report.cause and report.attempts == 1


def test_a_failure_of_the_job_itself_is_reported_and_never_retried(tmp_path: Path) -> None:
    def answer(node: str, spec: JobSpec) -> Any:
        return JobOutcome(spec.job_id, spec.attempt, node, "failed", cause="cannot run 'x'") if node == "a" else "boom"

    dispatcher = FakeDispatcher({"a": PROCESS_2}, answer)
    [report] = list(run_batch(_items(tmp_path, 1), dispatcher=dispatcher))
    assert (report.status, report.cause, report.attempts) == ("failed", "cannot run 'x'", 1)
    assert len(dispatcher.sent) == 1


def test_cancel_tells_every_node_reports_the_rest_cancelled_and_stops_the_nodes(tmp_path: Path) -> None:
    def answer(node: str, spec: JobSpec) -> Any:
        if spec.job_id == "j0":
            return done(node, spec)
        if node in dispatcher.cancelled:  # a node answers its running jobs once it has cancelled them
            return JobOutcome(spec.job_id, spec.attempt, node, "cancelled", cause="killed")
        return None  # every other job keeps running

    dispatcher = FakeDispatcher({"a": PROCESS_2, "b": PROCESS_2}, answer)
    batch = run_batch(_items(tmp_path, 9), dispatcher=dispatcher)
    first = next(batch)
    batch.cancel()
    rest = list(batch)
    assert first.job_id == "j0" and first.status == "done"
    assert sorted(r.job_id for r in rest) == [f"j{i}" for i in range(1, 9)]  # type: ignore[type-var]
    assert {r.status for r in rest} == {"cancelled"}
    assert sorted(dispatcher.cancelled) == ["a", "b"] and sorted(dispatcher.stopped) == ["a", "b"]
    assert sorted(batch.cancel_reports) == ["a", "b"]
    batch.cancel()  # idempotent: the nodes are not told twice
    assert len(dispatcher.cancelled) == 2


def test_a_node_whose_actor_cannot_start_is_named_and_gets_no_job(tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"a": PROCESS_2, "b": PROCESS_2}, refuse={"b"})
    batch = run_batch(_items(tmp_path, 3), dispatcher=dispatcher)
    assert {r.status for r in batch} == {"done"}
    assert batch.node_problems == {"b": "the actor could not be placed"}
    assert {node for node, _ in dispatcher.sent} == {"a"}


def test_a_resumed_batch_sends_the_same_keys_as_its_first_run(tmp_path: Path) -> None:
    runs = []
    for _ in range(2):
        dispatcher = FakeDispatcher({"a": PROCESS_2})
        list(run_batch(_items(tmp_path, 3), dispatcher=dispatcher, batch_id="b-resume-me"))
        runs.append(sorted((spec.job_id, spec.call_key_prefix) for _, spec in dispatcher.sent))
    fresh = FakeDispatcher({"a": PROCESS_2})
    list(run_batch(_items(tmp_path, 3), dispatcher=fresh))
    assert runs[0] == runs[1]
    assert not {p for _, p in runs[0]} & {spec.call_key_prefix for _, spec in fresh.sent}


def test_max_in_flight_caps_the_attempts_running_across_the_cluster(tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"a": PROCESS_2, "b": PROCESS_2})
    reports = list(run_batch(_items(tmp_path, 10), dispatcher=dispatcher, max_in_flight=1))
    assert len(reports) == 10 and dispatcher.peak_total == 1
    unlimited = FakeDispatcher({"a": PROCESS_2, "b": PROCESS_2})
    list(run_batch(_items(tmp_path, 10), dispatcher=unlimited))
    assert unlimited.peak_total == 2 * 4  # every slot running, and one attempt waiting per slot


def test_a_backend_a_node_advertises_but_its_own_facts_rule_out_gets_no_job_there(tmp_path: Path) -> None:
    dispatcher = FakeDispatcher({"a": PROCESS_2, "liar": PROCESS_2})
    dispatcher.unsupported["liar"] = {"process": "bubblewrap (bwrap) is not installed"}
    batch = run_batch(_items(tmp_path, 6), dispatcher=dispatcher)
    assert {r.status for r in batch} == {"done"}
    assert {node for node, _ in dispatcher.sent} == {"a"}
    assert "bwrap" in batch.node_problems["liar"] and "contain_backend_process" in batch.node_problems["liar"]
