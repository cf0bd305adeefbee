"""runc_state.py: only a stopped container's state that is fully understood is removed without
runc; every other shape sends close back to ``runc delete --force``."""

from __future__ import annotations

from typing import Any

import pytest

from contain.runtime.container.runc_state import plan_stopped_removal

NAME = "contain-1942-1942-15ca256613-d7212657"


def state(**changes: Any) -> dict[str, Any]:
    """The shape runc 1.1.5 writes (cut down to what the plan reads)."""
    base: dict[str, Any] = {
        "id": NAME,
        "init_process_pid": 1959,
        "config": {"hooks": None},
        "cgroup_paths": {
            "": f"/sys/fs/cgroup/unified/contain-container/{NAME}",
            "memory": f"/sys/fs/cgroup/memory/process_api/13a2/contain-container/{NAME}",
            "pids": f"/sys/fs/cgroup/pids/contain-container/{NAME}",
            "name=systemd": f"/sys/fs/cgroup/systemd/contain-container/{NAME}",
        },
        "intel_rdt_path": "",
    }
    return {**base, **changes}


def test_a_stopped_containers_cgroup_directories_are_planned_deepest_first() -> None:
    assert plan_stopped_removal(state(), name=NAME) == (
        f"/sys/fs/cgroup/memory/process_api/13a2/contain-container/{NAME}",
        f"/sys/fs/cgroup/pids/contain-container/{NAME}",
        f"/sys/fs/cgroup/systemd/contain-container/{NAME}",
        f"/sys/fs/cgroup/unified/contain-container/{NAME}",
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"id": "contain-other"},
        {"intel_rdt_path": "/sys/fs/resctrl/x"},
        {"config": {"hooks": {"poststop": [{"path": "/bin/true"}]}}},
        {"config": None},
        {"cgroup_paths": {}},
        {"cgroup_paths": None},
        {"cgroup_paths": {"pids": f"/tmp/contain-container/{NAME}"}},
        {"cgroup_paths": {"pids": f"/sys/fs/cgroup/pids/../../../etc/{NAME}"}},
        {"cgroup_paths": {"pids": "/sys/fs/cgroup/pids/contain-container"}},
        {"cgroup_paths": {"pids": 7}},
    ],
    ids=[
        "another-id",
        "intel-rdt",
        "poststop-hook",
        "no-config",
        "no-cgroups",
        "cgroups-null",
        "outside-the-cgroup-mount",
        "dot-dot",
        "not-named-after-the-container",
        "not-a-string",
    ],
)
def test_any_state_not_fully_understood_is_left_to_runc_delete(changes: dict[str, Any]) -> None:
    assert plan_stopped_removal(state(**changes), name=NAME) is None
