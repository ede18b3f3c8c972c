"""The cart server: one kind of state (a cart) kept in a store every worker shares.

- ``open_cart()`` mints a handle bound to the caller's principal;
- ``add_item(cart, item, qty, idempotency_key)`` edits the cart atomically (concurrent
  calls from any worker lose nothing; a retry with the same key adds nothing twice);
- ``show_cart(cart)`` reads it;
- ``checkout(cart)`` asks the user to confirm what is bought, then deletes the cart.

The store is named by a URL (``memory:``, ``sqlite:///PATH``, ``redis://HOST:PORT``), so
several workers or several server processes pointed at one SQLite file or one Redis serve a
cart interchangeably. With a token file, each bearer token names a principal, and a cart
opened by one principal is "not found or expired" for every other.
"""

import json
import os
from typing import Annotated, Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel, Field

from resolvent import Accepted, Container, Elicit, ElicitationResult, Held, Resolve, State
from resolvent.mcp import inject

__all__ = ("Cart", "Confirm", "create_app", "create_server")

SESSION_IDLE_TIMEOUT = 30.0

CartHandle = Annotated[str, Field(description="The cart's handle, as open_cart returned it.")]


class Cart(BaseModel):
    """What a cart holds: item name -> quantity."""

    items: dict[str, int] = {}


class Opened(BaseModel):
    cart: str


class Items(BaseModel):
    items: dict[str, int]


class Ordered(BaseModel):
    ordered: dict[str, int]


class Confirm(BaseModel):
    confirm: bool


class TokenFile:
    """Bearer tokens from a JSON object ``{token: principal}``: the SDK's token verifier."""

    def __init__(self, path: str) -> None:
        with open(path, encoding="utf-8") as file:
            self.tokens: dict[str, str] = json.load(file)

    async def verify_token(self, token: str) -> AccessToken | None:
        name = self.tokens.get(token)
        if name is None:
            return None
        return AccessToken(token=token, client_id=name, subject=name, scopes=[])


def listing(cart: Cart) -> str:
    return ", ".join(f"{item} x{qty}" for item, qty in cart.items.items())


def create_server(
    store: str = "memory:",
    *,
    ttl: float = 3600.0,
    tokens: str | None = None,
    state_key: str | None = None,
    lease: float = 4.0,
    wait: float = 10.0,
) -> tuple[MCPServer, Container]:
    """A fresh cart server and its container.

    Args:
        store: the state store's URL.
        ttl: seconds a cart lives after its last use.
        lease: seconds a cart stays locked after the server editing it died (a live
            edit renews its lease; see `State`).
        wait: seconds a call waits for another call's edit of the same cart.
        tokens: a JSON file mapping bearer tokens to principals (default: anonymous).
        state_key: hex key for the SDK's request state, shared by every process serving
            this server, so any of them can continue a 2026-07-28 round (default: a key
            of this process only).
    """
    carts = State("cart", Cart, store=store, idle_ttl=ttl, lease=lease, wait=wait)
    # The store opens with the server: an unreachable one fails at start-up, clearly.
    container = Container(warm=[carts.store])

    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> Opened:
        """Open an empty cart; pass the returned handle to the other tools."""
        return Opened(cart=cart.handle)

    @carts.idempotent  # a client that retries with the same idempotency_key adds once
    async def add_item(
        cart: CartHandle,
        item: str,
        edit: Annotated[Held[Cart], Resolve(carts.edit)],
        qty: int = 1,
    ) -> Items:
        """Add *qty* of *item* to the cart."""
        if qty < 1:
            raise ToolError("qty must be at least 1")
        edit.value.items[item] = edit.value.items.get(item, 0) + qty
        return Items(items=edit.value.items)

    async def show_cart(cart: CartHandle, value: Annotated[Cart, Resolve(carts.read)]) -> Items:
        """What the cart holds."""
        return Items(items=value.items)

    async def confirm_checkout(
        cart: CartHandle, seen: Annotated[Cart, Resolve(carts.read)]
    ) -> Elicit[Confirm]:
        if not seen.items:
            raise ToolError("the cart is empty: add_item first")
        count = sum(seen.items.values())
        return Elicit(f"Buy {count} item{'' if count == 1 else 's'}: {listing(seen)}?", Confirm)

    async def checkout(
        cart: CartHandle,
        answer: Annotated[ElicitationResult[Confirm], Resolve(confirm_checkout)],
        seen: Annotated[Cart, Resolve(carts.read)],
        edit: Annotated[Held[Cart], Resolve(carts.edit)],
    ) -> Ordered:
        """Buy what the cart holds, once the user confirms; the cart is gone afterwards."""
        if not isinstance(answer, Accepted) or not answer.data.confirm:
            return Ordered(ordered={})  # declined: the cart stays as it is
        if edit.value != seen:  # changed between the question and now: not what was confirmed
            raise ToolError("the cart changed while you were confirming; check out again")
        edit.delete()
        return Ordered(ordered=edit.value.items)

    options: dict[str, Any] = {}
    if tokens is not None:
        options["token_verifier"] = TokenFile(tokens)
        options["auth"] = AuthSettings(
            issuer_url="http://127.0.0.1",  # type: ignore[arg-type]
            resource_server_url=None,
        )
    security = None if state_key is None else RequestStateSecurity(keys=[bytes.fromhex(state_key)])
    server = MCPServer(
        "cart",
        lifespan=container.lifespan,
        request_state_security=security,
        # Quiet unless asked (examples/serving.py): no INFO line per session and request.
        log_level=os.environ.get("LOG_LEVEL", "WARNING").upper(),  # type: ignore[arg-type]
        **options,
    )
    for tool in (open_cart, add_item, show_cart, checkout):
        server.tool()(inject(container)(tool))
    return server, container


def create_app(
    store: str = "memory:",
    *,
    ttl: float = 3600.0,
    tokens: str | None = None,
    state_key: str | None = None,
    stateless: bool = False,
    lease: float = 4.0,
    wait: float = 10.0,
) -> Any:
    """The cart server as a streamable-HTTP ASGI app; *stateless* for worker processes
    sharing one port, where a client's next request may reach another worker (see
    `app_from_environment`)."""
    server, _ = create_server(
        store, ttl=ttl, tokens=tokens, state_key=state_key, lease=lease, wait=wait
    )
    if stateless:
        return server.streamable_http_app(stateless_http=True)
    return server.streamable_http_app(session_idle_timeout=SESSION_IDLE_TIMEOUT)


def app_from_environment() -> Any:
    """`create_app` configured by ``CART_STORE``, ``CART_TTL``, ``CART_TOKENS``,
    ``CART_STATE_KEY``, ``CART_LEASE`` and ``CART_WAIT``: the factory each uvicorn worker
    calls.

    Stateless: the workers share one port, so a client's requests land on any of them,
    and none keeps an MCP session another would need. Every tool works for every client;
    checkout's question reaches clients on 2026-07-28 (its rounds go to any worker) but
    not older ones, which need a stateful server to be asked mid-call.
    """
    return create_app(
        os.environ.get("CART_STORE", "memory:"),
        ttl=float(os.environ.get("CART_TTL", "3600")),
        tokens=os.environ.get("CART_TOKENS") or None,
        state_key=os.environ.get("CART_STATE_KEY") or None,
        stateless=True,
        lease=float(os.environ.get("CART_LEASE", "4")),
        wait=float(os.environ.get("CART_WAIT", "10")),
    )
