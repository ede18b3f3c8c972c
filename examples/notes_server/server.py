"""A small notes server: resolvent scopes mapped onto MCP.

- APP: one embedded SQLite database (stdlib ``sqlite3``), opened lazily on first use and
  closed when the server shuts down.
- SESSION: a writer identity, one per MCP session (per connection on stdio and stateful
  HTTP; per request for 2026-07-28 clients, which have no sessions).
- CALL: a transaction per ``tools/call`` (committed on success, rolled back on error), and a
  confirmation question asked before anything is deleted.

The providers live in `providers.py`, free of MCP, and ``examples/notes_cli.py`` reuses
them without any framework. `create_server` builds a fresh server and container; the
module-level ``server`` is one of them. Each scope logs its lifecycle at DEBUG level on
`logger` (the demo, ``examples/demo.py``, prints those lines).
"""

import sqlite3
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from resolvent import Accepted, Container, Elicit, ElicitationResult, Resolve, Scope
from resolvent.mcp import inject

from .providers import Confirm, Note, add_note, database, list_notes, logger, transaction, writer

__all__ = (
    "Confirm",
    "Note",
    "add_note",
    "create_server",
    "database",
    "list_notes",
    "logger",
    "server",
    "transaction",
    "writer",
)


async def confirm_delete(note_id: int, ctx: Context) -> Elicit[Confirm]:
    """Ask the user before deleting (over whichever protocol the client speaks)."""
    # Context reaches resolvers by type; MCP log messages are deprecated from 2026-07-28
    # on, so this one logs on the server.
    logger.info("request %s: asking to confirm deleting note %s", ctx.request_id, note_id)
    return Elicit(f"Delete note {note_id}?", Confirm)


async def delete_note(
    note_id: int,
    answer: Annotated[ElicitationResult[Confirm], Resolve(confirm_delete)],
    tx: Annotated[sqlite3.Connection, Resolve(transaction)],
) -> str:
    """Delete a note after the user confirms."""
    if not isinstance(answer, Accepted) or not answer.data.confirm:
        return f"kept note {note_id}"
    if tx.execute("delete from notes where id = ?", (note_id,)).rowcount == 0:
        raise ToolError(f"there is no note {note_id}")
    return f"deleted note {note_id}"


def create_server() -> tuple[MCPServer, Container]:
    """A fresh notes server and the container behind its tools."""
    container = Container()
    container.provide(database, scope=Scope.APP, inline=True)
    container.provide(writer, scope=Scope.SESSION, inline=True)
    container.provide(transaction, inline=True)
    server = MCPServer("notes", lifespan=container.lifespan)
    for tool in (add_note, list_notes, delete_note):
        server.tool()(inject(container)(tool))
    return server, container


server, container = create_server()
