"""`SqliteStore`: state in a SQLite file, shared by the processes of one host."""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio.to_thread

from .._vocabulary.errors import StateConflict
from . import StateKey
from .sqlite_file import GONE, SqliteFile

__all__ = ("SqliteStore",)

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS resolvent_state (
    kind TEXT NOT NULL,
    owner TEXT NOT NULL,
    handle TEXT NOT NULL,
    data BLOB NOT NULL,
    expires REAL NOT NULL,
    deadline REAL NOT NULL,
    lease TEXT NOT NULL DEFAULT '',
    lease_until REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, owner, handle)
)""",
    "CREATE INDEX IF NOT EXISTS resolvent_state_expires ON resolvent_state (expires)",
    """
CREATE TABLE IF NOT EXISTS resolvent_receipt (
    kind TEXT NOT NULL,
    owner TEXT NOT NULL,
    handle TEXT NOT NULL,
    name TEXT NOT NULL,
    result BLOB NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (kind, owner, handle, name)
) WITHOUT ROWID""",  # a receipt is one B-tree (and WAL page) of the save, not two
    "CREATE INDEX IF NOT EXISTS resolvent_receipt_expires ON resolvent_receipt (expires)",
)
_WHERE = "kind = ? AND owner = ? AND handle = ?"
_BUSY: Any = object()
# The defaults docs/state.md names: the wait for another writer, and the sweep interval.
_BUSY_TIMEOUT = 3.0
_SWEEP = 1.0


class SqliteStore:
    """State in one SQLite file: several worker processes of one host share it.

    Each operation is one short ``BEGIN IMMEDIATE`` transaction in a worker thread
    (``sqlite3`` blocks; this runs on asyncio and trio alike), so it is atomic against
    every other process; a save is a compare-and-set on the lease in SQL. The file is in
    WAL mode, and a connection waits up to *busy_timeout* for another writer; a lease
    request that gets the write lock only after its caller's deadline (a call_timeout
    that struck meanwhile) takes nothing. A thread of the store deletes expired rows
    every *sweep* seconds.

    A file that cannot be used (its directory gone, the file removed or replaced, not a
    database, a disk I/O error), or a write lock another connection holds past
    *busy_timeout*, fails the operation with `resolvent.StoreUnavailable`, naming the
    file and the cause. The connection that met it is closed; the next operation opens
    the file again (and its tables, if the file is new), so the store serves again as
    soon as the file is back.

    Open it with ``await SqliteStore.open(path)`` or ``open_store("sqlite:///path")``,
    and close it with `aclose`.

    Args:
        path: the database file (created if missing).
        clock: wall-clock seconds shared by the processes (default `time.time`).
        busy_timeout: seconds to wait for another process's write transaction (3 by
            default, like `RedisStore`'s timeout).
        sweep: seconds between sweeps of expired rows.
    """

    def __init__(
        self,
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = _BUSY_TIMEOUT,
        sweep: float = _SWEEP,
    ) -> None:
        if path in ("", ":memory:"):
            raise ValueError(
                f"SqliteStore({path!r}): an in-memory SQLite database belongs to one "
                "connection, and the store opens one per worker thread: each would see an "
                "empty database of its own.\n"
                '  fix: use MemoryStore (store="memory:") for state in this process, or a '
                'file: SqliteStore.open("state.db")'
            )
        self.path = path
        self.name = f"sqlite:///{path}"
        """The store as messages name it: its URL."""
        self._clock = clock
        self._file = SqliteFile(path, self.name, _SCHEMA, clock, busy_timeout)
        self._sweep_every = sweep
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = _BUSY_TIMEOUT,
        sweep: float = _SWEEP,
    ) -> SqliteStore:
        """Open (and create) the database at *path*, and start sweeping it.

        Raises:
            ValueError: *path* is ``""`` or ``":memory:"`` (use `MemoryStore`).
            StoreUnavailable: the file cannot be opened as a database, or another
                connection kept it locked past *busy_timeout* (the message names the
                file and the cause).
        """
        store = cls(path, clock=clock, busy_timeout=busy_timeout, sweep=sweep)
        try:
            await anyio.to_thread.run_sync(store._file.setup)
        except sqlite3.Error as exc:
            await store.aclose()
            raise store._file.unavailable(exc) from exc
        store._sweeper = threading.Thread(
            target=store._sweep_loop, name="resolvent-sqlite-sweep", daemon=True
        )
        store._sweeper.start()
        return store

    # -- the protocol --------------------------------------------------------------------

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        """Store a new value (see `StateStore.create`)."""
        await self._file.run(self._create, key, data, idle, lifetime)

    def _create(
        self, conn: sqlite3.Connection, key: StateKey, data: bytes, idle: float, lifetime: float
    ) -> None:
        now = self._clock()
        deadline = now + lifetime
        conn.execute(
            "INSERT INTO resolvent_state (kind, owner, handle, data, expires, deadline) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (*key, data, min(now + idle, deadline), deadline),
        )

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        """The value, optionally leased (see `StateStore.load`)."""
        found = await self._file.run(self._load, key, idle, token, lease, None, leasing=lease > 0)
        if found is _BUSY:
            raise StateConflict(f"{key.kind} {key.handle!r} is leased by another call")
        return found  # type: ignore[no-any-return]

    async def load_recalling(
        self, key: StateKey, idle: float, token: str, lease: float, name: str
    ) -> tuple[bytes | None, bytes | None]:
        """`load`, and the result a save kept under *name* (see `recall`), in one
        transaction."""
        found = await self._file.run(self._load, key, idle, token, lease, name, leasing=lease > 0)
        if found is _BUSY:
            raise StateConflict(f"{key.kind} {key.handle!r} is leased by another call")
        return found  # type: ignore[no-any-return]

    def _load(
        self,
        conn: sqlite3.Connection,
        key: StateKey,
        idle: float,
        token: str,
        lease: float,
        name: str | None = None,
        gives_up: float = math.inf,
    ) -> Any:
        conn.execute("BEGIN IMMEDIATE")
        try:
            now = self._clock()
            if now > gives_up:  # the write lock came after the caller gave up: take nothing
                conn.execute("ROLLBACK")
                return GONE
            row = conn.execute(
                f"SELECT data, expires, deadline, lease, lease_until FROM resolvent_state "
                f"WHERE {_WHERE}",
                key,
            ).fetchone()
            if row is None:
                found = None
            else:
                data, expires, deadline, held, until = row
                if expires <= now:
                    conn.execute(f"DELETE FROM resolvent_state WHERE {_WHERE}", key)
                    found = None
                elif held and held != token and until > now:
                    found = _BUSY
                else:
                    # Not idle while leased: an edit outlasting idle_ttl keeps its value.
                    if lease > 0:
                        until = now + lease
                        conn.execute(
                            "UPDATE resolvent_state SET expires = ?, lease = ?, lease_until = ? "
                            f"WHERE {_WHERE}",
                            (min(max(now + idle, until), deadline), token, until, *key),
                        )
                    else:
                        conn.execute(
                            f"UPDATE resolvent_state SET expires = ? WHERE {_WHERE}",
                            (min(max(now + idle, until), deadline), *key),
                        )
                    found = data
            if name is not None and found is not _BUSY:
                kept = None
                if found is not None:
                    kept = conn.execute(
                        f"SELECT result FROM resolvent_receipt WHERE {_WHERE} AND name = ? "
                        "AND expires > ?",
                        (*key, name, now),
                    ).fetchone()
                found = (found, None if kept is None else bytes(kept[0]))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return found

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        """Extend the lease while *token* holds it (see `StateStore.renew`)."""
        return await self._file.run(self._renew, key, token, lease)

    def _renew(self, conn: sqlite3.Connection, key: StateKey, token: str, lease: float) -> bool:
        now = self._clock()
        cursor = conn.execute(
            "UPDATE resolvent_state SET lease_until = ?, expires = min(max(expires, ?), deadline) "
            f"WHERE {_WHERE} AND lease = ? AND expires > ?",
            (now + lease, now + lease, *key, token, now),
        )
        return cursor.rowcount == 1

    async def save(
        self,
        key: StateKey,
        idle: float,
        token: str,
        data: bytes | None,
        delete: bool,
        remember: tuple[str, bytes, float] | None = None,
    ) -> bool:
        """End the lease, writing or deleting (see `StateStore.save`)."""
        if remember is None:
            return await self._file.run(self._save, key, idle, token, data, delete)
        return await self._file.run(
            self._save_remembering, key, idle, token, data, delete, remember
        )

    def _save_remembering(
        self,
        conn: sqlite3.Connection,
        key: StateKey,
        idle: float,
        token: str,
        data: bytes | None,
        delete: bool,
        remember: tuple[str, bytes, float],
    ) -> bool:
        # The receipt is written in the transaction of the save, or not at all.
        conn.execute("BEGIN IMMEDIATE")
        try:
            saved = self._save(conn, key, idle, token, data, delete)
            if saved:
                name, result, ttl = remember
                conn.execute(
                    "INSERT OR REPLACE INTO resolvent_receipt "
                    "(kind, owner, handle, name, result, expires) VALUES (?, ?, ?, ?, ?, ?)",
                    (*key, name, result, self._clock() + ttl),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return saved

    def _save(
        self,
        conn: sqlite3.Connection,
        key: StateKey,
        idle: float,
        token: str,
        data: bytes | None,
        delete: bool,
    ) -> bool:
        now = self._clock()
        # One statement each: the compare-and-set on the lease is SQLite's own atomic write.
        if delete:
            cursor = conn.execute(
                f"DELETE FROM resolvent_state WHERE {_WHERE} AND lease = ? AND expires > ?",
                (*key, token, now),
            )
        elif data is None:
            cursor = conn.execute(
                "UPDATE resolvent_state SET lease = '', lease_until = 0, "
                f"expires = min(?, deadline) WHERE {_WHERE} AND lease = ? AND expires > ?",
                (now + idle, *key, token, now),
            )
        else:
            cursor = conn.execute(
                "UPDATE resolvent_state SET data = ?, lease = '', lease_until = 0, "
                f"expires = min(?, deadline) WHERE {_WHERE} AND lease = ? AND expires > ?",
                (data, now + idle, *key, token, now),
            )
        return cursor.rowcount == 1

    async def recall(self, key: StateKey, name: str) -> bytes | None:
        """A result a save kept (see `StateStore.recall`)."""
        return await self._file.run(self._recall, key, name)

    def _recall(self, conn: sqlite3.Connection, key: StateKey, name: str) -> bytes | None:
        row = conn.execute(
            f"SELECT result FROM resolvent_receipt WHERE {_WHERE} AND name = ? AND expires > ?",
            (*key, name, self._clock()),
        ).fetchone()
        return None if row is None else bytes(row[0])

    # -- sweeping and closing ---------------------------------------------------------------

    def _sweep_loop(self) -> None:
        while not self._stop.wait(self._sweep_every):
            try:
                self._file.using(self._sweep)
            except sqlite3.Error:  # busy past the timeout, or closed: the next sweep tries
                continue

    def _sweep(self, conn: sqlite3.Connection) -> int:
        now = self._clock()
        conn.execute("DELETE FROM resolvent_receipt WHERE expires <= ?", (now,))
        cursor = conn.execute("DELETE FROM resolvent_state WHERE expires <= ?", (now,))
        return cursor.rowcount

    async def sweep(self) -> int:
        """Delete expired rows now; returns how many. The store also does it by itself."""
        return await self._file.run(self._sweep)

    async def aclose(self) -> None:
        """Stop sweeping and close every connection."""
        self._stop.set()
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            await anyio.to_thread.run_sync(sweeper.join)
        self._file.close()
