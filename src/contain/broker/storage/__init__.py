"""Durable storage for the ledger, idempotency records and grant uses: SQLite (WAL) or PostgreSQL.

One mechanism per module:

* ``sql``: the schema and ``Txn``, the reads and writes one stored function may do (queries are
  shared by both backends);
* ``group_commit``: ``Store``, the leader-based group commit over one write connection, the
  one-broker-per-store instance lock, and the read side;
* ``sqlite`` / ``postgres``: the two backends (connections, write serialisation, instance lock;
  SQLite also keeps its directory and files private);
* ``backends``: ``open_store``, the backend broker.yaml names.

What is enforced and what is not is said in each module; in short, appends are serialised and
durable at commit, one broker serves a store, and the database itself is not tamper-proof (the
hash chain and the signed checkpoints in ``ledger`` are).
"""

from contain.broker.storage.backends import open_store
from contain.broker.storage.group_commit import Store
from contain.broker.storage.postgres import PostgresStore
from contain.broker.storage.sql import Txn
from contain.broker.storage.sqlite import SqliteStore, check_private_directory

__all__ = ["PostgresStore", "SqliteStore", "Store", "Txn", "check_private_directory", "open_store"]
