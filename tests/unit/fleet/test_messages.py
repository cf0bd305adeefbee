"""Job reports: retried means more than one attempt; JSON carries output sizes, not bytes."""

from __future__ import annotations

import json

from contain.fleet.messages import JobReport

from .fleet_fakes import run_result


def test_a_report_is_retried_only_after_more_than_one_attempt() -> None:
    assert not JobReport("a", 1, "done", attempts=1).retried
    assert JobReport("a", 1, "done", attempts=2).retried


def test_the_json_form_is_exact_and_gives_output_sizes() -> None:
    report = JobReport("a", 3, "done", attempts=2, node_id="n", backend="process", result=run_result(stdout=b"hi"),
                       outputs={"/work/o": b"12345"}, retried_after=("lost",), latency_s=0.1234567)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["outputs"] == {"/work/o": 5} and data["result"]["stdout"] == "hi"
    assert (data["attempts"], data["retried_after"], data["latency_s"]) == (2, ["lost"], 0.123457)
