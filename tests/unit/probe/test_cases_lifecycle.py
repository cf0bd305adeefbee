"""Pure judges of the LF/XT cases fire on planted readings."""

from __future__ import annotations

from contain.probe.cases_lifecycle import _orphan_breaches


def test_orphans_judge_flags_exhaustion_and_zombies():
    assert _orphan_breaches({"spawned": {"value": 2000}, "zombies": {"value": 0}}, 2000) == []
    found = _orphan_breaches({"spawned": {"value": 900}, "zombies": {"value": 900}}, 2000)
    assert found == [
        "pid exhaustion: fork failed after 900 of 2000 short-lived children",
        "900 zombies were left unreaped",
    ]
