"""The notes MCP server and a small HTTP API in one FastAPI app, on one container.

- ``/mcp``: the notes MCP server over streamable HTTP, as `create_app` serves it.
- ``GET /notes``: every note as JSON; the route is the very `list_notes` the MCP tool runs.
- ``GET /notes/{note_id}``: one note, or 404.
- ``GET /health``: whether the database answers, and how many notes it holds.

One container, one APP scope: the app's lifespan opens the container first, then runs the
MCP session manager (whose server lifespan enters the same, reference-counted APP scope),
so the SQLite database opens once, on first use by either side, and closes once, when the
app shuts down. Run it with ``python -m examples.notes_server.web [--db PATH]``.
"""

import argparse
import sqlite3
from contextlib import AbstractAsyncContextManager
from typing import Annotated

try:
    import fastapi  # noqa: F401  (what this example needs beyond the notes server)
except ModuleNotFoundError:
    raise SystemExit('This example needs FastAPI: pip install ".[mcp,fastapi]".') from None

from fastapi import FastAPI, HTTPException

from resolvent import Container, Resolve
from resolvent.starlette import inject

from .providers import Note, database, list_notes
from .server import SESSION_IDLE_TIMEOUT, create_server

__all__ = ("create_web_app",)


def create_web_app(
    db: str | None = None, *, state_key: str | bytes | None = None
) -> tuple[FastAPI, Container]:
    """The web app and the container its MCP tools and HTTP routes share.

    Args:
        db: a SQLite file for the notes (default: in memory, gone at shutdown).
        state_key: see `create_server`.
    """
    server, container = create_server(db, state_key=state_key)
    mcp_app = server.streamable_http_app(session_idle_timeout=SESSION_IDLE_TIMEOUT)

    def run_mcp(app: FastAPI) -> AbstractAsyncContextManager[None]:
        # A mounted app's lifespan does not run by itself: the MCP session manager runs here.
        return mcp_app.router.lifespan_context(mcp_app)

    app = FastAPI(title="notes", lifespan=container.wrap_lifespan(run_mcp))
    app.get("/notes")(inject(container)(list_notes))

    @app.get("/notes/{note_id}")
    @inject(container)
    async def get_note(note_id: int, db: Annotated[sqlite3.Connection, Resolve(database)]) -> Note:
        """One note by id."""
        row = db.execute("select text, author from notes where id = ?", (note_id,)).fetchone()
        if row is None:
            raise HTTPException(status_code=404, detail=f"there is no note {note_id}")
        return Note(id=note_id, text=row[0], author=row[1])

    @app.get("/health")
    @inject(container)
    def health(db: Annotated[sqlite3.Connection, Resolve(database)]) -> dict[str, object]:
        """Whether the database answers."""
        (count,) = db.execute("select count(*) from notes").fetchone()
        return {"status": "ok", "notes": count}

    app.mount("/", mcp_app)  # last: the routes above come first, then /mcp
    return app, container


def main() -> None:
    from ..serving import serve

    parser = argparse.ArgumentParser(description="The notes MCP server with an HTTP API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--db", metavar="PATH", help="SQLite file (default: in memory)")
    args = parser.parse_args()
    app, _ = create_web_app(args.db)
    serve(app, name="notes web app (API: /notes, /health, /docs)", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
