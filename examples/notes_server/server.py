"""A small notes server: resolvent scopes mapped onto MCP.

- APP: one embedded SQLite database (stdlib ``sqlite3``), opened lazily on first use and
  closed when the server shuts down.
- SESSION: a writer identity, one per MCP session (per connection on stdio and stateful
  HTTP; per request for 2026-07-28 clients, which have no sessions).
- CALL: a transaction per ``tools/call`` (committed on success, rolled back on error, always
  before the reply), and a confirmation question asked before anything is deleted.

Safe to replay: on protocol 2026-07-28 a client may send a round again (same answers, same
request state) while its state is valid. Ids are never reused, and the confirmation names
the note's text; an answer only counts for the exact question it answered, so a stale
answer cannot delete a different note.

The providers live in `providers.py`, free of MCP, and ``examples/notes_cli.py`` reuses
them without any framework. `create_server` builds a fresh server and container; the
module-level ``server`` is one of them. Each scope logs its lifecycle at DEBUG level on
`logger` (the demo, ``examples/demo.py``, prints those lines).
"""

import os
import sqlite3
from typing import Annotated, Any

try:
    import mcp  # noqa: F401  (the first thing this example needs beyond resolvent)
except ModuleNotFoundError:
    raise SystemExit(
        'This example needs the MCP SDK: pip install ".[mcp]" (or run python3 dev.py demo).'
    ) from None

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import RequestStateSecurity

from resolvent import Accepted, Container, Elicit, ElicitationResult, Resolve, Scope
from resolvent.mcp import inject

from .providers import (
    Confirm,
    Note,
    Storage,
    add_note,
    database,
    in_memory,
    list_notes,
    logger,
    transaction,
    writer,
)

__all__ = (
    "SESSION_IDLE_TIMEOUT",
    "Confirm",
    "Note",
    "Storage",
    "add_note",
    "create_app",
    "create_server",
    "database",
    "list_notes",
    "logger",
    "server",
    "transaction",
    "writer",
)


SESSION_IDLE_TIMEOUT = 30.0
"""Seconds before the HTTP transport closes a silent session (the SDK's default is 30
minutes): a vanished client's SESSION and CALL resources close soon after it goes."""


async def confirm_delete(
    note_id: int, ctx: Context, db: Annotated[sqlite3.Connection, Resolve(database)]
) -> Elicit[Confirm]:
    """Ask the user before deleting (over whichever protocol the client speaks).

    Check first, then ask: the question is asked before `delete_note`'s body runs, so a
    note that is not there is refused here, and nobody is asked to confirm deleting it.
    The question names the note's text: an answer is pinned to the exact question it
    answered, so it can never confirm deleting something the user did not see.
    """
    row = db.execute("select text from notes where id = ?", (note_id,)).fetchone()
    if row is None:
        # Context reaches resolvers by type; MCP log messages are deprecated from
        # 2026-07-28 on, so this one logs on the server.
        logger.info("request %s: there is no note %s, nothing to ask", ctx.request_id, note_id)
        raise ToolError(f"there is no note {note_id}")
    # No log line here: on 2026-07-28 this runs again in the round that brings the answer.
    return Elicit(f"Delete note {note_id}: {row[0]!r}?", Confirm)


async def delete_note(
    note_id: int,
    answer: Annotated[ElicitationResult[Confirm], Resolve(confirm_delete)],
    tx: Annotated[sqlite3.Connection, Resolve(transaction)],
) -> str:
    """Delete a note after the user confirms."""
    if not isinstance(answer, Accepted) or not answer.data.confirm:
        logger.info("note %s kept: the user said no", note_id)
        return f"kept note {note_id}"
    # Checked again: another call may have deleted it while the user was answering.
    if tx.execute("delete from notes where id = ?", (note_id,)).rowcount == 0:
        raise ToolError(f"there is no note {note_id}")
    logger.info("note %s deleted: the user said yes", note_id)
    return f"deleted note {note_id}"


def create_server(
    db: str | None = None, *, state_key: str | bytes | None = None
) -> tuple[MCPServer, Container]:
    """A fresh notes server and the container behind its tools.

    Args:
        db: a SQLite file for the notes (default: in memory, gone at shutdown).
        state_key: a secret shared by every worker process serving this server, so that
            any of them can continue a 2026-07-28 round another one started (default: a
            key of this process only).
    """
    container = Container()
    if db is None:
        container.provide(in_memory, scope=Scope.APP, inline=True)
    else:
        path = db

        def storage() -> Storage:
            return Storage(path)

        container.provide(storage, scope=Scope.APP, inline=True)
    container.provide(database, scope=Scope.APP, inline=True)
    container.provide(writer, scope=Scope.SESSION, inline=True)
    container.provide(transaction, inline=True)
    security = None if state_key is None else RequestStateSecurity(keys=[state_key])
    server = MCPServer(
        "notes",
        lifespan=container.lifespan,
        request_state_security=security,
        # Quiet unless asked (examples/serving.py): no INFO line per session and request.
        log_level=os.environ.get("LOG_LEVEL", "WARNING").upper(),  # type: ignore[arg-type]
    )
    for tool in (add_note, list_notes, delete_note):
        server.tool()(inject(container)(tool))
    return server, container


def create_app(
    db: str | None = None, *, state_key: str | bytes | None = None, stateless: bool = False
) -> Any:
    """The notes server as a streamable-HTTP ASGI app (for uvicorn, or to mount);
    *stateless* for worker processes sharing one port (see `app_from_environment`)."""
    server, _ = create_server(db, state_key=state_key)
    if stateless:
        return server.streamable_http_app(stateless_http=True)
    return server.streamable_http_app(session_idle_timeout=SESSION_IDLE_TIMEOUT)


def app_from_environment() -> Any:
    """`create_app` configured by ``NOTES_DB`` and ``NOTES_STATE_KEY``: the factory each
    uvicorn worker calls (``uvicorn --factory examples.notes_server.server:app_from_environment``).

    Stateless: the workers share one port, so a client's requests land on any of them,
    and none keeps an MCP session another would need. Every tool works for every client;
    delete_note's question reaches clients on 2026-07-28 (its rounds go to any worker) but
    not older ones, which need a stateful server to be asked mid-call.
    """
    db, key = os.environ.get("NOTES_DB"), os.environ.get("NOTES_STATE_KEY")
    return create_app(db, state_key=key, stateless=True)


server, container = create_server()
