"""One SQLite file and the connections to it, for `SqliteStore`: the pool, the watch for a
file removed or replaced under them, the tables, and each operation run in a worker thread,
waiting for another connection's write lock within *busy_timeout*. A file that cannot be
used, or a lock held too long, is `StoreUnavailable`."""

from __future__ import annotations

import contextlib
import math
import os
import queue
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio.to_thread

from .._vocabulary.errors import StoreUnavailable

__all__ = ("GONE", "SqliteFile")

T = TypeVar("T")

GONE: Any = object()  # a lease request that got the write lock after its caller gave up
_ATTEMPT = 0.05  # seconds one statement waits inside SQLite for another writer

_FIX = (
    "check that the file and its directory exist and are readable and writable by this "
    "process, and that the file is a SQLite database; calls succeed again as soon as it "
    "opens"
)


def _busy(exc: sqlite3.Error) -> bool:
    """Whether *exc* is SQLITE_BUSY or SQLITE_LOCKED (another connection's lock)."""
    code = getattr(exc, "sqlite_errorcode", None)  # None on the sqlite3 module's own
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


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


class SqliteFile:
    """The database at *path* (named *name* in messages), its tables made by the
    statements of *schema*; *clock* is the store's, for the deadlines of lease requests.

    A connection that met a file it cannot use is closed with every idle one; the next
    operation opens the file again (and its tables, if the file is new).
    """

    def __init__(
        self,
        path: str,
        name: str,
        schema: Sequence[str],
        clock: Callable[[], float],
        busy_timeout: float,
    ) -> None:
        self.path, self.name, self.busy_timeout = path, name, busy_timeout
        self._schema = schema
        self._clock = clock
        self._watch = not path.startswith("file:")  # a URI names no file os.stat finds
        self._pool: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # The file each pooled connection has open (device, inode), to notice a file
        # removed or replaced under it; and whether a connection was lost since the store
        # opened (a new connection then makes sure the tables exist).
        self._opened: dict[int, tuple[int, int]] = {}
        self._repair = False

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=min(self.busy_timeout, _ATTEMPT),  # longer waits: see run
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
        """Close *conn*, which met a file it cannot use, and the idle connections beside
        it, which have the same file open: the next operation opens anew, so the first
        call after the file is back works, whichever connection it would have taken."""
        self._repair = True
        lost = [conn]
        with contextlib.suppress(queue.Empty):
            while True:
                lost.append(self._pool.get_nowait())
        for each in lost:
            self._opened.pop(id(each), None)
            with self._lock:
                if each in self._all:
                    self._all.remove(each)
            with contextlib.suppress(sqlite3.Error):  # closing what is already broken
                each.close()

    def _check(self, conn: sqlite3.Connection) -> None:
        """Refuse a file removed or replaced since *conn* opened it: SQLite would go on
        writing to the removed one, which no other connection (nor a restart) sees."""
        if not self._watch:  # a URI: no path of a file to watch
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

    def unavailable(self, exc: sqlite3.Error) -> StoreUnavailable:
        """*exc* as the store's error, naming the file and the cause."""
        if _busy(exc):
            return StoreUnavailable(
                self.name,
                f"{_line(exc)} (another connection held the write lock for longer than "
                f"busy_timeout={self.busy_timeout:g} s)",
                "find the process that holds the file's write lock for so long, or raise "
                "SqliteStore's busy_timeout",
            )
        return StoreUnavailable(self.name, _line(exc), _FIX)

    def setup(self) -> None:
        """Open the file and make its tables."""
        conn = self._connect()
        try:
            # Several workers may open one new file at once. Switching it to WAL fails
            # at once with SQLITE_BUSY, without the busy timeout, while another process
            # holds a write lock on it (creating the schema before its own switch took
            # effect), so the setup itself waits and tries again within *busy_timeout*.
            deadline = time.monotonic() + self.busy_timeout
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

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        if mode not in ("wal", "memory"):  # not switched: another connection held it
            locked = sqlite3.OperationalError(f"database is locked (journal mode {mode}, not wal)")
            locked.sqlite_errorcode = sqlite3.SQLITE_BUSY  # busy, as SQLite's own says
            raise locked
        # One write transaction taken up front (BEGIN IMMEDIATE waits for the busy
        # timeout); a read upgraded to a write could fail at once with SQLITE_BUSY.
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in self._schema:
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def using(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(connection, *args)` on a pooled connection, in the calling thread."""
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

    async def run(self, fn: Callable[..., T], *args: Any, leasing: bool = False) -> T:
        """`using(fn, *args)` in a worker thread.

        A thread is not abandoned on cancellation (a transaction that started finishes),
        so one attempt waits at most _ATTEMPT for another connection's write lock inside
        SQLite; the wait between attempts is this task's own and ends when the call is
        cancelled (its call_timeout), up to *busy_timeout* in all. A file that cannot be
        used, or a lock held past *busy_timeout*, is `StoreUnavailable`.

        *leasing*: *fn* takes one more argument, the moment the caller stops waiting (on
        the store's clock), and answers `GONE` if it got the write lock later than that,
        having taken nothing: the caller is gone, and nobody would hold or release it.
        """
        give_up: float | None = None
        pause = 0.001
        while True:
            try:
                if not leasing:
                    return await anyio.to_thread.run_sync(self.using, fn, *args)
                asking: tuple[Any, ...] = (*args, self._gives_up())
                found = await anyio.to_thread.run_sync(self.using, fn, *asking)
                if found is not GONE:
                    return found
                # The caller's deadline passed: its cancellation comes with the pause
                # below (or, on a wall clock that jumped ahead, the next attempt).
            except sqlite3.Error as exc:
                if not _busy(exc):
                    if _lost(exc):
                        raise self.unavailable(exc) from exc
                    raise
                now = anyio.current_time()
                if give_up is None:
                    give_up = now + self.busy_timeout - _ATTEMPT
                elif now >= give_up:
                    raise self.unavailable(exc) from exc
            await anyio.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.02)

    def _gives_up(self) -> float:
        """When the caller of the operation under way stops waiting for its answer (its
        deadline: a call_timeout, a cancel scope's), on the store's clock."""
        left = anyio.current_effective_deadline() - anyio.current_time()
        return math.inf if left == math.inf else self._clock() + left

    def close(self) -> None:
        """Close every connection."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
