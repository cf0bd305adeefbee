"""Only sandboxes whose owner is gone are swept; a live (or reused) pid keeps its directory."""

from __future__ import annotations

from contain.runtime.container.sweep import plan_stale


def test_a_directory_is_stale_only_when_its_owner_pid_is_gone_and_its_name_has_the_shape():
    names = [
        "contain-100-100-ab12-cd34",  # owner dead
        "contain-200-200-ab12-cd34",  # owner alive
        "contain-300-x",  # owner dead
        "contain-abc-1",  # not a pid
        "other-400-1",  # not ours
        ".sweep",
        "contain-500-bad/name",
    ]
    alive = {200}
    assert plan_stale(names, is_alive=lambda pid: pid in alive) == ["contain-100-100-ab12-cd34", "contain-300-x"]


def test_nothing_is_stale_when_every_owner_lives():
    assert plan_stale(["contain-1-a", "contain-2-b"], is_alive=lambda pid: True) == []
