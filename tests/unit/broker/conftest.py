"""Fixtures: a broker wired to the invoices example action (SQLite store in tmp_path)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from broker_testkit import Clock, make_broker

from contain.broker import Broker


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def invoices_db(tmp_path: Path) -> str:
    import invoice_actions

    path = str(tmp_path / "invoices.db")
    invoice_actions.create_database(path, api_key="k-secret-1")
    return path


@pytest.fixture
def broker(tmp_path: Path, invoices_db: str, clock: Clock) -> Iterator[Broker]:
    b = make_broker(tmp_path, invoices_db, clock)
    b.start()
    yield b
    b.close()
