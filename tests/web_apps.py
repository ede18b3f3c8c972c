"""Web apps on a resolvent container, as people write them, for the tests that serve them.

Each factory builds a fresh app and its container, with ``lifespan=container.lifespan`` (or
``wrap_lifespan``) as the docs say. The tests run them under Starlette's `TestClient` (the
real lifespan protocol, in process) and under ``python -m uvicorn --factory`` in a
subprocess; the apps report their events through *log*, which prints ``event: ...`` lines
by default so a test can read them from the server's output.
"""

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi import Request as FastAPIRequest
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from resolvent import Container, Resolve, Scope
from resolvent.mcp import inject as mcp_inject
from resolvent.starlette import inject as web_inject

Log = Callable[[str], None]


def printed(event: str) -> None:
    print(f"event: {event}", flush=True)


class Pool:
    """One per APP scope: its number says which scope served a request."""

    numbers = itertools.count(1)

    def __init__(self) -> None:
        self.number = next(Pool.numbers)


def make_container(log: Log) -> tuple[Container, Callable[..., Any], Callable[..., Any]]:
    """A container with an APP resource (`pool`) and a CALL resource (`transaction`)."""
    container = Container()
    transactions = itertools.count(1)

    @container.provider(scope=Scope.APP)
    async def pool() -> AsyncIterator[Pool]:
        p = Pool()
        log(f"pool {p.number} opened")
        yield p
        log(f"pool {p.number} closed")

    async def transaction(p: Annotated[Pool, Resolve(pool)]) -> AsyncIterator[int]:
        n = next(transactions)
        log(f"begin {n}")
        yield n
        log(f"commit {n}")

    return container, pool, transaction


def starlette_app(log: Log = printed) -> Starlette:
    """``Starlette(lifespan=container.lifespan)`` with one injected endpoint."""
    container, pool, transaction = make_container(log)

    @web_inject(container)
    async def hello(
        request: Request,
        p: Annotated[Pool, Resolve(pool)],
        tx: Annotated[int, Resolve(transaction)],
    ) -> JSONResponse:
        return JSONResponse({"pool": p.number, "tx": tx, "path": request.url.path})

    class Notes(HTTPEndpoint):
        """A class-based endpoint: `inject` on its methods."""

        @web_inject(container)
        async def get(
            self, request: Request, tx: Annotated[int, Resolve(transaction)]
        ) -> JSONResponse:
            return JSONResponse({"endpoint": type(self).__name__, "tx": tx})

    return Starlette(
        routes=[Route("/hello", hello), Route("/endpoint", Notes)], lifespan=container.lifespan
    )


def _fastapi_routes(router: APIRouter, log: Log) -> tuple[Container, Callable[..., Any]]:
    container, pool, transaction = make_container(log)

    @router.get("/hello")
    @web_inject(container)
    async def hello(
        p: Annotated[Pool, Resolve(pool)], tx: Annotated[int, Resolve(transaction)]
    ) -> dict[str, int]:
        return {"pool": p.number, "tx": tx}

    @web_inject(container)
    async def route_tx(tx: Annotated[int, Resolve(transaction)]) -> int:
        return tx

    @router.get("/together")
    @web_inject(container)
    async def together(
        dep: Annotated[int, Depends(route_tx)], tx: Annotated[int, Resolve(transaction)]
    ) -> dict[str, int]:
        """An injected dependency and the route share the request's CALL scope."""
        return {"dependency": dep, "route": tx}

    return container, pool


def fastapi_app(log: Log = printed) -> FastAPI:
    """``FastAPI(lifespan=container.lifespan)`` with one injected route."""
    router = APIRouter()
    container, _ = _fastapi_routes(router, log)
    app = FastAPI(lifespan=container.lifespan)
    app.include_router(router)
    return app


def fastapi_included(log: Log = printed) -> FastAPI:
    """A FastAPI app on ``container.lifespan`` whose router is included in another app,
    which has a lifespan of its own with state: FastAPI merges the two."""
    router = APIRouter()
    container, _ = _fastapi_routes(router, log)
    api = FastAPI(lifespan=container.lifespan)
    api.include_router(router)

    @contextlib.asynccontextmanager
    async def outer_lifespan(app: FastAPI) -> AsyncIterator[dict[str, str]]:
        log("outer started")
        yield {"greeting": "hi"}
        log("outer stopped")

    outer = FastAPI(lifespan=outer_lifespan)
    outer.include_router(api.router)

    @outer.get("/state")
    async def state(request: FastAPIRequest) -> dict[str, str]:
        return {"greeting": request.state.greeting}

    return outer


def fastapi_with_mcp(log: Log = printed) -> FastAPI:
    """A FastAPI app mounting an MCP server's streamable-HTTP app: one container, one APP
    scope for the routes and the tools."""
    router = APIRouter()
    container, pool = _fastapi_routes(router, log)
    server = MCPServer("web-apps", lifespan=container.lifespan)

    @server.tool()
    @mcp_inject(container)
    async def which_pool(p: Annotated[Pool, Resolve(pool)]) -> int:
        """The number of the APP scope's pool."""
        return p.number

    mcp_app = server.streamable_http_app()

    def run_mcp(app: FastAPI) -> contextlib.AbstractAsyncContextManager[None]:
        # A mounted app's lifespan does not run by itself: run the MCP session manager here.
        return mcp_app.router.lifespan_context(mcp_app)

    app = FastAPI(lifespan=container.wrap_lifespan(run_mcp))
    app.include_router(router)
    app.mount("/", mcp_app)
    return app
