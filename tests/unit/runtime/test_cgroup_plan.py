"""Unit tests for contain.runtime.cgroup_plan: hierarchies, parents and limit files as literals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contain.boundary.model import Resources
from contain.errors import UnsupportedHost
from contain.host.facts import CgroupMount, HostFacts
from contain.runtime.cgroup_plan import (
    CONTROLLER_ROWS,
    CgroupHierarchy,
    plan_cgroup_hierarchies,
    plan_cgroup_limits,
    plan_parent_dirs,
)
from fake_host import facts_as_root, facts_as_user

MiB = 1024**2
RES = Resources(memory_bytes=64 * MiB, pids_max=16, cpu_cores=0.5)
V2 = CgroupMount(2, "/cg", ("cpu", "memory", "pids"), "/a/b.scope")


def _facts(mounts: tuple[CgroupMount, ...], *, is_root: bool = True, cgroup_root: str | None = None) -> HostFacts:
    if is_root:
        return facts_as_root(mounts, cgroup_root=cgroup_root)
    return facts_as_user(cgroups=mounts, cgroup_root=cgroup_root)


# ------------------------------------------------------------------------------------------- plans


def test_v1_plan_limits_memory_and_swap_together_with_memory_first() -> None:
    plan = plan_cgroup_limits(RES, version=1)
    assert plan == {
        "memory": {
            "memory.limit_in_bytes": "67108864",
            "memory.memsw.limit_in_bytes": "67108864",
            "memory.swappiness": "0",
        },
        "pids": {"pids.max": "16"},
        "cpu": {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"},
    }
    assert list(plan["memory"])[:2] == ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
    assert list(plan["cpu"]) == ["cpu.cfs_period_us", "cpu.cfs_quota_us"]


def test_v1_plan_without_swap_accounting_omits_memsw() -> None:
    assert plan_cgroup_limits(RES, version=1, memsw_available=False) == {
        "memory": {"memory.limit_in_bytes": "67108864", "memory.swappiness": "0"},
        "pids": {"pids.max": "16"},
        "cpu": {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"},
    }


def test_v2_plan_forbids_swap_and_sets_no_oom_group() -> None:
    assert plan_cgroup_limits(RES, version=2) == {
        "memory": {"memory.max": "67108864", "memory.swap.max": "0"},
        "pids": {"pids.max": "16"},
        "cpu": {"cpu.max": "50000 100000"},
    }


def test_tiny_cpu_quota_switches_to_one_second_period() -> None:
    plan = plan_cgroup_limits(Resources(cpu_cores=0.005), version=2)
    assert plan["cpu"] == {"cpu.max": "5000 1000000"}


def test_cpu_quota_below_kernel_minimum_is_refused_not_rounded_up() -> None:
    with pytest.raises(UnsupportedHost, match="below the kernel's minimum"):
        plan_cgroup_limits(Resources(cpu_cores=0.0004), version=1)


def test_unknown_version_is_refused() -> None:
    with pytest.raises(UnsupportedHost):
        plan_cgroup_limits(RES, version=3)


def test_v1_hierarchies_sit_in_own_cgroup_of_each_mount_and_merge_comounted() -> None:
    facts = _facts(
        (
            CgroupMount(1, "/cg/memory", ("memory",), "/job"),
            CgroupMount(1, "/cg/cpu,cpuacct", ("cpu", "cpuacct"), "/"),
            CgroupMount(1, "/cg/pids", ("pids",), "/"),
            CgroupMount(1, "/cg/freezer", ("freezer",), "/"),
            CgroupMount(2, "/cg/unified", ("hugetlb",), "/"),
        )
    )
    assert plan_cgroup_hierarchies(facts) == (
        CgroupHierarchy(1, "/cg/memory", "/cg/memory/job", "/cg/memory/job/contain", ("memory",)),
        CgroupHierarchy(1, "/cg/pids", "/cg/pids", "/cg/pids/contain", ("pids",)),
        CgroupHierarchy(1, "/cg/cpu,cpuacct", "/cg/cpu,cpuacct", "/cg/cpu,cpuacct/contain", ("cpu", "cpuacct")),
        CgroupHierarchy(1, "/cg/freezer", "/cg/freezer", "/cg/freezer/contain", ("freezer",)),
    )


def test_v2_parent_is_sibling_of_own_cgroup_because_of_no_internal_processes() -> None:
    facts = _facts((CgroupMount(2, "/cg", ("cpu", "memory", "pids"), "/a/b.scope"),))
    assert plan_cgroup_hierarchies(facts) == (
        CgroupHierarchy(2, "/cg", "/cg/a", "/cg/a/contain", ("memory", "pids", "cpu")),
    )


def test_v2_in_root_cgroup_uses_root_and_delegated_root_overrides() -> None:
    facts = _facts((CgroupMount(2, "/cg", ("cpu", "memory", "pids"), "/"),))
    assert plan_cgroup_hierarchies(facts)[0].parent == "/cg/contain"
    assert plan_cgroup_hierarchies(replace(facts, cgroup_root="/d/e"))[0].parent == "/cg/d/e/contain"


@pytest.mark.parametrize("root", ["relative", "/a/../b", "/a//b"])
def test_malformed_delegated_root_is_refused(root: str) -> None:
    facts = _facts((CgroupMount(2, "/cg", ("cpu", "memory", "pids"), "/"),))
    with pytest.raises(UnsupportedHost, match="CONTAIN_CGROUP_ROOT"):
        plan_cgroup_hierarchies(replace(facts, cgroup_root=root))


def test_missing_v1_freezer_is_refused_with_its_reason() -> None:
    facts = _facts(tuple(CgroupMount(1, f"/cg/{c}", (c,), "/") for c in ("memory", "pids", "cpu", "cpuacct")))
    with pytest.raises(UnsupportedHost, match="freezer") as info:
        plan_cgroup_hierarchies(facts)
    why = next(row.why for row in CONTROLLER_ROWS if row.controller == "freezer")
    assert why in info.value.cause


def test_split_v1_v2_or_no_controllers_is_refused_naming_each() -> None:
    facts = _facts(
        (
            CgroupMount(1, "/cg/memory", ("memory",), "/"),
            CgroupMount(2, "/cg/unified", ("pids", "cpu"), "/"),
        )
    )
    with pytest.raises(UnsupportedHost, match="memory=v1, pids=v2, cpu=v2"):
        plan_cgroup_hierarchies(facts)
    with pytest.raises(UnsupportedHost, match="memory=missing"):
        plan_cgroup_hierarchies(_facts(()))


def test_every_controller_row_has_a_reason_and_a_version() -> None:
    for row in CONTROLLER_ROWS:
        assert row.why and set(row.versions) <= {1, 2}, row


def test_plan_makes_room_for_contains_own_helper_processes() -> None:
    assert plan_cgroup_limits(RES, version=1, helper_processes=1)["pids"] == {"pids.max": "17"}
    assert plan_cgroup_limits(RES, version=2)["pids"] == {"pids.max": "16"}


def test_a_non_root_user_without_a_delegated_cgroup_is_refused_naming_the_variable() -> None:
    with pytest.raises(UnsupportedHost, match="not running as root") as info:
        plan_cgroup_hierarchies(_facts((V2,), is_root=False))
    assert "CONTAIN_CGROUP_ROOT" in info.value.fix


def test_a_non_root_user_with_a_delegated_cgroup_gets_its_parent_there() -> None:
    facts = _facts((V2,), is_root=False, cgroup_root="/user.slice/deleg")
    assert plan_cgroup_hierarchies(facts) == (
        CgroupHierarchy(2, "/cg", "/cg/user.slice/deleg", "/cg/user.slice/deleg/contain", ("memory", "pids", "cpu")),
    )


def test_a_host_without_controllers_is_told_so_before_it_is_told_about_root() -> None:
    with pytest.raises(UnsupportedHost, match="memory=missing"):
        plan_cgroup_hierarchies(_facts((), is_root=False))


def test_parent_dirs_cover_every_mount_whatever_the_layout() -> None:
    mounts = (CgroupMount(1, "/cg/memory", ("memory",), "/job"), V2)
    assert plan_parent_dirs(_facts(mounts)) == ("/cg/memory/job/contain", "/cg/a/contain")
    assert plan_parent_dirs(_facts(mounts, cgroup_root="/d")) == ("/cg/memory/d/contain", "/cg/d/contain")
