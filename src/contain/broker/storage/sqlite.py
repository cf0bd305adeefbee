"""``SqliteStore``: the broker's storage in one SQLite file (WAL, ``synchronous=FULL``), kept private.

File modes: ``start`` creates the database's directory 0700 when it is missing and refuses
(``BrokerStateUnsafe``) a directory that group or others may write, or any ancestor that others
may write without the sticky bit: whoever can rename entries there can swap the database or its
WAL. The database file is created 0600 (through ``O_NOFOLLOW``) before SQLite opens it, and an
existing one, its ``-wal``, ``-shm`` and ``-journal`` are set to 0600; SQLite creates the WAL and
shared-memory files with the database file's mode, so they follow it.

What is enforced: appends are serialised by ``BEGIN IMMEDIATE``, so the chain head read and the
append are atomic; every commit is fsynced (``synchronous=FULL`` in WAL mode); one broker per
database (``flock`` on ``<db>-broker.lock``, which names the holder's pid). What is not: the file
is not tamper-proof; that is what the hash chain and the signed checkpoints in ``ledger`` are for.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

from contain.broker.storage.group_commit import Store
from contain.errors import BrokerStateUnsafe

__all__ = ["SqliteStore", "check_private_directory"]


_DB_MODE = 0o600
_SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's own files beside the database


def check_private_directory(path: str | os.PathLike[str], *, what: str) -> None:
    """Refuse a directory whose entries other users could replace.

    ``path`` must be a directory owned by root or by this process's user and not writable by
    group or others, and no ancestor may be writable by others unless it has the sticky bit
    (as /tmp does: others cannot rename what they do not own there).

    Raises:
        BrokerStateUnsafe: the directory or an ancestor fails the rule (named, with its mode).
    """
    real = Path(os.path.realpath(path))
    owners = (0, os.geteuid())
    try:
        info = os.lstat(real)
    except FileNotFoundError as exc:
        raise BrokerStateUnsafe(f"{what} {real} does not exist", f"create {real} with mode 0700") from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in owners or info.st_mode & 0o022:
        raise BrokerStateUnsafe(
            f"{what} {real} (mode {stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid}) can be changed by "
            "other users, who could replace what the broker keeps there",
            f"use a directory owned by the broker's user and not writable by others (chmod go-w {real})",
        )
    for ancestor in real.parents:
        info = os.lstat(ancestor)
        if info.st_mode & 0o002 and not info.st_mode & stat.S_ISVTX:
            raise BrokerStateUnsafe(
                f"{ancestor}, above {what} {real}, is writable by everyone without the sticky bit",
                f"move the broker's files under a directory no other user can rename (chmod o-w {ancestor})",
            )


def _make_private_file(path: str, *, create: bool) -> None:
    """Create ``path`` 0600 (without following a symlink), or set an existing one to 0600."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), _DB_MODE)
    except FileNotFoundError:
        return  # a side file that does not exist (yet): SQLite creates it with the database's mode
    except OSError as exc:
        raise BrokerStateUnsafe(
            f"cannot open the broker database file {path} safely: {exc.strerror}",
            "it must be a regular file, not a symlink",
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BrokerStateUnsafe(f"{path} is not a regular file", "remove it; the broker creates its files")
        if stat.S_IMODE(info.st_mode) != _DB_MODE:
            os.fchmod(fd, _DB_MODE)
    finally:
        os.close(fd)


class SqliteStore(Store):
    """SQLite in WAL mode with synchronous=FULL (durable at every commit); files 0600 (module docstring)."""

    name = "sqlite"

    def __init__(self, path: str, *, max_batch: int = 64, instance_wait_s: float = 5.0) -> None:
        super().__init__(max_batch=max_batch, instance_wait_s=instance_wait_s)
        self.path = path
        self.lock_path = path + "-broker.lock"
        self._lock_fd: int | None = None

    def start(self) -> None:
        """Make the database's directory and files private, then start (see ``Store.start``).

        Raises:
            BrokerStateUnsafe: the directory can be changed by others, or a file is not regular.
            LedgerInUse: another broker holds this store.
        """
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.lexists(directory):
            os.makedirs(directory, mode=0o700)
        check_private_directory(directory, what="the broker database's directory")
        _make_private_file(self.path, create=True)
        for suffix in _SIDE_FILES:
            _make_private_file(self.path + suffix, create=False)
        super().start()

    def _try_lock_instance(self) -> str | None:
        if self._lock_fd is None:
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock_fd, 32, 0).decode(errors="replace").strip()
            return f"{self.lock_path} is locked by pid {holder or '?'}"
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)
        return None

    def _unlock_instance(self) -> None:
        # closing drops the flock; the file stays (removing it would race a broker taking it)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _connect(self) -> Any:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return _SqliteConn(conn)

    def _begin(self, conn: Any, cursor: Any) -> None:
        cursor.execute("BEGIN IMMEDIATE")


class _SqliteConn:
    """sqlite3 in autocommit mode with explicit BEGIN, so SAVEPOINTs behave as in PostgreSQL."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def cursor(self) -> sqlite3.Cursor:
        return self._conn.cursor()

    def commit(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()

