"""`contain ledger verify|show` and `contain broker mint-token` through contain.cli.main."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_testkit import Clock

from contain.broker import Broker, BrokerRequest, mint_token
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


# -- anchoring: what deleting checkpoints, removing the key or truncating can no longer hide --------------

HOSTILE = "upd\x1b[2J\x1b[1;1Hledger verifies\x1b]52;c;Y3VybCBldmlsfHNo\x07\u202eate"


def _write_config(tmp_path: Path) -> Path:
    config = tmp_path / "broker.yaml"
    config.write_text("storage: {sqlite: broker.db}\nsocket_path: s\ntoken_key_file: t.key\ngrant_key_file: g.key\n"
                      "checkpoint_key_file: checkpoint.key\nledger_checkpoints: ledger.checkpoints\n"
                      "checkpoint_every_entries: 4\nactions: [{ref: 'invoice_actions:update_invoice'}]\n")
    return config


@pytest.fixture
def stopped(broker: Broker, clock: Clock, tmp_path: Path) -> Iterator[Path]:
    """A broker that made six writes (24 entries, checkpoints every 4) and signed its head; yields broker.yaml."""
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=60,
                       now=clock.now)
    for n in range(6):
        reply = broker.handle(BrokerRequest(token, "update_invoice", {"invoice_id": "INV-1", "amount_cents": 10000 + n},
                                            f"k{n}"))
        assert reply.status == 200
    broker.checkpoint()  # as at stop (the fixture closes the broker afterwards)
    yield _write_config(tmp_path)


def _truncate(tmp_path: Path, keep: int) -> None:
    conn = sqlite3.connect(tmp_path / "broker.db")
    conn.execute("DELETE FROM ledger WHERE seq > ?", (keep,))
    conn.commit()
    conn.close()


def test_verify_after_deleting_checkpoints_and_truncating_exits_3_unanchored(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ledger", "verify", "--config", str(stopped)]) == 0
    capsys.readouterr()
    (tmp_path / "ledger.checkpoints").unlink()
    _truncate(tmp_path, 13)
    assert main(["ledger", "verify", "--config", str(stopped)]) == 3
    out = capsys.readouterr().out
    assert "ledger is UNANCHORED" in out and "[no-checkpoint-file]" in out and "ledger verifies" not in out


def test_verify_without_the_public_key_exits_3_even_for_re_signed_checkpoints(
    capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["ledger", "verify", "--entries", str(FIX / "rewritten_chain.jsonl"),
            "--checkpoints", str(FIX / "resigned_checkpoints.jsonl")]
    assert main(args) == 3
    assert "[no-public-key]" in capsys.readouterr().out


def test_verify_with_the_key_file_removed_from_the_state_directory_exits_3(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "checkpoint.key.pub").unlink()
    assert main(["ledger", "verify", "--config", str(stopped)]) == 3
    assert "[no-public-key]" in capsys.readouterr().out


def test_anchor_then_truncation_with_dropped_checkpoints_fails_against_the_anchor_file(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    anchors = outside / "broker.anchors"
    assert main(["ledger", "anchor", "--config", str(stopped), "--to", str(anchors)]) == 0
    head = json.loads(anchors.read_text())
    assert head["seq"] == 24
    # the attacker cuts the chain back to seq 16 and removes the checkpoint lines after it
    _truncate(tmp_path, 16)
    cps = tmp_path / "ledger.checkpoints"
    cps.write_text("".join(line + "\n" for line in cps.read_text().splitlines() if json.loads(line)["seq"] <= 16))
    assert main(["ledger", "verify", "--config", str(stopped)]) == 0  # nothing inside the state dir shows it
    capsys.readouterr()
    assert main(["ledger", "verify", "--config", str(stopped), "--anchors", str(anchors)]) == 1
    assert "seq 24: a signed external anchor names this seq but the ledger ends at 16 (truncated)" in capsys.readouterr().out
    assert main(["ledger", "verify", "--config", str(stopped), "--expect-head", f"24:{head['hash']}"]) == 1
    # and anchoring again refuses to bless the truncated ledger
    assert main(["ledger", "anchor", "--config", str(stopped), "--to", str(anchors)]) == 1
    assert len(anchors.read_text().splitlines()) == 1


def test_anchor_refuses_an_unanchored_ledger_unless_told(stopped: Path, tmp_path: Path) -> None:
    (tmp_path / "ledger.checkpoints").unlink()
    out = tmp_path / "o"
    out.mkdir()
    assert main(["ledger", "anchor", "--config", str(stopped), "--to", str(out / "a")]) == 3
    assert not (out / "a").exists()
    assert main(["ledger", "anchor", "--config", str(stopped), "--to", str(out / "a"), "--accept-unanchored"]) == 0
    assert json.loads((out / "a").read_text())["seq"] == 24


def test_expect_head_in_another_form_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["ledger", "verify", "--entries", str(FIX / "clean.jsonl"), "--expect-head", "deadbeef"])
    assert exited.value.code == 2 and "SEQ:HASH" in capsys.readouterr().err


def test_a_named_anchor_file_that_is_missing_is_an_error_not_a_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "verify", "--entries", str(FIX / "clean.jsonl"), *KEYS, "--anchors", "/nonexistent/a"]) == 125
    assert "does not exist" in capsys.readouterr().err


def test_verify_json_is_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "verify", "--json", "--entries", str(FIX / "truncated_tail.jsonl"), *KEYS]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "tampered" and data["problems"][0]["seq"] == 12


@pytest.fixture
def hostile(broker: Broker, clock: Clock, tmp_path: Path) -> Iterator[Path]:
    """A ledger whose task, principal, key and action names carry terminal escapes (OSC 52, cursor
    movement, clear screen, bidi override), recorded as a write and as a refusal sent without a token."""
    broker.actions[HOSTILE] = broker.actions["update_invoice"]
    token = mint_token(TokenKey(b"t" * 32), task="t\x1b[1A\u202e", principal="alice", actions=[HOSTILE], ttl_s=60,
                       now=clock.now)
    assert broker.handle(BrokerRequest(None, HOSTILE, {}, None)).status == 401
    reply = broker.handle(BrokerRequest(token, HOSTILE, {"invoice_id": "INV-1", "amount_cents": 10100}, "k\u200b1"))
    assert reply.status == 400  # the key is refused (zero-width space) ...
    reply = broker.handle(BrokerRequest(token, HOSTILE, {"invoice_id": "INV-1", "amount_cents": 10100}, "k1"))
    assert reply.status == 200  # ... and the write goes through with the hostile task and action
    broker.checkpoint()
    yield _write_config(tmp_path)


def test_show_renders_hostile_names_visibly_and_keeps_json_exact(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["ledger", "show", "--all", "--config", str(hostile)])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b[2J" in out and "\\x1b]52;c;" in out and "\\u202e" in out
    assert main(["ledger", "show", "--json", "--all", "--config", str(hostile)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["writes"][0]["action"] == HOSTILE and data["refusals"][0]["action"] == HOSTILE


def test_show_repeats_its_warning_below_the_listing_when_the_ledger_does_not_verify(
    hostile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ledger.checkpoints").unlink()
    assert main(["ledger", "show", "--config", str(hostile)]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("WARNING: ledger is UNANCHORED") and lines[-1] == lines[0]


def test_anchor_to_stdout_prints_only_the_signed_line(stopped: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from contain.broker.ledger import load_public_key, read_checkpoints, verify_entries
    from contain.broker.storage import SqliteStore

    assert main(["ledger", "anchor", "--config", str(stopped), "--to", "-"]) == 0
    captured = capsys.readouterr()
    (tmp_path / "a").write_text(captured.out)
    points = read_checkpoints(tmp_path / "a")  # stdout held exactly one checkpoint line
    assert [p.seq for p in points] == [24] and "anchored head 24:" in captured.err
    entries = SqliteStore(str(tmp_path / "broker.db")).raw_rows()
    assert verify_entries(entries, points, load_public_key(tmp_path / "checkpoint.key.pub")) == []


def test_verify_lines_about_hostile_entries_stay_on_their_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [json.loads(line) for line in (FIX / "clean.jsonl").read_text().splitlines()]
    rows[4]["kind"] = "\x1b[1A\x1b[2Kledger verifies\u202e"
    rows[6]["seq"] = "7\x1b]52;c;ZXZpbA==\x07"
    exported = tmp_path / "hostile.jsonl"
    exported.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["ledger", "verify", "--entries", str(exported), *KEYS]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert out.splitlines()[-1].startswith("ledger does NOT verify")
