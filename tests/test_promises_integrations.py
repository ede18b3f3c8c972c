"""Promises of docs/mcp.md, docs/state.md and docs/starlette.md about the integrations that
a realistic slip in the adapter code would break quietly.

Each test is written from a sentence of the docs (quoted above it), through the SDK's real
client or Starlette's real test client, on asyncio and trio.
"""

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import anyio
import pytest
from fastapi import FastAPI
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel
from starlette.testclient import TestClient

from mcp_helpers import MODES, client, text
from resolvent import Container, Handle, Held, Resolve, ResolventError, Scope, State
from resolvent.mcp import inject


class Cart(BaseModel):
    items: dict[str, int] = {}


@contextlib.contextmanager
def signed_in(subject: str | None, client_id: str, issuer: str | None = None) -> Iterator[None]:
    """What the SDK's auth middleware does for a request with a verified bearer token."""
    claims = {"iss": issuer} if issuer else None
    token = AccessToken(
        token=f"t-{subject}", client_id=client_id, subject=subject, scopes=[], claims=claims
    )
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        yield
    finally:
        auth_context_var.reset(reset)


def cart_server() -> tuple[MCPServer, Container]:
    container = Container()
    server = MCPServer("carts", lifespan=container.lifespan)
    carts = State("cart", Cart)

    @server.tool()
    @inject(container)
    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> str:
        return cart.handle

    @server.tool()
    @inject(container)
    async def show_cart(cart: Handle, value: Annotated[Cart, Resolve(carts.read)]) -> str:
        return repr(value.items)

    return server, container


# "The principal is, on MCP, the SDK's authenticated token (get_access_token(): its
# subject, else its client id)": users signing in through one OAuth client stay apart.
@pytest.mark.parametrize("mode", MODES)
async def test_users_of_one_oauth_client_are_different_principals(mode: str) -> None:
    server, container = cart_server()
    async with container:  # one APP scope (one memory store) for every client below
        with signed_in("alice", "shop-app", issuer="https://idp.example"):
            async with client(server, mode) as alice:
                handle = text(await alice.call_tool("open_cart", {}))
                assert text(await alice.call_tool("show_cart", {"cart": handle})) == "{}"
        with signed_in("bob", "shop-app", issuer="https://idp.example"):
            async with client(server, mode) as bob:
                refused = await bob.call_tool("show_cart", {"cart": handle})
        assert refused.is_error and "not found or expired" in text(refused)
        with signed_in("alice", "shop-app", issuer="https://idp.example"):
            async with client(server, mode) as alice_again:
                assert text(await alice_again.call_tool("show_cart", {"cart": handle})) == "{}"
        with signed_in("alice", "shop-app", issuer="https://other-idp.example"):
            async with client(server, mode) as other_alice:  # another issuer's "alice"
                refused = await other_alice.call_tool("show_cart", {"cart": handle})
        assert refused.is_error and "not found or expired" in text(refused)
        with signed_in(None, "robot"):  # no subject: the client id is the principal
            async with client(server, mode) as robot:
                mine = text(await robot.call_tool("open_cart", {}))
        with signed_in(None, "robot"):
            async with client(server, mode) as robot_again:
                assert text(await robot_again.call_tool("show_cart", {"cart": mine})) == "{}"


def test_a_principal_is_spelled_as_the_values_already_stored_expect() -> None:
    # A store keeps each value under its owner's principal (hashed): a server restarted on
    # a newer release finds the carts it kept only if every token still names the same
    # principal, issuer or none, subject or client id.
    from resolvent.mcp._principal import authenticated_principal

    assert authenticated_principal() is None  # no token: anonymous, State's own default
    with signed_in("alice", "shop-app"):
        assert authenticated_principal() == "subject::alice"
    with signed_in("alice", "shop-app", issuer="https://idp.example"):
        assert authenticated_principal() == "subject:https://idp.example:alice"
    with signed_in(None, "robot"):
        assert authenticated_principal() == "client:robot"


