"""The apps of test_starlette.py, as people write them.

Each app opens its container with ``lifespan=container.lifespan``. The tests run them under
Starlette's `TestClient` (the real lifespan protocol, in process, on asyncio and trio), and
the two ``served_*`` factories under ``python -m uvicorn --factory`` in a subprocess. The
apps report their events through *log*: a list's ``append`` under `TestClient`, `printed`
(``event: TAG ...`` lines on stdout) under uvicorn.

A served app is shared by several tests: each tags its requests with an ``x-test``
header, and the events a request causes carry its tag, so a test reads its own events
even if an earlier one left a request running.
"""

import contextlib
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Annotated, Any

import anyio
from fastapi import FastAPI, HTTPException
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope
from starlette.websockets import WebSocket

from resolvent import Container, Handle, Held, Resolve, Scope, State, StateNotFound
from resolvent.mcp import inject as mcp_inject
from resolvent.starlette import inject

Log = Callable[[str], None]
EVENT = "event: "
UNTAGGED = "-"
_tag: ContextVar[str] = ContextVar("tag", default=UNTAGGED)


def printed(event: str) -> None:
    """Print *event* with the tag of the request that caused it: ``event: TAG EVENT``."""
    print(f"{EVENT}{_tag.get()} {event}", flush=True)


class Tagged:
    """ASGI middleware: the ``x-test`` header of a request tags everything it runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", ()))
        token = _tag.set(headers.get(b"x-test", UNTAGGED.encode()).decode())
        try:
            await self.app(scope, receive, send)
        finally:
            _tag.reset(token)


class Db:
    def __init__(self) -> None:
        self.closed = False


def make_container(
    log: Log, container: Container | None = None
) -> tuple[Container, Callable[..., Any], Callable[..., Any]]:
    """*container* (a new one by default) with an APP resource, `database`, and a CALL
    resource on it, `transaction`."""
    container = Container() if container is None else container

    @container.provider(scope=Scope.APP)
    async def database() -> AsyncIterator[Db]:
        log("app open")
        db = Db()
        yield db
        db.closed = True
        log("app close")

    async def transaction(db: Annotated[Db, Resolve(database)]) -> AsyncIterator[str]:
        log("call open")
        try:
            yield "tx"
        finally:
            log("call close")

    return container, database, transaction


def home_route(container: Container, transaction: Callable[..., Any]) -> Route:
    """``/``: the request, a CALL resource and a resolver reading the request."""

    async def user_agent(request: Request) -> str:
        return request.headers.get("user-agent", "")

    @inject(container)
    async def home(
        request: Request,
        tx: Annotated[str, Resolve(transaction)],
        agent: Annotated[str, Resolve(user_agent)],
    ) -> JSONResponse:
        return JSONResponse({"tx": tx, "agent": agent, "path": request.url.path})

    return Route("/", home)


def fastapi_routes(app: FastAPI, container: Container, transaction: Callable[..., Any]) -> None:
    """Path operations with injected parameters beside FastAPI's own, and failing ones."""

    @app.get("/items/{item_id}")
    @inject(container)
    async def item(
        item_id: int, tx: Annotated[str, Resolve(transaction)], q: str = "none"
    ) -> dict[str, object]:
        return {"item_id": item_id, "tx": tx, "q": q}

    @app.get("/fail")
    @inject(container)
    async def fail(tx: Annotated[str, Resolve(transaction)]) -> None:
        raise RuntimeError("secret detail")

    @app.get("/missing")
    @inject(container)
    def missing(tx: Annotated[str, Resolve(transaction)]) -> None:
        raise HTTPException(status_code=404, detail="no such note")

    async def tenant(request: Request, tx: Annotated[str, Resolve(transaction)]) -> str:
        return f"{request.headers['x-tenant']}/{tx}"

    @app.get("/whoami")
    @inject(container)
    async def whoami(who: Annotated[str, Resolve(tenant)]) -> str:
        """A resolver asks for the `Request` by type."""
        return who


# -- resources live until the response is sent ------------------------------------------


