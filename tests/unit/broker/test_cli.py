"""`contain ledger verify|show` and `contain broker mint-token` through contain.cli.main."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contain.broker.tokens import TokenKey, verify_token
from contain.cli import main

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "ledger"
KEYS = ["--checkpoints", str(FIX / "checkpoints.jsonl"), "--public-key", str(FIX / "checkpoint.pub")]


def test_verify_clean_fixture_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "verify", "--entries", str(FIX / "clean.jsonl"), *KEYS]) == 0
    assert "ledger verifies: 12 entries" in capsys.readouterr().out


def test_verify_tampered_fixture_exits_1_and_names_the_seq(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "verify", "--entries", str(FIX / "deleted_middle.jsonl"), *KEYS]) == 1
    assert "ledger: seq 6: seq 6 missing (deleted)" in capsys.readouterr().out


def test_show_json_lists_writes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "show", "--json", "--entries", str(FIX / "clean.jsonl"), *KEYS]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verified"] is True and [w["intent_seq"] for w in data["writes"]] == [3, 7, 11]


def test_show_warns_when_the_ledger_does_not_verify(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "show", "--entries", str(FIX / "edited_detail.jsonl"), *KEYS]) == 1
    assert capsys.readouterr().out.startswith("WARNING: ledger does NOT verify: seq 5")


def test_ledger_without_source_is_an_error_with_a_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "verify"]) == 125
    assert "fix:" in capsys.readouterr().err


def test_mint_token_for_a_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("storage: {sqlite: b.db}\nsocket_path: s\ntoken_key_file: t.key\ngrant_key_file: g.key\n"
                      "checkpoint_key_file: c.key\nledger_checkpoints: cps\nactions: [{ref: 'x:y'}]\n")
    manifest = Path(__file__).resolve().parents[3] / "examples" / "broker" / "contain.yaml"
    assert main(["broker", "mint-token", "--config", str(config), "--manifest", str(manifest), "--ttl", "60"]) == 0
    token = capsys.readouterr().out.strip()
    scope = verify_token(TokenKey.load_or_create(tmp_path / "t.key"), token).scope
    assert scope is not None and (scope.task, scope.principal, scope.actions) == ("invoices-demo", "alice", frozenset({"update_invoice"}))
