"""Backends become Ray resources from a node's own facts; jobs go only where theirs is advertised."""

from __future__ import annotations

from dataclasses import replace

from contain.fleet.placement import (
    BACKEND_ROWS,
    RESOURCE_PREFIX,
    NodeFacts,
    is_backend_supported,
    nodes_for_backend,
    plan_node_resources,
    resource_name,
)
from contain.host.facts import HostFacts

HOST = HostFacts(
    arch="x86_64", is_root=True, uid=0, gid=0, bwrap_path="/usr/bin/bwrap", user_namespaces=True,
    seccomp=True, landlock_abi=3,
)
EVERYTHING = NodeFacts(
    host=HOST, built_backends=("process", "container:runc", "container:runsc", "microvm"),
    binaries={"runc": "/usr/sbin/runc", "runsc": "/usr/bin/runsc"}, has_kvm=True, cpus=4,
)


def test_every_row_has_a_distinct_prefixed_resource_and_a_reason() -> None:
    assert len({row.resource for row in BACKEND_ROWS}) == len(BACKEND_ROWS)
    for row in BACKEND_ROWS:
        assert row.resource.startswith(RESOURCE_PREFIX) and row.why
        assert row.needs(EVERYTHING) is None


def test_a_node_that_has_everything_advertises_every_backend_with_its_cpu_count() -> None:
    assert plan_node_resources(EVERYTHING) == {row.resource: 4.0 for row in BACKEND_ROWS}
    assert plan_node_resources(EVERYTHING, slots=2) == {row.resource: 2.0 for row in BACKEND_ROWS}


def test_each_missing_fact_removes_exactly_its_backend() -> None:
    cases = {
        "process": replace(EVERYTHING, host=replace(HOST, bwrap_path=None)),
        "container:runc": replace(EVERYTHING, binaries={"runsc": "/usr/bin/runsc"}),
        "container:runsc": replace(EVERYTHING, binaries={"runc": "/usr/sbin/runc"}),
        "microvm": replace(EVERYTHING, has_kvm=False),
    }
    for backend, facts in cases.items():
        advertised = plan_node_resources(facts)
        assert resource_name(backend) not in advertised
        assert len(advertised) == len(BACKEND_ROWS) - 1
        assert is_backend_supported(facts, backend)


def test_a_backend_this_build_lacks_is_never_advertised_even_when_its_runtime_is_installed() -> None:
    facts = replace(EVERYTHING, built_backends=("process",))
    assert plan_node_resources(facts) == {"contain_backend_process": 4.0}
    assert "this contain build has no container:runc backend" in (is_backend_supported(facts, "container") or "")


def test_user_namespaces_or_seccomp_missing_rule_out_the_process_backend() -> None:
    for host in (replace(HOST, user_namespaces=False), replace(HOST, seccomp=False)):
        assert "contain_backend_process" not in plan_node_resources(replace(EVERYTHING, host=host))


def test_jobs_go_only_to_nodes_advertising_their_backend_and_container_means_runc() -> None:
    nodes = {
        "a": {"CPU": 2.0, "contain_backend_process": 3.0},
        "b": {"CPU": 2.0, "contain_backend_container_runc": 1.0},
        "c": {"CPU": 8.0},
    }
    assert nodes_for_backend(nodes, "process") == {"a": 3}
    assert nodes_for_backend(nodes, "container") == {"b": 1}
    assert nodes_for_backend(nodes, "microvm") == {}
    assert nodes_for_backend(nodes, "teleport") == {}
    assert is_backend_supported(EVERYTHING, "teleport") == "the fleet knows no backend 'teleport'"
