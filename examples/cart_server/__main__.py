"""Run the cart server.

``python -m examples.cart_server --transport http --port PORT --store URL [--workers N]
[--tokens FILE] [--ttl SECONDS] [--lease SECONDS] [--wait SECONDS]``

``--store``: ``memory:`` (default; one process), ``sqlite:///PATH`` (four slashes before an
absolute path) or ``redis://HOST:PORT[/DB]`` (needs ``resolvent[redis]``). ``--tokens``: a
JSON object mapping bearer tokens to principal names. ``CART_STATE_KEY`` (hex, 32 bytes or
more) is the SDK's request-state key: give every server process the same one so they can
serve each other's elicitation rounds; ``--workers`` shares one among its workers.

``--lease``: seconds a cart stays locked after the process editing it died (a live edit
renews its lease); ``--wait``: seconds a call waits for another call's edit of its cart.

It logs at WARNING; ``LOG_LEVEL=INFO`` (or ``DEBUG``) shows the SDK's and uvicorn's lines.
"""

import argparse
import os
import secrets

import uvicorn

from ..serving import log_level, serve, stdio_hint, url, where
from .server import create_app, create_server


def main() -> None:
    parser = argparse.ArgumentParser(description="A resolvent shopping-cart MCP server.")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--store", default="memory:", metavar="URL", help="state store URL")
    parser.add_argument("--workers", type=int, default=1, help="HTTP worker processes")
    parser.add_argument("--tokens", metavar="FILE", help="JSON {token: principal}")
    parser.add_argument(
        "--ttl", type=float, default=3600.0, metavar="SECONDS", help="a cart's idle lifetime"
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=4.0,
        metavar="SECONDS",
        help="how long a cart stays locked after the server editing it died",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a call waits for another call's edit of its cart",
    )
    args = parser.parse_args()
    state_key = os.environ.get("CART_STATE_KEY")
    timing = {"lease": args.lease, "wait": args.wait}
    if args.transport == "stdio":
        server, _ = create_server(args.store, ttl=args.ttl, tokens=args.tokens, **timing)
        stdio_hint("cart server", "python -m examples.cart_server")
        server.run("stdio")
    elif args.workers == 1:
        app = create_app(
            args.store, ttl=args.ttl, tokens=args.tokens, state_key=state_key, **timing
        )
        serve(app, name="cart server", host=args.host, port=args.port)
    else:
        if args.store.startswith("memory:"):
            parser.error("--workers needs a shared store: sqlite:///PATH or redis://HOST:PORT")
        os.environ["CART_STORE"] = args.store
        os.environ["CART_TTL"] = str(args.ttl)
        os.environ["CART_TOKENS"] = args.tokens or ""
        os.environ["CART_LEASE"] = str(args.lease)
        os.environ["CART_WAIT"] = str(args.wait)
        os.environ.setdefault("CART_STATE_KEY", secrets.token_hex(32))
        print(where(f"cart server ({args.workers} workers)", url(args.host, args.port)))
        uvicorn.run(
            "examples.cart_server.server:app_from_environment",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=log_level().lower(),
        )


if __name__ == "__main__":
    main()
