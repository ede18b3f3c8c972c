"""`SqliteStore`: state in a SQLite file, shared by the processes of one host."""

from __future__ import annotations

import contextlib
import math
import os
import queue
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

from .._vocabulary.errors import StateConflict, StoreUnavailable
from . import StateKey

__all__ = ("SqliteStore",)

T = TypeVar("T")

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
)""",
    "CREATE INDEX IF NOT EXISTS resolvent_receipt_expires ON resolvent_receipt (expires)",
)
_WHERE = "kind = ? AND owner = ? AND handle = ?"
_BUSY: Any = object()
_GONE: Any = object()  # a lease request that got the write lock after its caller gave up
_ATTEMPT = 0.05  # seconds one statement waits inside SQLite for another writer


_FIX = (
    "check that the file and its directory exist and are readable and writable by this "
    "process, and that the file is a SQLite database; calls succeed again as soon as it "
    "opens"
)


def _busy(exc: sqlite3.Error) -> bool:
    """Whether *exc* is SQLITE_BUSY or SQLITE_LOCKED (another connection's lock)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # not set on errors raised by this module
        return "locked" in str(exc) or "busy" in str(exc)
    return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _lost(exc: sqlite3.Error) -> bool:
    """Whether *exc* says the file cannot be used (missing, unreadable, not a database, a
    disk I/O error): not a mistake in the statement, nor another connection's lock."""
    if not isinstance(exc, sqlite3.DatabaseError) or _busy(exc):
        return False
    mistakes = (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.DataError)
    return not isinstance(exc, mistakes)


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


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
        busy_timeout: float = 3.0,
        sweep: float = 1.0,
    ) -> None:
        self.path = path
        self.name = f"sqlite:///{path}"
        """The store as messages name it: its URL."""
        self._watch = path not in ("", ":memory:") and not path.startswith("file:")
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._sweep_every = sweep
        self._pool: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        # The file each pooled connection has open (device, inode), to notice a file
        # removed or replaced under it; and whether a connection was lost since the store
        # opened (a new connection then makes sure the tables exist).
        self._opened: dict[int, tuple[int, int]] = {}
        self._repair = False

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 3.0,
        sweep: float = 1.0,
    ) -> SqliteStore:
        """Open (and create) the database at *path*, and start sweeping it.

        Raises:
            StoreUnavailable: the file cannot be opened as a database, or another
                connection kept it locked past *busy_timeout* (the message names the
                file and the cause).
        """
        store = cls(path, clock=clock, busy_timeout=busy_timeout, sweep=sweep)
        try:
            await anyio.to_thread.run_sync(store._setup)
        except sqlite3.Error as exc:
            await store.aclose()
            raise store._unavailable(exc) from exc
        store._sweeper = threading.Thread(
            target=store._sweep_loop, name="resolvent-sqlite-sweep", daemon=True
        )
        store._sweeper.start()
        return store

    # -- connections -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=min(self._busy_timeout, _ATTEMPT),  # longer waits: see _run
            isolation_level=None,  # transactions are explicit: BEGIN IMMEDIATE
            check_same_thread=False,  # pooled: used by one worker thread at a time
        )
        try:
            conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            conn.close()
            raise
        with self._lock:
            self._all.append(conn)
        return conn

    def _discard(self, conn: sqlite3.Connection) -> None:
        """Close *conn*, which met a file it cannot use; the next operation opens anew."""
        self._repair = True
        self._opened.pop(id(conn), None)
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        with contextlib.suppress(sqlite3.Error):  # closing what is already broken
            conn.close()

    def _check(self, conn: sqlite3.Connection) -> None:
        """Refuse a file removed or replaced since *conn* opened it: SQLite would go on
        writing to the removed one, which no other connection (nor a restart) sees."""
        if not self._watch:  # in memory, or a URI: no file of its own to watch
            return
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise sqlite3.OperationalError(
                f"the database file is gone ({exc.strerror or type(exc).__name__})"
            ) from exc
        known = self._opened.get(id(conn))
        if known is None:
            if self._repair:  # a new file after a lost one: its tables first
                self._create_schema(conn)
            self._opened[id(conn)] = (st.st_dev, st.st_ino)
        elif known != (st.st_dev, st.st_ino):
            raise sqlite3.OperationalError(
                "the database file was removed or replaced since this connection opened it"
            )

    def _unavailable(self, exc: sqlite3.Error) -> StoreUnavailable:
        if _busy(exc):
            return StoreUnavailable(
                self.name,
                f"{_line(exc)} (another connection held the write lock for longer than "
                f"busy_timeout={self._busy_timeout:g} s)",
                "find the process that holds the file's write lock for so long, or raise "
                "SqliteStore's busy_timeout",
            )
        return StoreUnavailable(self.name, _line(exc), _FIX)

    def _setup(self) -> None:
        conn = self._connect()
        try:
            # Several workers may open one new file at once. Switching it to WAL fails
            # at once with SQLITE_BUSY, without the busy timeout, while another process
            # holds a write lock on it (creating the schema before its own switch took
            # effect), so the setup itself waits and tries again within *busy_timeout*.
            deadline = time.monotonic() + self._busy_timeout
            pause = 0.005
            while True:
                try:
                    self._create_schema(conn)
                    return
                except sqlite3.OperationalError as exc:
                    if not _busy(exc) or time.monotonic() + pause > deadline:
                        raise
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
        finally:
            self._pool.put(conn)

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        if mode not in ("wal", "memory"):  # not switched: another connection held it
            raise sqlite3.OperationalError(f"database is locked (journal mode {mode}, not wal)")
        # One write transaction taken up front (BEGIN IMMEDIATE waits for the busy
        # timeout); a read upgraded to a write could fail at once with SQLITE_BUSY.
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _with(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            conn = self._pool.get_nowait()
        except queue.Empty:
            conn = self._connect()
        try:
            self._check(conn)
            result = fn(conn, *args)
        except sqlite3.Error as exc:
            if _lost(exc):
                self._discard(conn)
            else:
                self._pool.put(conn)
            raise
        except BaseException:
            self._pool.put(conn)
            raise
        self._pool.put(conn)
        return result

    async def _run(self, fn: Callable[..., T], *args: Any, leasing: bool = False) -> T:
        # A thread is not abandoned on cancellation (a transaction that started finishes),
        # so one attempt waits at most _ATTEMPT for another connection's write lock inside
        # SQLite; the wait between attempts is this task's own and ends when the call is
        # cancelled (its call_timeout), up to busy_timeout in all.
        # A file that cannot be used, or a lock held past busy_timeout, is StoreUnavailable.
        # *leasing*: *fn* takes one more argument, the moment the caller stops waiting (on
        # the store's clock), and answers _GONE if it got the write lock later than that,
        # having taken nothing: the caller is gone, and nobody would hold or release it.
        give_up: float | None = None
        pause = 0.001
        while True:
            try:
                if not leasing:
                    return await anyio.to_thread.run_sync(self._with, fn, *args)
                asking: tuple[Any, ...] = (*args, self._gives_up())
                found = await anyio.to_thread.run_sync(self._with, fn, *asking)
                if found is not _GONE:
                    return found
                # The caller's deadline passed: its cancellation comes with the pause
                # below (or, on a wall clock that jumped ahead, the next attempt).
            except sqlite3.Error as exc:
                if not _busy(exc):
                    if _lost(exc):
                        raise self._unavailable(exc) from exc
                    raise
                now = anyio.current_time()
                if give_up is None:
                    give_up = now + self._busy_timeout - _ATTEMPT
                elif now >= give_up:
                    raise self._unavailable(exc) from exc
            await anyio.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.02)

    def _gives_up(self) -> float:
        """When the caller of the operation under way stops waiting for its answer (its
        deadline: a call_timeout, a cancel scope's), on the store's clock."""
        left = anyio.current_effective_deadline() - anyio.current_time()
        return math.inf if left == math.inf else self._clock() + left

    # -- the protocol --------------------------------------------------------------------

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        """Store a new value (see `StateStore.create`)."""
        await self._run(self._create, key, data, idle, lifetime)

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
        found = await self._run(self._load, key, idle, token, lease, None, leasing=lease > 0)
        if found is _BUSY:
            raise StateConflict(f"{key.kind} {key.handle!r} is leased by another call")
        return found  # type: ignore[no-any-return]

    async def load_recalling(
        self, key: StateKey, idle: float, token: str, lease: float, name: str
    ) -> tuple[bytes | None, bytes | None]:
        """`load`, and the result a save kept under *name* (see `recall`), in one
        transaction."""
        found = await self._run(self._load, key, idle, token, lease, name, leasing=lease > 0)
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
                return _GONE
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
        return await self._run(self._renew, key, token, lease)

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
            return await self._run(self._save, key, idle, token, data, delete)
        return await self._run(self._save_remembering, key, idle, token, data, delete, remember)

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
        return await self._run(self._recall, key, name)

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
                self._with(self._sweep)
            except sqlite3.Error:  # busy past the timeout, or closed: the next sweep tries
                continue

    def _sweep(self, conn: sqlite3.Connection) -> int:
        now = self._clock()
        conn.execute("DELETE FROM resolvent_receipt WHERE expires <= ?", (now,))
        cursor = conn.execute("DELETE FROM resolvent_state WHERE expires <= ?", (now,))
        return cursor.rowcount

    async def sweep(self) -> int:
        """Delete expired rows now; returns how many. The store also does it by itself."""
        return await self._run(self._sweep)

    async def aclose(self) -> None:
        """Stop sweeping and close every connection."""
        self._stop.set()
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            await anyio.to_thread.run_sync(sweeper.join)
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
