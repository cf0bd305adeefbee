"""A fleet session: actors started once, serving batch after batch, stopped at close."""

from __future__ import annotations

from pathlib import Path

import pytest

from contain.errors import PoolUnavailable
from contain.fleet.session import FleetSession

from .test_batch import PROCESS_2, FakeDispatcher, _items


class _CountingDispatcher(FakeDispatcher):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.starts = 0

    def start_nodes(self, slots):  # type: ignore[no-untyped-def]
        self.starts += 1
        return super().start_nodes(slots)


def test_batches_of_a_session_share_one_start_of_the_actors_which_stop_only_at_close(tmp_path: Path) -> None:
    dispatcher = _CountingDispatcher({"a": PROCESS_2, "b": PROCESS_2})
    with FleetSession(dispatcher=dispatcher) as session:
        for _ in range(3):
            reports = list(session.run_batch(_items(tmp_path, 5)))
            assert [r.status for r in reports] == ["done"] * 5
            assert dispatcher.stopped == []
        assert dispatcher.starts == 1
        batch_ids = {spec.call_key_prefix for _, spec in dispatcher.sent}
        assert len(batch_ids) == 15, "each batch is a new batch id: new broker keys per job"
    assert sorted(dispatcher.stopped) == ["a", "b"]
    with pytest.raises(PoolUnavailable, match="closed"):
        session.run_batch(_items(tmp_path, 1))


def test_a_batch_alone_still_starts_and_stops_its_own_actors(tmp_path: Path) -> None:
    from contain.fleet.batch import run_batch

    dispatcher = _CountingDispatcher({"a": PROCESS_2})
    list(run_batch(_items(tmp_path, 2), dispatcher=dispatcher))
    list(run_batch(_items(tmp_path, 2), dispatcher=dispatcher))
    assert dispatcher.starts == 2 and dispatcher.stopped == ["a", "a"]


def test_a_second_batch_is_refused_while_the_first_has_reports_to_give(tmp_path: Path) -> None:
    session = FleetSession(dispatcher=FakeDispatcher({"a": PROCESS_2}))
    first = session.run_batch(_items(tmp_path, 3))
    next(first)
    with pytest.raises(PoolUnavailable, match="has not finished"):
        session.run_batch(_items(tmp_path, 1))
    list(first)
    assert [r.status for r in session.run_batch(_items(tmp_path, 1))] == ["done"]
    session.close()


def test_a_cancelled_batch_ends_the_session_and_close_still_stops_the_actors(tmp_path: Path) -> None:
    import threading

    running = threading.Event()

    def keep_running(node: str, spec: object) -> None:
        running.set()  # the batch has sent a job and is waiting for it

    dispatcher = FakeDispatcher({"a": PROCESS_2}, keep_running)
    session = FleetSession(dispatcher=dispatcher)
    batch = session.run_batch(_items(tmp_path, 3))
    reports: list[object] = []
    iterating = threading.Thread(target=lambda: reports.extend(batch))
    iterating.start()
    assert running.wait(10)
    batch.cancel()
    iterating.join(10)
    assert not iterating.is_alive() and {r.status for r in reports} == {"cancelled"}  # type: ignore[attr-defined]
    with pytest.raises(PoolUnavailable, match="cancelled"):
        session.run_batch(_items(tmp_path, 1))
    session.close()
    assert dispatcher.cancelled == ["a"] and dispatcher.stopped == ["a"]


def test_a_node_lost_in_one_batch_gets_no_job_in_the_next(tmp_path: Path) -> None:
    from contain.fleet.ray_nodes import NodeLost

    from .test_batch import done

    lost = {"b"}
    dispatcher = FakeDispatcher(
        {"a": PROCESS_2, "b": PROCESS_2}, lambda node, spec: NodeLost("gone") if node in lost else done(node, spec)
    )
    with FleetSession(dispatcher=dispatcher) as session:
        assert {r.status for r in session.run_batch(_items(tmp_path, 6))} == {"done"}
        sent_before = len(dispatcher.sent)
        lost.clear()  # even if it answered again, the session knows it as lost
        assert {r.status for r in session.run_batch(_items(tmp_path, 6))} == {"done"}
        assert {node for node, _ in dispatcher.sent[sent_before:]} == {"a"}
