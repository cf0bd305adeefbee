"""Broker key prefixes: the same for every attempt of one job, different for anything else."""

from __future__ import annotations

from contain.broker.idempotency import client_key_problem
from contain.fleet.identity import call_key_prefix, is_valid_batch_id, job_content_digest, new_batch_id

BOUNDARY = {"task": "t", "principal": "alice"}


def _digest(**change: object) -> str:
    fields: dict = {"argv": ("sh", "-c", "x"), "inputs": [], "outputs": (), "boundary_dump": BOUNDARY}
    fields.update(change)
    return job_content_digest(**fields)


def test_every_attempt_of_a_job_gets_the_same_prefix() -> None:
    first = call_key_prefix(batch_id="b-1234567890", job_id="j1", content_digest=_digest())
    again = call_key_prefix(batch_id="b-1234567890", job_id="j1", content_digest=_digest())
    assert first == again and first.startswith("fj-") and len(first) == 35


def test_batch_job_and_content_each_change_the_prefix() -> None:
    base = call_key_prefix(batch_id="b-1234567890", job_id="j1", content_digest=_digest())
    others = {
        call_key_prefix(batch_id="b-0987654321", job_id="j1", content_digest=_digest()),
        call_key_prefix(batch_id="b-1234567890", job_id="j2", content_digest=_digest()),
        call_key_prefix(batch_id="b-1234567890", job_id="j1", content_digest=_digest(argv=("sh", "-c", "y"))),
        call_key_prefix(batch_id="b-1234567890", job_id="j1", content_digest=_digest(inputs=[{"path": "/w"}])),
        call_key_prefix(batch_id="b-1234567890", job_id="j1", content_digest=_digest(outputs=("/w/o",))),
        call_key_prefix(batch_id="b-1234567890", job_id="j1", content_digest=_digest(boundary_dump={"task": "u"})),
    }
    assert base not in others and len(others) == 6


def test_ids_cannot_run_together_into_another_jobs_identity() -> None:
    assert call_key_prefix(batch_id="b-12345678", job_id="9j", content_digest="d") != call_key_prefix(
        batch_id="b-123456789", job_id="j", content_digest="d"
    )


def test_numbered_keys_are_valid_client_keys_for_the_broker() -> None:
    prefix = call_key_prefix(batch_id=new_batch_id(), job_id="x" * 128, content_digest=_digest())
    assert client_key_problem(f"{prefix}-1") is None and client_key_problem(f"{prefix}-999999") is None


def test_new_batch_ids_are_valid_and_do_not_repeat() -> None:
    ids = {new_batch_id() for _ in range(32)}
    assert len(ids) == 32 and all(is_valid_batch_id(i) for i in ids)
    assert not is_valid_batch_id("short") and not is_valid_batch_id("../../etc/passwd")
