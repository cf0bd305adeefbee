"""Shared broker test helpers (importable from unit and integration tests)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT / "examples" / "broker") not in sys.path:
    sys.path.insert(0, str(ROOT / "examples" / "broker"))

from contain.broker import (  # noqa: E402
    Broker,
    Checkpointer,
    SecretStore,
    SqliteStore,
    TokenKey,
    load_checkpoint_key,
)
from contain.gate.grants import GrantKey  # noqa: E402


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_broker(tmp_path: Path, invoices_db: str, clock: Clock, store: Any = None) -> Broker:
    import invoice_actions

    action = invoice_actions.update_invoice({"database": invoices_db})
    return Broker(
        actions={action.name: action},
        store=store or SqliteStore(str(tmp_path / "broker.db")),
        token_key=TokenKey(b"t" * 32),
        grant_key=GrantKey.from_bytes(b"g" * 32),
        secrets=SecretStore({"invoices_api_key": "k-secret-1"}),
        checkpointer=Checkpointer(load_checkpoint_key(tmp_path / "checkpoint.key"), tmp_path / "ledger.checkpoints"),
        checkpoint_every=4,
        clock=clock,
    )