class Cursor:
    """A per-request resource that must stay open while the response streams."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.closed = False

    def read(self, n: int) -> str:
        assert not self.closed, "read from a closed cursor"
        self.log(f"chunk {n}")
        return f"{n};"


MODES: dict[str, dict[str, Any]] = {
    "plain": {},
    "concurrent": {"concurrent": True},
    "call_timeout": {"call_timeout": 30.0},
}
FRAMEWORKS = ("starlette", "fastapi")


def cursor_container(
    log: Log, mode: str = "plain", container: Container | None = None
) -> tuple[Container, Callable[..., Any]]:
    container = Container(**MODES[mode]) if container is None else container

    async def cursor() -> AsyncIterator[Cursor]:
        log("open")
        resource = Cursor(log)
        try:
            yield resource
        except BaseException as exc:
            log(f"failed {type(exc).__name__}")
            raise
        finally:
            resource.closed = True
            log("close")

    return container, cursor


def app_of(framework: str, container: Container, routes: list[Any]) -> Any:
    """A Starlette or FastAPI app on ``container.lifespan`` serving *routes*."""
    if framework == "starlette":
        return Starlette(routes=routes, lifespan=container.lifespan)
    app = FastAPI(lifespan=container.lifespan)
    for route in routes:
        if isinstance(route, WebSocketRoute):
            app.websocket(route.path)(route.endpoint)
        else:
            app.get(route.path)(route.endpoint)
    return app


def streaming_routes(
    container: Container,
    cursor: Callable[..., Any],
    chunks: int | None,
    *,
    pad: int = 0,
    path: str = "/stream",
) -> list[Route]:
    """*path* reads the injected cursor while it streams (*chunks* or forever, each padded
    with *pad* dots); ``/fail`` raises after its cursor is open."""

    async def body(c: Cursor) -> AsyncIterator[str]:
        n = 0
        while chunks is None or n < chunks:
            yield c.read(n) + "." * pad
            n += 1
            await anyio.sleep(0)

    async def stream(c: Annotated[Cursor, Resolve(cursor)]) -> StreamingResponse:
        return StreamingResponse(body(c), media_type="text/plain")

    async def fail(c: Annotated[Cursor, Resolve(cursor)]) -> Response:
        raise RuntimeError("secret detail")

    return [Route(path, inject(container)(stream)), Route("/fail", inject(container)(fail))]


def streaming_app(
    framework: str, container: Container, cursor: Callable[..., Any], chunks: int | None
) -> Any:
    return app_of(framework, container, streaming_routes(container, cursor, chunks))


def echo_route(container: Container, cursor: Callable[..., Any]) -> WebSocketRoute:
    """``/ws`` echoes each text with a read of a cursor that lives as long as the socket."""

    async def echo(websocket: WebSocket, c: Annotated[Cursor, Resolve(cursor)]) -> None:
        await websocket.accept()
        n = 0
        async for text in websocket.iter_text():
            await websocket.send_text(text + c.read(n))
            n += 1

    return WebSocketRoute("/ws", inject(container)(echo))


def faulty_route(container: Container, log: Log, made: Log) -> Route:
    """``/r/{i}``: for i % 3 == 0 a stream of 3 chunks, 1 a failure, 2 a 404; the number of
    chunks is an APP value (*made* says when it is made)."""

    @container.provider(scope=Scope.APP)
    async def settings() -> AsyncIterator[int]:
        made("settings made")
        yield 3

    async def cursor(chunks: Annotated[int, Resolve(settings)]) -> AsyncIterator[Cursor]:
        log("open")
        resource = Cursor(log)
        try:
            yield resource
        finally:
            resource.closed = True
            log("close")

    async def body(c: Cursor, chunks: int) -> AsyncIterator[str]:
        for n in range(chunks):
            await anyio.sleep(0)
            yield c.read(n)

    async def handle(
        request: Request,
        c: Annotated[Cursor, Resolve(cursor)],
        n: Annotated[int, Resolve(settings)],
    ) -> Response:
        kind = int(request.path_params["i"]) % 3
        if kind == 1:
            raise RuntimeError("secret detail")
        if kind == 2:
            raise StarletteHTTPException(404, "gone")
        return StreamingResponse(body(c, n), media_type="text/plain")

    return Route("/r/{i}", inject(container)(handle))


# -- state on Starlette routes: the handle from the path or the query string -------------


class Cart(BaseModel):
    items: dict[str, int] = {}


async def cart_not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": str(exc).splitlines()[0]}, status_code=404)


def cart_routes(container: Container, store: str = "memory:") -> list[BaseRoute]:
    """Carts on plain Starlette routes: ``POST /carts`` opens one; ``POST
    /carts/{cart}/items/{item}?qty=N`` adds to it; ``GET /carts/{cart}`` and ``GET
    /cart?cart=H`` show it. The handle and the item come from the path, the quantity and
    the second route's handle from the query string. Map `StateNotFound` to 404 with
    `cart_not_found`."""
    carts = State("cart", Cart, store=store)

    @inject(container)
    async def open_cart(cart: Annotated[Held[Cart], Resolve(carts.new)]) -> JSONResponse:
        return JSONResponse({"cart": cart.handle})

    @inject(container)
    async def add_item(
        cart: Handle,
        item: str,
        edit: Annotated[Held[Cart], Resolve(carts.edit)],
        qty: int = 1,
    ) -> JSONResponse:
        edit.value.items[item] = edit.value.items.get(item, 0) + qty
        return JSONResponse(edit.value.items)

    @inject(container)
    async def show_cart(cart: Handle, value: Annotated[Cart, Resolve(carts.read)]) -> JSONResponse:
        return JSONResponse(value.items)

    return [
        Route("/carts", open_cart, methods=["POST"]),
        Route("/carts/{cart}/items/{item}", add_item, methods=["POST"]),
        Route("/carts/{cart}", show_cart),
        Route("/cart", show_cart),
    ]


# -- served by uvicorn in a subprocess ----------------------------------------------------


def served_starlette() -> Starlette:
    """A plain Starlette app on ``container.lifespan`` with the routes of the tests: ``/``,
    ``/stream`` (3 chunks), ``/endless`` (64 KiB chunks, forever), ``/fail``, ``/ws``,
    ``/r/{i}`` and the carts of `cart_routes`, on one container."""
    container, _database, transaction = make_container(printed)
    _, cursor = cursor_container(printed, container=container)
    stream, fail = streaming_routes(container, cursor, chunks=3)
    endless, _ = streaming_routes(container, cursor, None, pad=64 * 1024, path="/endless")
    routes: list[BaseRoute] = [home_route(container, transaction), stream, endless, fail]
    routes += [echo_route(container, cursor), faulty_route(container, printed, printed)]
    routes += cart_routes(container)
    return Starlette(
        routes=routes,
        lifespan=container.lifespan,
        middleware=[Middleware(Tagged)],
        exception_handlers={StateNotFound: cart_not_found},
    )


def served_fastapi_with_mcp() -> FastAPI:
    """A FastAPI app with the path operations of the tests, mounting an MCP server whose
    tool opens the same CALL resource: one container, one APP scope."""
    container, database, transaction = make_container(printed)
    server = MCPServer("starlette-tests", lifespan=container.lifespan)

    @server.tool()
    @mcp_inject(container)
    async def in_a_transaction(
        db: Annotated[Db, Resolve(database)], tx: Annotated[str, Resolve(transaction)]
    ) -> str:
        """The CALL resource a tool gets, while the APP database is open."""
        return f"{tx}, database closed: {db.closed}"

    mcp_app = server.streamable_http_app()

    def run_mcp(app: FastAPI) -> contextlib.AbstractAsyncContextManager[Any]:
        # A mounted app's lifespan does not run by itself: run the MCP session manager here.
        return mcp_app.router.lifespan_context(mcp_app)

    app = FastAPI(lifespan=container.wrap_lifespan(run_mcp), middleware=[Middleware(Tagged)])
    fastapi_routes(app, container, transaction)
    app.mount("/", mcp_app)
    return app