class Tracked:
    """SESSION values by key (the tool's `user` argument), each with a close event."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closed: dict[str, anyio.Event] = {}
        self.long_call = 0.0

    def closing(self, name: str) -> anyio.Event:
        return self.closed.setdefault(name, anyio.Event())


def keyed_server(tracked: Tracked, **options: Any) -> MCPServer:
    container = Container()
    server = MCPServer("keyed", lifespan=container.lifespan)

    @container.provider(scope=Scope.SESSION)
    async def account() -> AsyncIterator[dict[str, str]]:
        value: dict[str, str] = {}
        try:
            yield value
        finally:
            tracked.closing(value["name"]).set()

    @server.tool()
    @inject(
        container,
        session_key=lambda ctx: ctx.request_context.params["arguments"]["user"],
        **options,
    )
    async def visit(user: str, acct: Annotated[dict[str, str], Resolve(account)]) -> str:
        if "name" not in acct:
            acct["name"] = user
            tracked.opened.append(user)
        if tracked.long_call:
            await anyio.sleep(tracked.long_call)
        return acct["name"]

    return server


# "Past max_sessions, the least recently used idle one is closed" (docs/mcp.md, keyed
# sessions): a session used again is newer than one created after it.
async def test_past_max_sessions_the_least_recently_used_session_is_closed() -> None:
    tracked = Tracked()
    server = keyed_server(tracked, max_sessions=2)
    async with client(server, "2026-07-28") as c:
        for user in ("alice", "bob", "alice", "carol"):
            assert text(await c.call_tool("visit", {"user": user})) == user
        with anyio.fail_after(5):
            await tracked.closing("bob").wait()
        assert not tracked.closing("alice").is_set()
        assert text(await c.call_tool("visit", {"user": "alice"})) == "alice"
        assert tracked.opened == ["alice", "bob", "carol"]


# "one left unused for session_idle_timeout seconds is closed": unused counts from the
# end of its last call, so a call longer than the idle time does not close it at its end.
async def test_a_keyed_session_is_idle_from_the_end_of_its_last_call() -> None:
    tracked = Tracked()
    server = keyed_server(tracked, session_idle_timeout=0.5)
    async with client(server, "2026-07-28") as c:
        tracked.long_call = 0.6
        assert text(await c.call_tool("visit", {"user": "alice"})) == "alice"
        tracked.long_call = 0.0
        await anyio.sleep(0.05)  # the table's watcher runs when the call ends
        assert not tracked.closing("alice").is_set(), "closed the moment its long call ended"
        assert text(await c.call_tool("visit", {"user": "alice"})) == "alice"
        assert tracked.opened == ["alice"]


async def word() -> str:
    return "real"


# docs/testing.md: "with container.override(...)" swaps a provider "for tests, compiled
# plans included" -- also the plan of a tool that takes Context, once it is hot.
@pytest.mark.parametrize("mode", MODES)
async def test_an_override_reaches_a_hot_tool_that_takes_context(mode: str) -> None:
    container = Container()
    server = MCPServer("t", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    async def greet(w: Annotated[str, Resolve(word)], ctx: Context) -> str:
        assert ctx.request_context is not None
        return w

    async def fake() -> str:
        return "fake"

    async with client(server, mode) as c:
        for _ in range(6):  # hot by now: the tool starts its generated code itself
            assert text(await c.call_tool("greet", {})) == "real"
        with container.override(word, fake):
            for _ in range(3):
                assert text(await c.call_tool("greet", {})) == "fake"
        assert text(await c.call_tool("greet", {})) == "real"


# docs/starlette.md: the APP scope is the app's lifespan (`lifespan=container.lifespan`);
# core: "container.run(...) outside an open container ... raises an error that says how
# to fix it" -- the same for a route of an app served without that lifespan, every call.
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("scope", [Scope.APP, Scope.CALL])
def test_a_route_of_an_app_without_the_container_lifespan_says_so(
    backend: str, scope: Scope
) -> None:
    from resolvent.starlette import inject as web_inject

    container = Container()

    @container.provider(scope=Scope.APP)
    async def pool() -> str:
        return "pool"

    async def user(p: Annotated[str, Resolve(pool)]) -> str:
        return f"user of {p}"

    if scope is Scope.CALL:
        dependency: Any = user
    else:
        dependency = pool
    app = FastAPI()  # the lifespan forgotten

    @app.get("/")
    @web_inject(container)
    async def home(v: Annotated[str, Resolve(dependency)]) -> str:
        return v

    with TestClient(app, backend=backend) as web:
        for _ in range(5):  # cold and hot alike
            with pytest.raises(ResolventError, match="not open") as caught:
                web.get("/")
            assert "lifespan" in str(caught.value) or "async with" in str(caught.value)


# "one with a call in progress is never closed": however many of its calls are in
# progress, until the last one ends.
async def test_a_keyed_session_with_two_calls_in_progress_outlives_the_first() -> None:
    tracked = Tracked()
    gates = {"first": anyio.Event(), "second": anyio.Event(), "bob": anyio.Event()}
    entered: list[str] = []
    container = Container()
    server = MCPServer("keyed", lifespan=container.lifespan)

    @container.provider(scope=Scope.SESSION)
    async def account() -> AsyncIterator[dict[str, object]]:
        value: dict[str, object] = {"open": True}
        yield value
        value["open"] = False
        tracked.closing(str(value.get("name"))).set()

    @server.tool()
    @inject(container, session_key=lambda ctx: "alice", max_sessions=1)
    async def visit(gate: str, acct: Annotated[dict[str, object], Resolve(account)]) -> object:
        acct["name"] = "alice"
        entered.append(gate)
        await gates[gate].wait()
        return acct["open"]

    @server.tool()
    @inject(container, session_key=lambda ctx: "bob", max_sessions=1)
    async def other(acct: Annotated[dict[str, object], Resolve(account)]) -> bool:
        acct["name"] = "bob"
        entered.append("bob")
        await gates["bob"].wait()
        return True

    async with client(server, "2026-07-28") as c:
        results: dict[str, str] = {}

        async def call(gate: str) -> None:
            results[gate] = text(await c.call_tool("visit", {"gate": gate}))

        async with anyio.create_task_group() as group:
            group.start_soon(call, "first")
            group.start_soon(call, "second")
            with anyio.fail_after(5):
                while len(entered) < 2:
                    await anyio.sleep(0.01)
            group.start_soon(c.call_tool, "other", {})  # bob's: alice's is past the bound
            with anyio.fail_after(5):
                while len(entered) < 3:
                    await anyio.sleep(0.01)
            gates["first"].set()
            with anyio.fail_after(5):
                while "first" not in results:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.05)  # the table's watcher runs when a call ends
            assert not tracked.closing("alice").is_set(), "closed under a call in progress"
            gates["second"].set()
            gates["bob"].set()
        assert results == {"first": "true", "second": "true"}


# Keyed sessions "are closed when the container's APP scope closes" -- every time it does:
# a server whose lifespan runs twice closes its keyed sessions twice.
async def test_keyed_sessions_close_with_every_lifespan() -> None:
    tracked = Tracked()
    server = keyed_server(tracked)
    for user in ("alice", "bob"):
        async with client(server, "2026-07-28") as c:
            assert text(await c.call_tool("visit", {"user": user})) == user
        assert tracked.closing(user).is_set(), f"{user}'s session outlived the lifespan"
