"""External anchors: sinks, the publisher (first line synchronous, then coalesced off the commit path),
and a broker whose every checkpoint also reaches its anchor."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from broker_testkit import Clock, make_broker

from contain.broker import BrokerRequest, mint_token
from contain.broker.anchors import (
    AnchorPublisher,
    CommandAnchorSink,
    FileAnchorSink,
    RecordingAnchorSink,
    anchor_environment,
    publisher_for,
)
from contain.broker.config import CheckpointAnchorConfig
from contain.broker.ledger import Checkpointer, load_checkpoint_key, read_checkpoints
from contain.broker.tokens import TokenKey
from contain.errors import LedgerAnchorError


def test_file_anchor_appends_each_line_and_creates_the_file_private(tmp_path: Path) -> None:
    sink = FileAnchorSink(tmp_path / "a")
    sink.send(b'{"seq": 1}\n')
    sink.send(b'{"seq": 2}\n')
    assert (tmp_path / "a").read_bytes() == b'{"seq": 1}\n{"seq": 2}\n'
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o600


def test_file_anchor_refuses_a_symlink_and_a_missing_directory(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(LedgerAnchorError, match="cannot open"):
        FileAnchorSink(tmp_path / "link")
    with pytest.raises(LedgerAnchorError, match="cannot open"):
        FileAnchorSink(tmp_path / "missing" / "a")


def test_command_anchor_gets_the_line_on_stdin_without_the_executor_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTAIN_BROKER_SECRET_INVOICES_API_KEY", "hunter2")
    monkeypatch.setenv("ANCHOR_VISIBLE", "yes")
    out = tmp_path / "got"
    script = ("import os, sys; open(sys.argv[1], 'w').write(sys.stdin.read() + repr(sorted("
              "k for k in os.environ if k.startswith(('CONTAIN_BROKER_SECRET_', 'ANCHOR_')))))")
    CommandAnchorSink([sys.executable, "-c", script, str(out)], timeout_s=30).send(b"line\n")
    assert out.read_text() == "line\n['ANCHOR_VISIBLE']"
    assert anchor_environment({"CONTAIN_BROKER_SECRET_X": "s", "PATH": "/bin"}) == {"PATH": "/bin"}


def test_command_anchor_failure_names_the_exit_status_and_shows_stderr_visibly() -> None:
    sink = CommandAnchorSink([sys.executable, "-c", "import sys; sys.stderr.write('no\\x1b[2J'); sys.exit(4)"],
                             timeout_s=30)
    with pytest.raises(LedgerAnchorError) as raised:
        sink.send(b"line\n")
    assert "exited 4" in raised.value.cause and "\\x1b[2J" in raised.value.cause and "\x1b" not in raised.value.cause


def test_command_anchor_that_is_not_a_program_is_refused_when_configured() -> None:
    with pytest.raises(LedgerAnchorError, match="not an executable"):
        CommandAnchorSink(["/nonexistent/anchor-tool"], timeout_s=1)


def test_a_required_anchor_raises_until_it_took_a_line_and_afterwards_failures_only_count() -> None:
    sink = RecordingAnchorSink()
    sink.failing = True
    publisher = AnchorPublisher(sink, required=True)
    for line in (b"1\n", b"2\n"):
        with pytest.raises(LedgerAnchorError):
            publisher.publish(line)
    sink.failing = False
    publisher.publish(b"3\n")
    sink.failing = True
    publisher.publish(b"4\n")  # from now on a failure never raises into the commit path
    publisher.close()
    assert (publisher.failures, publisher.sent, sink.lines) == (3, 1, [b"3\n"])


def test_an_optional_anchor_that_refuses_the_first_line_does_not_raise() -> None:
    sink = RecordingAnchorSink()
    sink.failing = True
    publisher = AnchorPublisher(sink, required=False)
    publisher.publish(b"1\n")
    assert publisher.failures == 1 and publisher.last_error is not None


class _Gated(RecordingAnchorSink):
    """Blocks each send after the first until released, to hold the publisher's thread busy."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def send(self, line: bytes) -> None:
        if self.lines:
            self.entered.set()
            assert self.release.wait(10)
        super().send(line)


def test_lines_published_while_the_anchor_is_busy_are_coalesced_into_the_newest() -> None:
    sink = _Gated()
    publisher = AnchorPublisher(sink, required=True)
    publisher.publish(b"1\n")  # synchronous
    publisher.publish(b"2\n")  # the thread takes it and blocks in send
    assert sink.entered.wait(10)
    for n in (3, 4, 5):
        publisher.publish(f"{n}\n".encode())
    sink.release.set()
    publisher.close()  # delivers what is pending, then stops
    assert sink.lines == [b"1\n", b"2\n", b"5\n"]


