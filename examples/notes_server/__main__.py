"""Run the notes server: ``python -m examples.notes_server --transport stdio|http``."""

import argparse

from .server import server


def main() -> None:
    parser = argparse.ArgumentParser(description="A resolvent-powered MCP notes server.")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
