"""SqliteStore: private directory and files, and one broker per database."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from contain.broker.storage import SqliteStore, check_private_directory
from contain.errors import BrokerStateUnsafe, LedgerInUse


def test_start_creates_a_private_directory_and_a_0600_database(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "state" / "broker.db"))
    store.start()
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
        for name in ("broker.db", "broker.db-wal", "broker.db-shm"):
            if (tmp_path / "state" / name).exists():
                assert stat.S_IMODE(os.stat(tmp_path / "state" / name).st_mode) == 0o600, name
    finally:
        store.close()


def test_a_second_broker_on_the_same_database_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "broker.db")
    first = SqliteStore(path)
    first.start()
    try:
        with pytest.raises(LedgerInUse, match=f"locked by pid {os.getpid()}"):
            SqliteStore(path, instance_wait_s=0).start()
    finally:
        first.close()
    second = SqliteStore(path, instance_wait_s=0)  # the lock went with the first store
    second.start()
    second.close()


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    os.chmod(shared, 0o777)
    with pytest.raises(BrokerStateUnsafe, match="can be changed by other users"):
        check_private_directory(shared, what="the test directory")
    with pytest.raises(BrokerStateUnsafe):
        SqliteStore(str(shared / "broker.db")).start()


def test_a_symlink_in_place_of_the_database_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "broker.db").symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(BrokerStateUnsafe, match="not a symlink"):
        SqliteStore(str(state / "broker.db")).start()
    assert not (tmp_path / "elsewhere.db").exists()
