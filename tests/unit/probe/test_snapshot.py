"""Snapshot diffs keep only what appeared and carries a marker."""

from __future__ import annotations

from contain.probe.snapshot import HostSnapshot, ProcessEntry, diff, ipc_key


def _snap(procs=(), **categories: tuple[str, ...]) -> HostSnapshot:
    return HostSnapshot(frozenset(procs), {k: frozenset(v) for k, v in categories.items()})


def test_only_new_marked_entries_count_as_left_behind():
    before = _snap(files=("/tmp/old (1 bytes)",), sysvipc=())
    after = _snap(
        [ProcessEntry(10, 1, "python3", 5, "python3 -c x m-123"), ProcessEntry(11, 1, "bash", 6, "bash")],
        files=("/tmp/old (1 bytes)", "/tmp/other-tool (3 bytes)", "/tmp/contain-probe-m-123 (4 bytes)"),
        sysvipc=("shm key=42 id=7",),
    )
    marked = diff(before, after).marked(["m-123"])
    assert marked == {
        "processes": ["pid 10 (ppid 1, python3): python3 -c x m-123"],
        "files": ["/tmp/contain-probe-m-123 (4 bytes)"],
    }


def test_own_cgroups_count_without_a_marker():
    after = _snap(cgroups=("/sys/fs/cgroup/pids/contain/contain-1-x",))
    assert diff(_snap(cgroups=()), after).marked(["nothing"]) == {
        "cgroups": ["/sys/fs/cgroup/pids/contain/contain-1-x"]
    }


def test_ipc_key_is_stable_positive_and_nonzero():
    assert ipc_key("abc") == ipc_key("abc") > 0
    assert ipc_key("abc") != ipc_key("abd")
