"""Every RENDER_REFUSALS row fires on a boundary made to trip it, and none fires on the clean one."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from contain.boundary.plain import plain_boundary
from contain.k8s.refusals import PROXY_ENV_NAMES, RENDER_REFUSALS, RenderRefusal, refusal_hits
from k8s.conftest import NETWORKED, make_boundary

Mutation = Callable[[dict[str, Any]], None]


def _add_file(rule: dict[str, Any]) -> Mutation:
    return lambda m: m["files"].append(rule)


def _set(key: str, value: Any) -> Mutation:
    return lambda m: m.__setitem__(key, value)


def _k8s(key: str, value: Any) -> Mutation:
    return lambda m: m["kubernetes"].__setitem__(key, value)


def _allow(host: str) -> Mutation:
    return lambda m: m["network"]["allow"].append({"host": host, "ports": [8080]})


# row id -> every way the tests trip it (more than one vector where the class has several)
TRIPS: dict[str, list[Mutation]] = {
    "K8S-001": [_add_file({"path": "/work/repo", "access": "write", "host": "/srv/repo"})],
    "K8S-002": [_add_file({"path": "/inputs/more", "access": "read", "host": "/srv/more"})],
    "K8S-003": [_k8s("inputs", [*NETWORKED["kubernetes"]["inputs"], {"path": "/etc/x", "claim": "x"}])],
    "K8S-004": [_add_file({"path": "/out", "access": "scratch", "export": "/srv/out"})],
    "K8S-005": [_add_file({"path": "/inputs/data/private", "access": "block"})],
    "K8S-006": [lambda m: m["files"][0].__setitem__("allow_sockets", ["run/db.sock"])],
    "K8S-007": [_set("credentials", [{"name": "API", "via": "env", "source": "CI_API"}])],
    "K8S-008": [
        _set("records", [{"name": "invoices", "actions": ["update"]}]),
        _set("credentials", [{"name": "API", "via": "broker"}]),
    ],
    "K8S-009": [lambda m: m["network"].__setitem__("hosts", {"api.example.com": "10.0.0.7"})],
    "K8S-010": [_allow(h) for h in ("127.0.0.1", "127.0.0.0/8", "::1", "0.0.0.0", "::ffff:127.0.0.1", "126.0.0.0/7")],
    "K8S-011": [_set("env", {name: "http://elsewhere.test:3128"}) for name in sorted(PROXY_ENV_NAMES)],
    "K8S-012": [_set("task", "Invoices"), _set("task", "inv_1"), _set("task", "x" * 51)],
}


def test_every_row_has_tripping_boundaries_a_reason_and_a_fix() -> None:
    ids = [row.id for row in RENDER_REFUSALS]
    assert len(ids) == len(set(ids))
    assert set(TRIPS) == set(ids)
    for row in RENDER_REFUSALS:
        assert row.title and row.why and row.fix


def test_the_clean_boundary_has_no_refusal() -> None:
    boundary = make_boundary(NETWORKED)
    assert refusal_hits(plain_boundary(boundary), boundary.kubernetes) == ()  # type: ignore[arg-type]


@pytest.mark.parametrize("row", RENDER_REFUSALS, ids=lambda r: r.id)
def test_each_row_fires_for_every_vector_of_its_class(row: RenderRefusal) -> None:
    for mutate in TRIPS[row.id]:
        data = copy.deepcopy(NETWORKED)
        mutate(data)
        boundary = make_boundary(data)
        hits = refusal_hits(plain_boundary(boundary), boundary.kubernetes)  # type: ignore[arg-type]
        assert row.id in {hit.rule_id for hit in hits}, f"{row.id} did not fire for {data}"


def test_an_optional_read_rule_without_a_volume_is_not_refused() -> None:
    data = copy.deepcopy(NETWORKED)
    data["files"].append({"path": "/inputs/more", "access": "read", "host": "/srv/more", "required": False})
    boundary = make_boundary(data)
    assert refusal_hits(plain_boundary(boundary), boundary.kubernetes) == ()  # type: ignore[arg-type]


def test_a_public_address_range_is_not_mistaken_for_the_proxy_pod() -> None:
    data = copy.deepcopy(NETWORKED)
    data["network"]["allow"].append({"host": "203.0.113.0/24", "ports": [443]})
    boundary = make_boundary(data)
    assert refusal_hits(plain_boundary(boundary), boundary.kubernetes) == ()  # type: ignore[arg-type]


def test_docs_k8s_lists_every_refusal_row() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "k8s.md").read_text(encoding="utf-8")
    assert [row.id for row in RENDER_REFUSALS if f"| {row.id} |" not in text] == []
