"""How Ray failures are read: a lost node is retried, anything else fails the job (table-driven)."""

from __future__ import annotations

import pytest

from contain.fleet.ray_nodes import RAY_FAILURE_ROWS, NodeLost, classify_ray_failure


@pytest.mark.parametrize("row", RAY_FAILURE_ROWS, ids=lambda r: r.exception)
def test_each_row_classifies_its_exception_type(row) -> None:  # type: ignore[no-untyped-def]
    exc = type(row.exception, (Exception,), {})("details\nmore")
    result = classify_ray_failure(exc)
    assert isinstance(result, NodeLost) is row.node_lost
    assert row.why


def test_a_subclass_is_read_by_its_base_row() -> None:
    base = type("RayActorError", (Exception,), {})
    child = type("SomeNewActorError", (base,), {})
    assert isinstance(classify_ray_failure(child("x")), NodeLost)


def test_an_exception_in_no_row_fails_the_job_instead_of_retrying_it() -> None:
    result = classify_ray_failure(ValueError("strange"))
    assert result == "ValueError: strange"


def test_the_real_ray_exceptions_are_in_the_table_where_ray_is_installed() -> None:
    exceptions = pytest.importorskip("ray.exceptions", reason="Ray is not installed (the fleet extra)")
    for row in RAY_FAILURE_ROWS:
        assert hasattr(exceptions, row.exception), row.exception


def test_a_ray_call_while_not_connected_fails_instead_of_starting_a_local_cluster() -> None:
    ray = pytest.importorskip("ray", reason="needs Ray (the fleet extra)")
    from contain.fleet.ray_nodes import _ray

    assert not ray.is_initialized()
    assert _ray() is ray
    with pytest.raises(Exception, match=r"(?i)init|connect"):
        ray.put(1)  # with Ray's auto-init this would start a cluster and write ~/.ray/auth_token
    assert not ray.is_initialized()
