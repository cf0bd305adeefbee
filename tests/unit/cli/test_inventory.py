"""`contain inventory`: paths, sockets and reasons anyone on the host named print as escapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import contain.cli.inventory
from cli.terminal_kit import HOSTILE, HOSTILE_SHOWN, assert_terminal_safe
from contain.cli import main
from contain.inventory.collect import Inventory
from contain.inventory.items import Group, InventoryItem, Verdict


@pytest.fixture
def hostile_inventory(monkeypatch):
    inventory = Inventory(
        home=Path("/home/u"),
        cwd=Path(f"/work/{HOSTILE}"),
        items=(
            InventoryItem(Group.FILES, "file", f"/home/u/{HOSTILE}", Verdict.BLOCK, f"looks like {HOSTILE}"),
            InventoryItem(Group.PROCESSES, "socket", f"@{HOSTILE}", Verdict.REVIEW, "abstract socket", HOSTILE),
        ),
    )
    monkeypatch.setattr(contain.cli.inventory, "take_inventory", lambda **_: inventory)
    return inventory


def test_text_output_renders_every_hostile_value(hostile_inventory, capsysbinary):
    assert main(["inventory"]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert_terminal_safe(out)
    assert f"/home/u/{HOSTILE_SHOWN}" in out and f"/work/{HOSTILE_SHOWN}" in out


def test_json_output_stays_exact(hostile_inventory, capsys):
    assert main(["inventory", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cwd"] == f"/work/{HOSTILE}"
    assert [item["location"] for item in document["items"]] == [f"/home/u/{HOSTILE}", f"@{HOSTILE}"]
