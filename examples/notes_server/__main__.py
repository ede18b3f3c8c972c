"""Run the notes server: ``python -m examples.notes_server --transport stdio|http``.

Over HTTP it prints the address to connect to and the MCP Inspector command for it
(``--port 0`` picks a free port).

``--db PATH`` keeps the notes in a SQLite file. ``--workers N`` serves HTTP from N
processes; they share the file, and the request-state key in ``NOTES_STATE_KEY`` (a random
one is made for them when it is unset), so any worker can serve any round of a call.

It logs at WARNING; ``LOG_LEVEL=INFO`` (or ``DEBUG``) shows the SDK's and uvicorn's lines.
"""

import argparse
import os
import secrets

import uvicorn

from ..serving import log_level, serve, stdio_hint, url, where
from .server import create_app, create_server


def main() -> None:
    parser = argparse.ArgumentParser(description="A resolvent-powered MCP notes server.")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--db", metavar="PATH", help="SQLite file (default: in memory)")
    parser.add_argument("--workers", type=int, default=1, help="HTTP worker processes")
    args = parser.parse_args()
    state_key = os.environ.get("NOTES_STATE_KEY")
    if args.transport == "stdio":
        server, _ = create_server(args.db, state_key=state_key)
        stdio_hint("notes server", "python -m examples.notes_server")
        server.run("stdio")
    elif args.workers == 1:
        app = create_app(args.db, state_key=state_key)
        serve(app, name="notes server", host=args.host, port=args.port)
    else:
        if args.db is None:
            parser.error("--workers needs --db: workers share notes only through a file")
        # Each worker builds its own app from the environment it inherits.
        os.environ["NOTES_DB"] = args.db
        os.environ.setdefault("NOTES_STATE_KEY", secrets.token_hex(32))
        print(where(f"notes server ({args.workers} workers)", url(args.host, args.port)))
        uvicorn.run(
            "examples.notes_server.server:app_from_environment",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=log_level().lower(),
        )


if __name__ == "__main__":
    main()
