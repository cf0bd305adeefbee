from __future__ import annotations

import contain.inventory as inventory
from contain.inventory import Group, InventoryItem, Verdict, redacted_fingerprint


def test_fingerprint_shows_no_character_run_of_the_value() -> None:
    value = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    tag = redacted_fingerprint(value)
    assert tag.startswith("sha256:") and tag.endswith("/len=40")
    assert value[:4] not in tag and len(tag.split("/")[0]) == len("sha256:") + 4
    assert redacted_fingerprint(value) == tag != redacted_fingerprint(value + "x")


def test_item_json_uses_plain_values() -> None:
    item = InventoryItem(Group.FILES, "home", "/h", Verdict.BLOCK, "why")
    assert item.to_json() == {
        "group": "files",
        "kind": "home",
        "location": "/h",
        "verdict": "block",
        "reason": "why",
        "fingerprint": None,
    }


def test_package_exports_match_all() -> None:
    public = {n for n in dir(inventory) if not n.startswith("_")}
    modules = {
        "check",
        "check_rules",
        "collect",
        "credentials",
        "draft",
        "files",
        "items",
        "network",
        "processes",
        "records",
        "sarif",
        "secrets",
    }
    assert set(inventory.__all__) == public - modules
