"""Which storage backend broker.yaml's ``storage`` names: ``{sqlite: path}`` or ``{postgres: dsn}``."""

from __future__ import annotations

from collections.abc import Mapping

from contain.broker.storage.group_commit import Store
from contain.broker.storage.postgres import PostgresStore
from contain.broker.storage.sqlite import SqliteStore

__all__ = ["open_store"]


def open_store(storage: Mapping[str, str]) -> Store:
    """Build a store from the config's ``storage`` mapping: ``{sqlite: path}`` or ``{postgres: dsn}``."""
    if "sqlite" in storage:
        return SqliteStore(storage["sqlite"])
    if "postgres" in storage:
        return PostgresStore(storage["postgres"])
    raise ValueError("storage must name sqlite or postgres")
