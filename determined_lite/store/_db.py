"""SQLite plumbing for the store: one connection per thread and process, short retried
transactions, schema migrations on open, JSON columns.

Several processes use the same file at once: the CLI in any number of terminals (readers), the
experiment runner and each trial's chief worker (writers). So:

* every write is one short ``BEGIN IMMEDIATE`` transaction (the write lock is taken up front, so
  two writers never deadlock upgrading a read lock), retried on ``database is locked`` until
  ``timeout`` seconds have passed, on top of SQLite's own ``busy_timeout``;
* multi-query reads run in one read transaction, a consistent snapshot; WAL lets them proceed
  while a writer writes;
* a process killed mid-transaction leaves no trace: SQLite rolls the WAL back on next open;
* a full volume is :class:`StoreFullError`, one line naming the directory (no traceback in the
  CLI), and an ``ActionRequired`` error: a trial that meets it is not restarted.

The file holds configs, environment variables and logs: it is created 0600 in a 0700 directory
(SQLite gives its ``-wal`` and ``-shm`` files the database file's mode), and opening a store an
older det-lite left readable by others takes those permissions away (see ``_paths.py``).

JSON columns are written with Python's ``json`` allowing ``NaN``/``Infinity`` tokens, so
non-finite metric values round-trip.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import threading
import time
import urllib.parse
from typing import Any, Callable, List, Optional, TypeVar

from determined_lite._errors import ActionRequired
from determined_lite.store import _schema
from determined_lite.store._paths import (
    DB_ENV,
    default_db_path,
    det_lite_home,
    make_private_dirs,
    open_private,
    restrict_existing,
)

T = TypeVar("T")

# SQLite's companions of the database file (write-ahead log, shared memory, rollback journal).
_DB_COMPANIONS = ("-wal", "-shm", "-journal")


class StoreError(RuntimeError):
    """The store cannot do what was asked: unreadable file, newer schema, unknown id."""


class StoreFullError(StoreError, ActionRequired):
    """The store cannot be written because its volume is full (SQLite's ``SQLITE_FULL``)."""


# SQLite's texts for SQLITE_FULL (the volume, or a size limit, is full) and SQLITE_IOERR (which
# is what it says when a full volume fails the write of its shared-memory or WAL file).
_SQLITE_FULL, _SQLITE_IOERR = "database or disk is full", "disk i/o error"
_LOW_SPACE_BYTES = 1 << 20


def _full(path: str, error: sqlite3.Error) -> Optional[StoreFullError]:
    """A :class:`StoreFullError` when ``error`` is SQLite's "full", or an I/O error on a volume
    with (almost) no space left; else None."""
    home, text = os.path.dirname(path), str(error).lower()
    if _SQLITE_FULL not in text and not (_SQLITE_IOERR in text and _low_on_space(home)):
        return None
    return StoreFullError(f"no space left on {home}: the det-lite store {path} cannot be written ({error})")


def _low_on_space(directory: str) -> bool:
    try:
        return shutil.disk_usage(directory).free < _LOW_SPACE_BYTES
    except OSError:
        return False


class NotFoundError(StoreError, KeyError):
    """An experiment, trial or checkpoint id that the store does not hold."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


def schema_version() -> int:
    """The schema version this code writes (the number of migrations)."""
    return len(_schema.MIGRATIONS)


def dumps_json(value: Any, what: str) -> str:
    """Encode a JSON column; ``what`` names the value in the error if it cannot be encoded."""
    try:
        return json.dumps(value, allow_nan=True, separators=(",", ":"), default=_json_default)
    except TypeError as e:
        raise TypeError(f"{what} must be JSON-serializable: {e}") from None


def _json_default(value: Any) -> Any:
    """numpy scalars/arrays and 0-d tensors: their Python values."""
    for attr in ("tolist", "item"):
        method = getattr(value, attr, None)
        if callable(method):
            return method()
    raise TypeError(f"{type(value).__name__} value {value!r} is not JSON-serializable")


def loads_json(text: Optional[str]) -> Any:
    """Decode a JSON column (NULL stays None)."""
    return None if text is None else json.loads(text)


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats (NaN, ±inf) as ``null``: strict JSON for the CLI's and
    the dashboard's output (the store itself keeps them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


class Database:
    """The SQLite file at ``path`` (default ``$DET_LITE_HOME/det-lite.db``), in WAL mode: the
    connections, migrations and transactions the repositories run their SQL in.

    Opening creates the directory and the database when missing and upgrades an older schema.
    Each thread (and each process after ``fork``) gets its own connection. ``read_only``: open
    an existing store of the current schema for reading only (SQLite refuses every write); it
    creates, upgrades and re-permissions nothing (``det-lite ui`` reads through one).
    """

    def __init__(self, path: Optional[str] = None, timeout: float = 30.0, read_only: bool = False) -> None:
        self.path = os.path.abspath(os.path.expanduser(path or default_db_path()))
        # The home its experiments' files are under: the store's directory, unless $DET_LITE_DB
        # put this (the default) store elsewhere.
        moved = os.environ.get(DB_ENV) and self.path == default_db_path()
        self.home = det_lite_home() if moved else os.path.dirname(self.path)
        self.timeout = float(timeout)
        self.read_only = bool(read_only)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: List[sqlite3.Connection] = []  # referenced so a fork child never closes them
        self.connection()
        if not self.read_only:
            self._restrict_files()

    def _restrict_files(self) -> None:
        """Take group and other permissions off the store's files (and off the det-lite home)."""
        if self.home == det_lite_home():
            restrict_existing(self.home)
        for path in [self.path] + [self.path + suffix for suffix in _DB_COMPANIONS]:
            restrict_existing(path)

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened, and the schema brought up to date, on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        conn = self._connect()
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._retry(lambda: self._prepare(conn))
        except BaseException as e:
            conn.close()
            if isinstance(e, sqlite3.DatabaseError):
                raise _full(self.path, e) or StoreError(
                    f"cannot open the det-lite store {self.path}: {e}"
                ) from None
            raise
        self._local.conn, self._local.pid = conn, os.getpid()
        with self._lock:
            self._open.append(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        """A new connection: read-only to an existing file, or read-write (file created 0600)."""
        target, uri = self.path, False
        if self.read_only:
            target, uri = f"file:{urllib.parse.quote(self.path)}?mode=ro", True
        else:
            try:
                make_private_dirs(os.path.dirname(self.path))
                if not os.path.exists(self.path):
                    os.close(open_private(self.path, os.O_WRONLY | os.O_CREAT))  # 0600 before SQLite opens it
            except OSError as e:
                raise StoreError(f"cannot create the det-lite store {self.path}: {e}") from None
        try:
            return sqlite3.connect(target, timeout=self.timeout, isolation_level=None, uri=uri)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the det-lite store {self.path}: {e}") from None

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """WAL mode, and the schema brought to the current version (one transaction); a
        read-only store must already be both."""
        latest = schema_version()
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > latest:
            raise StoreError(
                f"the det-lite store {self.path} has schema version {version}, newer than the "
                f"{latest} this determined_lite understands; upgrade determined_lite"
            )
        if self.read_only:
            if version != latest:
                raise StoreError(f"the det-lite store {self.path} needs an upgrade; open it read-write once")
            return
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        if version == latest:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have won
            for migration in _schema.MIGRATIONS[version:latest]:
                migration(conn)
            conn.execute(f"PRAGMA user_version = {latest}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _retry(self, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` again while SQLite says locked/busy, backing off, up to ``timeout``."""
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        while True:
            try:
                return attempt()
            except sqlite3.OperationalError as e:
                message = str(e).lower()
                if "locked" not in message and "busy" not in message:
                    full = _full(self.path, e)
                    if full is not None:
                        raise full from None
                    raise
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"the det-lite store {self.path} stayed locked for {self.timeout:g} s ({e})"
                    ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _transaction(self, body: Callable[[sqlite3.Connection], T], write: bool) -> T:
        def attempt() -> T:
            conn = self.connection()
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = body(conn)
                conn.execute("COMMIT")
                return result
            except BaseException:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise

        return self._retry(attempt)

    def write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body(conn)`` in one write transaction (``BEGIN IMMEDIATE``), retried while locked."""
        return self._transaction(body, write=True)

    def read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body(conn)`` in one read transaction: a consistent snapshot."""
        return self._transaction(body, write=False)

    def close(self) -> None:
        """Close this thread's connection (a later call opens a new one)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
            with self._lock:
                self._open.remove(conn)
        self._local.conn = None


class Repository:
    """Some of the store's tables and all the SQL that reads and writes them, over ``db``: the
    rest of det-lite never sees SQL, so another engine is another ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db
