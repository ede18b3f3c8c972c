"""SESSION scopes for MCP: one per connection, or shared by a user-chosen key; bounded.

A connection-backed session closes when the SDK unwinds the connection's exit stack.
Every session (connection-backed or keyed) is also held in a bounded LRU table: beyond
``max_sessions``, or after ``idle_timeout`` seconds unused, an idle session is closed. The
table closes what it still holds when the container's APP scope closes.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from mcp.server.connection import Connection
from mcp.server.mcpserver import Context

from .._container import Container, Session

__all__ = ("SessionTable", "connection_of")

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
        self.last_used = time.monotonic()


class SessionTable:
    """Live SESSION scopes of one container, keyed, bounded in number and idle time."""

    def __init__(self, container: Container, max_sessions: int, idle_timeout: float) -> None:
        self.container = container
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._hooked = False

    def acquire(self, key: Hashable, connection: Connection | None) -> tuple[_Entry, list[_Entry]]:
        """The session for *key* (created if new), marked in use; and the entries to close.

        A new connection-backed session is closed when *connection* closes.
        """
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(key, self.container.session())
            if connection is not None:
                connection.exit_stack.push_async_callback(self._release_key, key, entry)
            if not self._hooked:
                self._hooked = True
                self.container.on_close(self.close_all)
        else:
            self.entries.move_to_end(key)
        entry.active += 1
        entry.last_used = now = time.monotonic()
        return entry, self._victims(now)

    def release(self, entry: _Entry) -> None:
        """Mark one use of *entry* finished."""
        entry.active -= 1
        entry.last_used = time.monotonic()

    def _victims(self, now: float) -> list[_Entry]:
        victims: list[_Entry] = []
        entries = self.entries
        over = len(entries) - self.max_sessions
        for entry in list(entries.values()):
            idle = now - entry.last_used > self.idle_timeout
            if not idle and over <= 0:
                break  # LRU order: everything after this was used more recently
            if entry.active == 0:
                del entries[entry.key]
                victims.append(entry)
                over -= 1
        return victims

    async def _release_key(self, key: Hashable, entry: _Entry) -> None:
        if self.entries.get(key) is entry:
            del self.entries[key]
        await close_entries([entry])

    async def close_all(self) -> None:
        """Close every session still held (the APP scope is closing)."""
        self._hooked = False
        entries = list(self.entries.values())
        self.entries.clear()
        await close_entries(reversed(entries))


async def close_entries(entries: Any) -> None:
    """Close sessions, logging (not raising) teardown failures."""
    for entry in entries:
        try:
            await entry.session.aclose()
        except Exception:
            logger.exception("resolvent.mcp: closing a SESSION scope failed")
