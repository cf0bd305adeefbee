"""Unit tests for contain.runtime.cgroups: the live SandboxCgroup against a fake cgroup tree.

The fake tree is a plain directory per "hierarchy" under tmp_path. Its ``mkdir`` creates the control
files the kernel would create for that hierarchy, its ``rmdir`` refuses a populated cgroup with
EBUSY, and its ``kill`` removes the pid from every cgroup.procs (optionally "forking" a successor,
to exercise the freeze-kill-thaw loop). Nothing here needs root or a real cgroupfs.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest

from contain.boundary.model import Resources
from contain.errors import SandboxStartError, UnsupportedHost
from contain.host.facts import CgroupMount, HostFacts
from contain.runtime import cgroups as cgroups_module
from contain.runtime.cgroup_plan import CONTROLLER_ROWS, plan_cgroup_limits
from contain.runtime.cgroups import CgroupOps, SandboxCgroup, parse_keyed_counters
from fake_host import facts_as_root

MiB = 1024**2

V1_FILES: dict[str, dict[str, str]] = {
    "memory": {
        "memory.limit_in_bytes": "9223372036854771712\n",
        "memory.memsw.limit_in_bytes": "9223372036854771712\n",
        "memory.swappiness": "60\n",
        "memory.max_usage_in_bytes": "0\n",
        "memory.memsw.max_usage_in_bytes": "0\n",
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    },
    "pids": {"pids.max": "max\n", "pids.current": "0\n"},
    "cpu": {"cpu.cfs_period_us": "100000\n", "cpu.cfs_quota_us": "-1\n"},
    "cpuacct": {"cpuacct.usage": "0\n"},
    "freezer": {"freezer.state": "THAWED\n"},
}
V2_FILES: dict[str, str] = {
    "cgroup.controllers": "memory pids cpu\n",
    "cgroup.subtree_control": "\n",
    "cgroup.freeze": "0\n",
    "cgroup.events": "populated 0\nfrozen 0\n",
    "memory.max": "max\n",
    "memory.swap.max": "max\n",
    "memory.peak": "0\n",
    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    "pids.max": "max\n",
    "pids.current": "0\n",
    "cpu.max": "max 100000\n",
    "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
}


class FakeCgroupTree:
    """Plain directories standing in for cgroupfs; see the module docstring."""

    def __init__(self, root: Path, files_by_mount: dict[Path, dict[str, str]]) -> None:
        self.root = root
        self.files_by_mount = files_by_mount
        self.killed: list[int] = []
        self.freezer_at_kill: list[str] = []  # freezer.state of the victim's cgroup when killed
        self.forks_on_kill: dict[int, int] = {}  # killing pid -> pid that "forked" just before
        for mount, files in files_by_mount.items():
            mount.mkdir(parents=True, exist_ok=True)
            self._populate(mount, files)

    @staticmethod
    def _populate(path: Path, files: dict[str, str]) -> None:
        (path / "cgroup.procs").write_text("")
        for name, content in files.items():
            (path / name).write_text(content)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)
        mount = next(m for m in self.files_by_mount if Path(path).is_relative_to(m))
        self._populate(Path(path), self.files_by_mount[mount])

    def rmdir(self, path: str) -> None:
        directory = Path(path)
        if not directory.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file", path)
        if (directory / "cgroup.procs").read_text().split() or any(p.is_dir() for p in directory.iterdir()):
            raise OSError(errno.EBUSY, "Device or resource busy", path)
        for child in directory.iterdir():
            child.unlink()
        directory.rmdir()

    def kill(self, pid: int, sig: int) -> None:
        assert sig == signal.SIGKILL
        self.killed.append(pid)
        successor = self.forks_on_kill.pop(pid, None)
        for procs in self.root.rglob("cgroup.procs"):
            members = procs.read_text().split()
            if str(pid) in members:
                if (procs.parent / "freezer.state").exists():
                    self.freezer_at_kill.append((procs.parent / "freezer.state").read_text())
                members.remove(str(pid))
                if successor is not None:
                    members.append(str(successor))
                procs.write_text("\n".join(members))

    def ops(self) -> CgroupOps:
        return CgroupOps(mkdir=self.mkdir, rmdir=self.rmdir, kill=self.kill)


def _v1_world(tmp_path: Path) -> tuple[HostFacts, FakeCgroupTree]:
    mounts = tuple(CgroupMount(1, str(tmp_path / c), (c,), "/job" if c == "memory" else "/") for c in V1_FILES)
    files = {tmp_path / c: dict(V1_FILES[c]) for c in V1_FILES}
    tree = FakeCgroupTree(tmp_path, files)
    (tmp_path / "memory" / "job").mkdir()
    FakeCgroupTree._populate(tmp_path / "memory" / "job", V1_FILES["memory"])
    return facts_as_root(mounts), tree


def _v2_world(tmp_path: Path, own: str = "/user.slice/session.scope") -> tuple[HostFacts, Path, FakeCgroupTree]:
    mount = tmp_path / "unified"
    tree = FakeCgroupTree(tmp_path, {mount: dict(V2_FILES)})
    for part in Path(own.lstrip("/")).parts:
        mount = mount / part
        tree.mkdir(str(mount))
    facts = facts_as_root((CgroupMount(2, str(tmp_path / "unified"), ("memory", "pids", "cpu"), own),))
    return facts, tmp_path / "unified", tree


RES = Resources(memory_bytes=64 * MiB, pids_max=16, cpu_cores=0.5)


# ----------------------------------------------------------------------------------------- parsing


def test_parse_oom_control_cpu_stat_and_memory_events() -> None:
    assert parse_keyed_counters("oom_kill_disable 0\nunder_oom 1\noom_kill 3\n") == {
        "oom_kill_disable": 0,
        "under_oom": 1,
        "oom_kill": 3,
    }
    assert parse_keyed_counters("usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 0\n") == {
        "usage_usec": 1234567,
        "user_usec": 1000000,
        "system_usec": 234567,
        "nr_periods": 0,
    }
    assert parse_keyed_counters("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\nweird x\n") == {
        "low": 0,
        "high": 0,
        "max": 7,
        "oom": 2,
        "oom_kill": 2,
    }


# ---------------------------------------------------------------------------------------- apply v1


def test_v1_create_writes_plan_into_every_hierarchy(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    cg = SandboxCgroup.create("t1", RES, facts, ops=tree.ops())
    leaf = Path(cg.dirs["memory"]).name
    assert leaf.startswith(f"contain-{os.getpid()}-t1-")
    assert cg.dirs == {
        "memory": str(tmp_path / "memory/job/contain" / leaf),
        "pids": str(tmp_path / "pids/contain" / leaf),
        "cpu": str(tmp_path / "cpu/contain" / leaf),
        "cpuacct": str(tmp_path / "cpuacct/contain" / leaf),
        "freezer": str(tmp_path / "freezer/contain" / leaf),
    }
    for controller, files in plan_cgroup_limits(RES, version=1).items():
        for name, value in files.items():
            assert (Path(cg.dirs[controller]) / name).read_text() == value


def test_v1_attach_usage_reset_and_remove(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    cg = SandboxCgroup.create("t2", RES, facts, ops=tree.ops())
    cg.attach(4242)
    for path in cg.paths:
        assert (Path(path) / "cgroup.procs").read_text() == "4242"
    mem = Path(cg.dirs["memory"])
    (Path(cg.dirs["cpuacct"]) / "cpuacct.usage").write_text("2500000000\n")
    (mem / "memory.memsw.max_usage_in_bytes").write_text("50331648\n")
    (mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (Path(cg.dirs["pids"]) / "pids.current").write_text("3\n")
    usage = cg.usage()
    assert (usage.cpu_s, usage.memory_peak_bytes, usage.oom_kills, usage.pids_current) == (
        2.5,
        50331648,
        2,
        3,
    )
    assert cg.reset_peak() is True
    assert cg.usage().memory_peak_bytes == 0
    cg.remove(timeout_s=1.0)
    assert tree.killed == [4242]
    assert (tmp_path / "freezer/contain").exists()  # shared parent stays
    assert not any(Path(p).exists() for p in cg.paths)
    cg.remove(timeout_s=1.0)  # idempotent


def test_kill_all_repeats_freeze_kill_thaw_until_a_racing_fork_is_gone(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    cg = SandboxCgroup.create("t3", RES, facts, ops=tree.ops())
    cg.attach(100)
    tree.forks_on_kill[100] = 101  # 101 appears as 100 dies: only the next round sees it
    cg.kill_all(timeout_s=2.0)
    assert tree.killed == [100, 101]
    assert tree.freezer_at_kill == ["FROZEN", "FROZEN"]
    assert cg.pids() == []
    assert (Path(cg.dirs["freezer"]) / "freezer.state").read_text() == "THAWED"


def test_kill_all_gives_up_at_the_deadline_naming_survivors(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    immortal = CgroupOps(tree.mkdir, tree.rmdir, lambda pid, sig: None)
    cg = SandboxCgroup.create("t4", RES, facts, ops=immortal)
    cg.attach(77)
    with pytest.raises(SandboxStartError, match=r"still holds pids \[77\]"):
        cg.kill_all(timeout_s=0.05)
    with pytest.raises(SandboxStartError):
        cg.remove(timeout_s=0.05)
    assert (Path(cg.dirs["freezer"]) / "freezer.state").read_text() == "THAWED"


def test_create_fails_closed_and_cleans_up_when_a_limit_file_is_missing(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    del tree.files_by_mount[tmp_path / "pids"]["pids.max"]
    with pytest.raises(UnsupportedHost, match=r"pids\.max: ENOENT"):
        SandboxCgroup.create("t5", RES, facts, ops=tree.ops())
    for controller in V1_FILES:
        parent = tmp_path / controller / ("job" if controller == "memory" else "") / "contain"
        assert [p for p in parent.iterdir() if p.is_dir()] == []


def test_missing_swap_accounting_is_refused_when_host_has_swap(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    for name in ("memory.memsw.limit_in_bytes", "memory.memsw.max_usage_in_bytes"):
        del tree.files_by_mount[tmp_path / "memory"][name]
    with pytest.raises(UnsupportedHost, match="swap accounting off"):
        SandboxCgroup.create("t6", RES, facts, ops=tree.ops(), swap_bytes=1 << 30)
    cg = SandboxCgroup.create("t6", RES, facts, ops=tree.ops(), swap_bytes=0)
    assert (Path(cg.dirs["memory"]) / "memory.limit_in_bytes").read_text() == "67108864"
    assert cg.usage().memory_peak_bytes == 0  # from memory.max_usage_in_bytes


def test_kernel_without_oom_kill_counter_is_refused(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    tree.files_by_mount[tmp_path / "memory"]["memory.oom_control"] = "oom_kill_disable 0\n"
    with pytest.raises(UnsupportedHost, match="no oom_kill counter"):
        SandboxCgroup.create("t7", RES, facts, ops=tree.ops())


def test_unwritable_parent_names_path_and_errno(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)

    def refuse(path: str) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    with pytest.raises(UnsupportedHost) as info:
        SandboxCgroup.create("t8", RES, facts, ops=CgroupOps(refuse, tree.rmdir, tree.kill))
    parent = tmp_path / "memory/job/contain"
    assert info.value.cause.startswith(f"cannot create cgroup {parent}: EACCES")
    assert "CONTAIN_CGROUP_ROOT" in info.value.fix


def test_delegated_root_from_facts_places_every_hierarchy_there(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    facts = replace(facts, cgroup_root="/deleg")
    with pytest.raises(UnsupportedHost, match=r"memory/deleg/contain: ENOENT"):
        SandboxCgroup.create("t9", RES, facts, ops=tree.ops())
    for controller in V1_FILES:
        tree.mkdir(str(tmp_path / controller / "deleg"))
    cg = SandboxCgroup.create("t9", RES, facts, ops=tree.ops())
    assert [Path(p).parent for p in cg.paths] == [tmp_path / controller / "deleg/contain" for controller in V1_FILES]


def test_bad_name_is_refused(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    with pytest.raises(SandboxStartError):
        SandboxCgroup.create("../x", RES, facts, ops=tree.ops())


# ---------------------------------------------------------------------------------------- apply v2


def test_v2_create_enables_controllers_in_parents_and_writes_plan(tmp_path: Path) -> None:
    facts, mount, tree = _v2_world(tmp_path)
    cg = SandboxCgroup.create("v2", RES, facts, ops=tree.ops())
    leaf = Path(cg.paths[0])
    assert cg.paths == (str(mount / "user.slice/contain" / leaf.name),)
    assert set(cg.dirs) == {row.controller for row in CONTROLLER_ROWS}
    assert (mount / "user.slice/cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (mount / "user.slice/contain/cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    for files in plan_cgroup_limits(RES, version=2).values():
        for name, value in files.items():
            assert (leaf / name).read_text() == value


def test_v2_usage_reads_cpu_stat_events_and_peak(tmp_path: Path) -> None:
    facts, _, tree = _v2_world(tmp_path)
    cg = SandboxCgroup.create("v2", RES, facts, ops=tree.ops())
    leaf = Path(cg.paths[0])
    (leaf / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n")
    (leaf / "memory.peak").write_text("1048576\n")
    (leaf / "pids.current").write_text("5\n")
    assert cg.usage() == type(cg.usage())(cpu_s=1.5, memory_peak_bytes=1048576, oom_kills=1, pids_current=5)


def test_v2_without_memory_peak_reports_none_and_cannot_reset(tmp_path: Path) -> None:
    facts, _, tree = _v2_world(tmp_path)
    del tree.files_by_mount[tmp_path / "unified"]["memory.peak"]
    cg = SandboxCgroup.create("v2", RES, facts, ops=tree.ops())
    assert cg.usage().memory_peak_bytes is None
    assert cg.reset_peak() is False


def test_v2_controller_missing_in_leaf_is_refused(tmp_path: Path) -> None:
    facts, _, tree = _v2_world(tmp_path)
    tree.files_by_mount[tmp_path / "unified"]["cgroup.controllers"] = "memory pids\n"
    with pytest.raises(UnsupportedHost, match=r"lacks controllers \['cpu'\]"):
        SandboxCgroup.create("v2", RES, facts, ops=tree.ops())


def test_v2_kill_all_uses_freeze_when_cgroup_kill_is_absent(tmp_path: Path) -> None:
    facts, _, tree = _v2_world(tmp_path)
    cg = SandboxCgroup.create("v2", RES, facts, ops=tree.ops())
    leaf = Path(cg.paths[0])
    (leaf / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    cg.attach(555)
    cg.kill_all(timeout_s=1.0)
    assert tree.killed == [555]
    assert (leaf / "cgroup.freeze").read_text() == "0"


# ------------------------------------------------------------------------------------------- sweep


# ------------------------------------------------------------------------- joining from the launcher


def test_v1_launcher_join_names_each_tasks_file_and_counts_bwrap_in_pids(tmp_path: Path) -> None:
    facts, tree = _v1_world(tmp_path)
    cg = SandboxCgroup.create("j1", RES, facts, ops=tree.ops(), launcher_joins=True)
    assert cg.joined_by_launcher
    assert cg.join_files() == tuple(f"{p}/tasks" for p in cg.paths) and len(cg.join_files()) == 5
    assert (Path(cg.dirs["pids"]) / "pids.max").read_text() == "17"  # the workload still gets 16 - 1 (supervisor)
    plain = SandboxCgroup.create("j2", RES, facts, ops=tree.ops())
    assert plain.join_files() == () and (Path(plain.dirs["pids"]) / "pids.max").read_text() == "16"


def test_v2_never_joins_through_tasks(tmp_path: Path) -> None:
    facts, _, tree = _v2_world(tmp_path)
    cg = SandboxCgroup.create("j3", RES, facts, ops=tree.ops(), launcher_joins=True)
    assert not cg.joined_by_launcher and cg.join_files() == ()
    assert (Path(cg.dirs["pids"]) / "pids.max").read_text() == "16"


def _proc_cgroup(cg: SandboxCgroup, *, except_controller: str = "") -> str:
    lines = []
    for number, controller in enumerate(("memory", "pids", "cpu", "cpuacct", "freezer", "devices"), start=2):
        path = f"/contain/{cg.leaf}" if controller in cg.dirs and controller != except_controller else "/"
        lines.append(f"{number}:{controller}:{path}")
    return "\n".join(["12:name=systemd:/init.scope", *lines, "0::/"]) + "\n"


def test_check_member_accepts_a_pid_in_every_hierarchy_and_names_any_it_is_missing(tmp_path, monkeypatch) -> None:
    facts, tree = _v1_world(tmp_path)
    cg = SandboxCgroup.create("j4", RES, facts, ops=tree.ops(), launcher_joins=True)
    text = {"value": _proc_cgroup(cg)}
    monkeypatch.setattr(cgroups_module, "_read", lambda path: text["value"] if path == "/proc/99/cgroup" else "")
    cg.check_member(99)
    text["value"] = _proc_cgroup(cg, except_controller="freezer")
    with pytest.raises(SandboxStartError, match="pid 99 is not in its sandbox cgroup for freezer"):
        cg.check_member(99)


def test_check_member_refuses_a_pid_that_is_gone(tmp_path) -> None:
    facts, tree = _v1_world(tmp_path)
    cg = SandboxCgroup.create("j5", RES, facts, ops=tree.ops(), launcher_joins=True)
    with pytest.raises(SandboxStartError, match="cannot read the cgroups of pid"):
        cg.check_member(2**22 + 1)  # above pid_max: never a live pid
