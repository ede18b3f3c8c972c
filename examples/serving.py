"""Serve an example's ASGI app under uvicorn, and say where it is.

The socket is bound before anything is printed, so the address printed is the one listening
(``--port 0`` picks a free port and prints it). Connections that arrive before uvicorn starts
wait in the listen queue.

The example servers log at WARNING: the SDK's and uvicorn's INFO lines (each request, each
session) stay out of the way. ``LOG_LEVEL=INFO`` (or ``DEBUG``) in the environment turns them
up, in every worker process too.
"""

import os
import socket
import sys
from typing import Any


def log_level() -> str:
    """The examples' log level: ``LOG_LEVEL`` from the environment, WARNING by default (the
    servers give it to ``MCPServer(log_level=...)`` themselves)."""
    return os.environ.get("LOG_LEVEL", "WARNING").upper()


INSPECTOR = "npx @modelcontextprotocol/inspector"


def where(name: str, url: str) -> str:
    """What a server prints once it listens: its MCP endpoint and the Inspector command."""
    return (
        f"{name}: MCP over streamable HTTP at {url}\n"
        f"  list its tools:  {INSPECTOR} --cli {url} --transport http --method tools/list\n"
        f"  or run {INSPECTOR} and connect to {url} (transport: Streamable HTTP)\n"
        "  stop with Ctrl-C"
    )


def stdio_hint(name: str, command: str) -> None:
    """Started by hand in a terminal, a stdio server says what it waits for (on stderr:
    stdout carries the protocol). Started by an MCP client, it says nothing."""
    if sys.stdin.isatty():
        print(
            f"{name}: MCP over stdio, waiting for a client on stdin/stdout\n"
            f"  list its tools:  {INSPECTOR} --cli {command} --method tools/list\n"
            f"  or open it in the Inspector:  {INSPECTOR} {command}\n"
            "  stop with Ctrl-C",
            file=sys.stderr,
            flush=True,
        )


def url(host: str, port: int, path: str = "/mcp") -> str:
    """The URL a client on this machine connects to (a wildcard host means this machine)."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host)
    if shown is None:
        shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def serve(app: Any, *, name: str, host: str, port: int, path: str = "/mcp") -> None:
    """Bind *host*:*port*, print the MCP URL and the Inspector command, then run *app*."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    print(where(name, url(host, sock.getsockname()[1], path)), flush=True)
    config = uvicorn.Config(app, log_level=log_level().lower())
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        sys.exit(130)