def test_publisher_for_builds_the_configured_sink(tmp_path: Path) -> None:
    assert publisher_for(None) is None
    by_file = publisher_for(CheckpointAnchorConfig(file=str(tmp_path / "a")))
    assert by_file is not None and isinstance(by_file.sink, FileAnchorSink) and by_file.required
    by_command = publisher_for(CheckpointAnchorConfig(command=(sys.executable, "-c", "pass"), required=False))
    assert by_command is not None and isinstance(by_command.sink, CommandAnchorSink) and not by_command.required


def test_every_broker_checkpoint_reaches_the_anchor_and_the_last_one_at_stop(
    tmp_path: Path, invoices_db: str, clock: Clock
) -> None:
    broker = make_broker(tmp_path, invoices_db, clock)
    sink = RecordingAnchorSink()
    publisher = AnchorPublisher(sink, required=True)
    key = load_checkpoint_key(tmp_path / "checkpoint.key")
    broker._checkpointer = Checkpointer(key, tmp_path / "ledger.checkpoints", anchor=publisher)
    broker.start()
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=60,
                       now=clock.now)
    for n in range(5):
        args = {"invoice_id": "INV-1", "amount_cents": 10000 + n}
        assert broker.handle(BrokerRequest(token, "update_invoice", args, f"k{n}")).status == 200
    broker.close()
    points = read_checkpoints(tmp_path / "ledger.checkpoints")
    anchored = [json.loads(line) for line in sink.lines]
    assert anchored and anchored[-1]["seq"] == points[-1].seq == 20  # the stop checkpoint reached it
    assert {a["hash"] for a in anchored} <= {p.hash for p in points}


def test_a_broker_whose_required_anchor_fails_refuses_to_start(tmp_path: Path, invoices_db: str, clock: Clock) -> None:
    first = make_broker(tmp_path, invoices_db, clock)
    first.start()
    token = mint_token(TokenKey(b"t" * 32), task="t1", principal="alice", actions=["update_invoice"], ttl_s=60,
                       now=clock.now)
    args = {"invoice_id": "INV-1", "amount_cents": 10100}
    assert first.handle(BrokerRequest(token, "update_invoice", args, "k1")).status == 200
    first.store.close()  # stopped without its stop checkpoint: the next start signs the head
    second = make_broker(tmp_path, invoices_db, clock)
    sink = RecordingAnchorSink()
    sink.failing = True
    key = load_checkpoint_key(tmp_path / "checkpoint.key")
    second._checkpointer = Checkpointer(key, tmp_path / "ledger.checkpoints",
                                        anchor=AnchorPublisher(sink, required=True))
    with pytest.raises(LedgerAnchorError):
        second.start()
    second.store.close()
    assert os.path.exists(tmp_path / "ledger.checkpoints")


def test_broker_yaml_checkpoint_anchor_file_receives_what_verify_anchors_checks(
    tmp_path: Path, invoices_db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from contain.broker.config import load_config
    from contain.broker.service import build_broker
    from contain.cli import main

    state, outside = tmp_path / "state", tmp_path / "outside"
    state.mkdir()
    outside.mkdir()
    config_file = state / "broker.yaml"
    config_file.write_text(
        "storage: {sqlite: broker.db}\nsocket_path: s\ntoken_key_file: t.key\ngrant_key_file: g.key\n"
        "checkpoint_key_file: checkpoint.key\nledger_checkpoints: ledger.checkpoints\ncheckpoint_every_entries: 4\n"
        f"checkpoint_anchor: {{file: {outside}/anchors}}\n"
        f"actions: [{{ref: 'invoice_actions:update_invoice', options: {{database: {invoices_db}}}}}]\n"
        "secrets_file: null\n"
    )
    monkeypatch.setenv("CONTAIN_BROKER_SECRET_INVOICES_API_KEY", "k-secret-1")
    broker = build_broker(load_config(config_file))
    broker.start()
    token = mint_token(broker._token_key, task="t1", principal="alice", actions=["update_invoice"], ttl_s=60)
    for n in range(3):
        args = {"invoice_id": "INV-1", "amount_cents": 10000 + n}
        assert broker.handle(BrokerRequest(token, "update_invoice", args, f"k{n}")).status == 200
    broker.close()
    assert json.loads((outside / "anchors").read_text().splitlines()[-1])["seq"] == 12
    assert main(["ledger", "verify", "--config", str(config_file), "--anchors", str(outside / "anchors")]) == 0
    assert "ledger verifies: 12 entries" in capsys.readouterr().out
