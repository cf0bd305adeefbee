"""Parsing /proc/self/cgroup and /proc/self/mountinfo into CgroupMounts, from literal text."""

from __future__ import annotations

from contain.host.facts import CgroupMount, HostFacts, parse_cgroup_mounts, parse_own_cgroups

# This test host: hybrid, v1 controllers each on their own mount, an empty-ish cgroup2.
HYBRID_CGROUP = """\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/b85
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
"""
HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def _controllers(files: dict[str, str]):
    return files.get


def test_own_cgroups_map_every_controller_of_a_co_mounted_hierarchy():
    own = parse_own_cgroups("5:cpu,cpuacct,cpuset:/a\n4:memory:/b\n0::/c\n")
    assert own == {"cpu": "/a", "cpuacct": "/a", "cpuset": "/a", "memory": "/b", "": "/c"}


def test_hybrid_host_parses_to_v1_controllers_plus_cgroup2():
    read = _controllers({"/sys/fs/cgroup/unified/cgroup.controllers": "hugetlb\n"})
    assert parse_cgroup_mounts(HYBRID_MOUNTINFO, HYBRID_CGROUP, read) == (
        CgroupMount(1, "/sys/fs/cgroup/cpu", ("cpu",), "/"),
        CgroupMount(1, "/sys/fs/cgroup/cpuacct", ("cpuacct",), "/"),
        CgroupMount(1, "/sys/fs/cgroup/memory", ("memory",), "/process_api/b85"),
        CgroupMount(1, "/sys/fs/cgroup/freezer", ("freezer",), "/"),
        CgroupMount(1, "/sys/fs/cgroup/pids", ("pids",), "/"),
        CgroupMount(2, "/sys/fs/cgroup/unified", ("hugetlb",), "/"),
    )


def test_co_mount_with_a_controller_we_do_not_use_still_finds_our_path():
    # Before the fix the key "cpu,cpuacct" did not match "cpuset,cpu,cpuacct" and the path
    # silently became "/" (the hierarchy root), so the sandbox cgroup landed in the wrong place.
    mountinfo = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpuset,cpu,cpuacct\n"
    mounts = parse_cgroup_mounts(mountinfo, "3:cpuset,cpu,cpuacct:/job/7\n", _controllers({}))
    assert mounts == (CgroupMount(1, "/sys/fs/cgroup/cpu", ("cpu", "cpuacct"), "/job/7"),)


def test_mount_root_is_stripped_so_own_path_is_inside_the_mountpoint():
    # A container that sees only its own subtree: the mount's root is /docker/abc.
    mountinfo = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    own = "4:memory:/docker/abc/inner\n"
    mounts = parse_cgroup_mounts(mountinfo, own, _controllers({}))
    assert mounts == (CgroupMount(1, "/sys/fs/cgroup/memory", ("memory",), "/inner"),)


def test_own_path_equal_to_the_mount_root_is_the_mount_itself():
    mountinfo = "41 31 0:38 /user.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    read = _controllers({"/sys/fs/cgroup/cgroup.controllers": "memory pids cpu\n"})
    mounts = parse_cgroup_mounts(mountinfo, "0::/user.slice\n", read)
    assert mounts == (CgroupMount(2, "/sys/fs/cgroup", ("memory", "pids", "cpu"), "/"),)


def test_pure_v2_host_reads_enabled_controllers():
    mountinfo = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
    read = _controllers({"/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n"})
    mounts = parse_cgroup_mounts(mountinfo, "0::/user.slice/session-1.scope\n", read)
    assert mounts == (
        CgroupMount(
            2,
            "/sys/fs/cgroup",
            ("cpuset", "cpu", "io", "memory", "pids"),
            "/user.slice/session-1.scope",
        ),
    )


def test_non_cgroup_and_malformed_lines_are_ignored():
    mountinfo = "garbage\n22 1 0:21 / /proc rw - proc proc rw\n"
    assert parse_cgroup_mounts(mountinfo, "", _controllers({})) == ()


def test_cgroup_for_returns_the_first_hierarchy_offering_the_controller():
    v1 = CgroupMount(1, "/sys/fs/cgroup/memory", ("memory",), "/")
    v2 = CgroupMount(2, "/sys/fs/cgroup/unified", ("memory", "pids"), "/")
    facts = HostFacts("x86_64", True, 0, 0, None, True, True, 0, (v1, v2))
    assert facts.cgroup_for("memory") is v1
    assert facts.cgroup_for("pids") is v2
    assert facts.cgroup_for("cpu") is None
