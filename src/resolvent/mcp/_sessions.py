"""SESSION scopes for MCP: one per connection, or shared by a user-chosen key.

A connection-backed session lives exactly as long as its connection: it is closed when the
SDK unwinds the connection's exit stack (one callback per connection), and never earlier.
The transport bounds connections (for stateful streamable HTTP, the SDK's own
``max_sessions`` and ``session_idle_timeout``), so they do not count against ours.

Keyed sessions (``session_key=``, where the protocol has no sessions) are held in a bounded
LRU table: beyond ``max_sessions`` the least recently used idle one is closed, and one left
unused for ``idle_timeout`` seconds is closed by a watcher task, with or without new
traffic. A session with a call in progress is never closed; past the bound it is closed
once its last call ends. The table closes what it still holds when the container's APP
scope closes.
"""

from __future__ import annotations

import functools
import logging
import math
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Any

import anyio
from mcp.server.connection import Connection
from mcp.server.mcpserver import Context

from .. import Container, Session
from .._integration import spawn_home

__all__ = ("SessionTable", "close_entries", "connection_of", "table_for")

logger = logging.getLogger("resolvent.mcp")

_CONNECTION_ATTRIBUTE = "_connection"


def connection_of(ctx: Context[Any, Any]) -> Connection | None:
    """The MCP connection behind *ctx*, or None outside a request.

    The SDK (2.3) offers no public route from a tool's `Context` to its `Connection`;
    the per-request `ServerSession` keeps it in a private attribute. This is the one
    place that reads it, and a test fails loudly if the SDK moves it.
    """
    try:
        session = ctx.session
    except ValueError:  # outside a request: MCPServer.call_tool() called directly
        return None
    connection = getattr(session, _CONNECTION_ATTRIBUTE, None)
    return connection if isinstance(connection, Connection) else None


class _Entry:
    __slots__ = ("active", "key", "last_used", "session")

    def __init__(self, key: Hashable, session: Session) -> None:
        self.key = key
        self.session = session
        self.active = 0
        self.last_used = anyio.current_time()


class SessionTable:
    """Live SESSION scopes of one container: by connection, and by key (bounded)."""

    def __init__(self, container: Container, max_sessions: int, idle_timeout: float) -> None:
        self.container = container
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.entries: OrderedDict[Hashable, _Entry] = OrderedDict()  # keyed, LRU first
        self.connections: dict[Hashable, _Entry] = {}
        self._hooked = False
        self._watcher: anyio.CancelScope | None = None
        self._wake: anyio.Event | None = None  # set to wake the watcher
        self._stopped: anyio.Event | None = None  # set when the watcher has finished

    def acquire(self, key: Hashable, connection: Connection | None) -> tuple[_Entry, list[_Entry]]:
        """The session for *key* (created if new), marked in use; and the entries to close.

        A session for a *connection* is closed when the connection closes, and only then.
        """
        self._hook()
        if connection is not None:
            entry = self.connections.get(key)
            if entry is None:
                entry = self.connections[key] = _Entry(key, self.container.session())
                connection.exit_stack.push_async_callback(self._release_connection, key, entry)
            entry.active += 1
            return entry, []
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(key, self.container.session())
        else:
            self.entries.move_to_end(key)
        entry.active += 1
        entry.last_used = now = anyio.current_time()
        if self._watcher is None:
            self._watcher = anyio.CancelScope()
            self._wake, self._stopped = anyio.Event(), anyio.Event()
            spawn_home(functools.partial(self._watch, self._watcher, self._stopped))
        return entry, self._victims(now)

    def release(self, entry: _Entry) -> None:
        """Mark one use of *entry* finished (whether the call succeeded or not)."""
        entry.active -= 1
        entry.last_used = anyio.current_time()
        if entry.active == 0 and self._wake is not None:
            self._wake.set()  # the watcher: a new idle deadline, or an entry over the bound

    def _hook(self) -> None:
        if not self._hooked:
            self._hooked = True
            self.container.on_close(self.close_all)

    def _victims(self, now: float) -> list[_Entry]:
        """Remove and return the keyed entries to close: idle too long, or over the bound."""
        victims: list[_Entry] = []
        entries = self.entries
        over = len(entries) - self.max_sessions
        for entry in list(entries.values()):
            idle = now - entry.last_used >= self.idle_timeout
            if not idle and over <= 0:
                break  # LRU order: everything after this was used more recently
            if entry.active == 0:
                del entries[entry.key]
                victims.append(entry)
                over -= 1
        return victims

    async def _watch(self, scope: anyio.CancelScope, stopped: anyio.Event) -> None:
        """Close idle keyed sessions on time, and busy ones past the bound once idle."""
        try:
            with scope:
                while True:
                    wake = self._wake = anyio.Event()
                    victims = self._victims(anyio.current_time())
                    if victims:
                        with anyio.CancelScope(shield=True):
                            await close_entries(victims)
                        continue
                    idle = [e.last_used for e in self.entries.values() if e.active == 0]
                    due = min(idle) + self.idle_timeout if idle else math.inf
                    with anyio.move_on_after(max(0.0, due - anyio.current_time())):
                        await wake.wait()
        finally:
            stopped.set()

    async def _release_connection(self, key: Hashable, entry: _Entry) -> None:
        if self.connections.get(key) is entry:
            del self.connections[key]
        await close_entries([entry])

    async def close_all(self) -> None:
        """Close every session still held (the APP scope is closing)."""
        self._hooked = False
        if self._watcher is not None and self._stopped is not None:
            self._watcher.cancel()
            await self._stopped.wait()  # it may be closing a session: let it finish first
            self._watcher = self._wake = self._stopped = None
        entries = [*self.connections.values(), *self.entries.values()]
        self.entries.clear()
        self.connections.clear()
        await close_entries(reversed(entries))


async def close_entries(entries: Iterable[_Entry]) -> None:
    """Close sessions, logging (not raising) teardown failures."""
    for entry in entries:
        try:
            await entry.session.aclose()
        except Exception:
            logger.exception("resolvent.mcp: closing a SESSION scope failed")


_DEFAULT_MAX_SESSIONS = 1024
_DEFAULT_IDLE_TIMEOUT = 3600.0
_tables: weakref.WeakKeyDictionary[Container, SessionTable] = weakref.WeakKeyDictionary()


def table_for(container: Container, max_sessions: int | None, idle: float | None) -> SessionTable:
    """*container*'s one table of keyed SESSION scopes, its bounds updated when given."""
    table = _tables.get(container)
    if table is None:
        table = _tables[container] = SessionTable(
            container, _DEFAULT_MAX_SESSIONS, _DEFAULT_IDLE_TIMEOUT
        )
    if max_sessions is not None:
        table.max_sessions = max_sessions
    if idle is not None:
        table.idle_timeout = idle
    return table
