"""What doctor observes: the cgroup trial runs where the runtime's plan puts its parent.

The "hierarchies" are plain directories under tmp_path (mkdir and rmdir work there as on
cgroupfs for an empty child), so nothing here needs root or a real cgroupfs.
"""

from __future__ import annotations

from pathlib import Path

from contain.host import observe
from contain.host.facts import CgroupMount
from contain.host.observe import CgroupTrial, try_cgroup_children
from contain.runtime.cgroup_plan import CONTROLLER_ROWS, plan_cgroup_hierarchies
from fake_host import facts_as_root

PID = 4242


def test_v2_trial_runs_beside_our_own_cgroup_where_the_runtime_puts_its_parent(tmp_path: Path) -> None:
    (tmp_path / "user.slice/session.scope").mkdir(parents=True)
    mount = CgroupMount(2, str(tmp_path), ("memory", "pids", "cpu"), "/user.slice/session.scope")
    facts = facts_as_root((mount,))
    trials = try_cgroup_children(facts, pid=PID)
    base = plan_cgroup_hierarchies(facts)[0].base
    assert base == str(tmp_path / "user.slice")
    assert trials == tuple(
        CgroupTrial(row.controller, mount, base, None)
        if 2 in row.versions
        else CgroupTrial(row.controller, None, None, None)
        for row in CONTROLLER_ROWS
    )
    assert not (tmp_path / f"user.slice/contain-doctor-{PID}").exists()  # removed again


def test_trial_runs_under_the_delegated_root_from_facts_and_names_the_errno(tmp_path: Path) -> None:
    mounts = tuple(CgroupMount(1, str(tmp_path / row.controller), (row.controller,), "/") for row in CONTROLLER_ROWS)
    for mount in mounts:
        Path(mount.mountpoint).mkdir()
    (tmp_path / "memory/deleg").mkdir()
    trials = {t.controller: t for t in try_cgroup_children(facts_as_root(mounts, cgroup_root="/deleg"), pid=PID)}
    assert trials["memory"].directory == str(tmp_path / "memory/deleg") and trials["memory"].error is None
    assert trials["pids"].directory == str(tmp_path / "pids/deleg")
    assert trials["pids"].error == "ENOENT (No such file or directory)"


def test_a_directory_shared_by_comounted_controllers_is_tried_once(tmp_path: Path, monkeypatch) -> None:
    tried: list[str] = []
    monkeypatch.setattr(observe.os, "mkdir", lambda path: tried.append(path))
    monkeypatch.setattr(observe.os, "rmdir", lambda path: None)
    mounts = (
        CgroupMount(1, str(tmp_path / "cpu,cpuacct"), ("cpu", "cpuacct"), "/"),
        *(CgroupMount(1, str(tmp_path / c), (c,), "/") for c in ("memory", "pids", "freezer")),
    )
    try_cgroup_children(facts_as_root(mounts), pid=PID)
    assert sorted(tried) == sorted(
        str(tmp_path / d / f"contain-doctor-{PID}") for d in ("memory", "pids", "cpu,cpuacct", "freezer")
    )


def test_observe_module_exports_what_it_lists() -> None:
    assert all(hasattr(observe, name) for name in observe.__all__)
