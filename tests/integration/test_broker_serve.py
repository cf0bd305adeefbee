"""`contain broker serve` as a process: a second broker on the same ledger refuses and leaves the
first one serving (its socket, its ledger); once the first is killed, a new one starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "broker"
sys.path.insert(0, str(EXAMPLES))

import invoice_actions  # noqa: E402

from contain.broker import BrokerClient, mint_token  # noqa: E402
from contain.broker.tokens import TokenKey  # noqa: E402

CLI = [sys.executable, "-c", "import sys; from contain.cli import main; sys.exit(main())"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    db = str(tmp_path / "invoices.db")
    invoice_actions.create_database(db, api_key="k-secret-1")
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"invoices_api_key": "k-secret-1"}))
    secrets.chmod(0o600)
    path = tmp_path / "broker.yaml"
    path.write_text(json.dumps({
        "storage": {"sqlite": str(tmp_path / "broker.db")},
        "socket_path": str(tmp_path / "broker.sock"),
        "token_key_file": str(tmp_path / "token.key"),
        "grant_key_file": str(tmp_path / "grant.key"),
        "checkpoint_key_file": str(tmp_path / "checkpoint.key"),
        "ledger_checkpoints": str(tmp_path / "ledger.checkpoints"),
        "secrets_file": str(secrets),
        "import_paths": [str(EXAMPLES)],
        "actions": [{"ref": "invoice_actions:update_invoice", "options": {"database": db}}],
    }))
    return path


def _serve(config: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen([*CLI, "broker", "serve", "--config", str(config)], stderr=subprocess.PIPE, text=True,
                            env=env)


@pytest.fixture
def first(config: Path) -> Iterator[subprocess.Popen[str]]:
    proc = _serve(config)
    assert proc.stderr is not None
    assert "listening" in proc.stderr.readline()
    yield proc
    proc.kill()
    proc.wait(10)


def _update(config: Path, key: str) -> Any:
    settings = json.loads(config.read_text())
    token = mint_token(TokenKey.load_or_create(settings["token_key_file"]), task="t", principal="alice",
                       actions=["update_invoice"], ttl_s=60)
    client = BrokerClient(settings["socket_path"], token)
    return client.call("update_invoice", {"invoice_id": "INV-1", "amount_cents": 10500}, idempotency_key=key)


def test_a_second_broker_on_the_same_ledger_refuses_and_the_first_keeps_serving(
    config: Path, first: subprocess.Popen[str]
) -> None:
    assert _update(config, "before").status == 200
    second = _serve(config)
    _, err = second.communicate(timeout=30)
    assert second.returncode == 125
    assert "another broker is serving this ledger" in err and f"locked by pid {first.pid}" in err
    assert "fix: stop the running broker first" in err
    after = _update(config, "after")  # through the first broker's socket, which was not taken over
    assert first.poll() is None and after.status == 200 and after.body["replayed"] is False


def test_a_killed_broker_is_replaced(config: Path, first: subprocess.Popen[str]) -> None:
    assert _update(config, "k1").status == 200
    first.kill()
    first.wait(10)
    replacement = _serve(config)
    try:
        assert replacement.stderr is not None
        assert "listening" in replacement.stderr.readline()
        again = _update(config, "k1")
        assert again.status == 200 and again.body["replayed"] is True  # the first write's stored reply
    finally:
        replacement.terminate()
        replacement.wait(10)
