"""``lifespan=container.lifespan`` starts the apps people write, run the way they run them.

Starlette reads what a lifespan yields as a state mapping, and FastAPI merges the states of
the routers an app includes, so the container's lifespan yields nothing. Each app of
`web_apps` runs under Starlette's `TestClient` (the real lifespan protocol, on asyncio and
trio) and under ``python -m uvicorn`` in a subprocess, hit with httpx over 127.0.0.1.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import anyio
import httpx
import pytest
from fastapi import APIRouter, FastAPI
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.testclient import TestClient

import web_apps
from mcp_helpers import text
from resolvent import Container
from uvicorn_helpers import serve

BACKENDS = ["asyncio", "trio"]


def numbered(events: list[str]) -> list[str]:
    """*events* with the pool's number (global across apps) replaced by ``N``."""
    return [re.sub(r"^pool \d+", "pool N", e) for e in events]


ONE_APP_SCOPE_TWO_REQUESTS = [
    "pool N opened",
    "begin 1",
    "commit 1",
    "begin 2",
    "commit 2",
    "pool N closed",
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "factory",
    [web_apps.starlette_app, web_apps.fastapi_app, web_apps.fastapi_with_mcp],
    ids=["starlette", "fastapi", "fastapi-with-mcp"],
)
def test_the_container_lifespan_starts_under_test_client(
    factory: Callable[[web_apps.Log], Starlette], backend: str
) -> None:
    events: list[str] = []
    app = factory(events.append)
    with TestClient(app, backend=backend) as client:
        first = client.get("/hello").json()
        second = client.get("/hello").json()
    assert first["pool"] == second["pool"]  # one APP scope for both requests
    assert (first["tx"], second["tx"]) == (1, 2)  # one CALL scope each
    assert numbered(events) == ONE_APP_SCOPE_TWO_REQUESTS


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_included_fastapi_app_merges_its_lifespan(backend: str) -> None:
    """FastAPI merges the lifespans of included routers and their states: ours yields none,
    the outer app's state still reaches its requests."""
    events: list[str] = []
    with TestClient(web_apps.fastapi_included(events.append), backend=backend) as client:
        assert client.get("/hello").json()["tx"] == 1
        assert client.get("/state").json() == {"greeting": "hi"}
    assert numbered(events) == [
        "outer started",
        "pool N opened",
        "begin 1",
        "commit 1",
        "pool N closed",
        "outer stopped",
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_api_router_with_the_container_lifespan(backend: str) -> None:
    events: list[str] = []
    router = APIRouter()
    container, _ = web_apps._fastapi_routes(router, events.append)
    app = FastAPI()
    app.include_router(APIRouter(lifespan=container.lifespan, routes=router.routes))
    with TestClient(app, backend=backend) as client:
        assert client.get("/hello").json()["tx"] == 1
    assert numbered(events) == ["pool N opened", "begin 1", "commit 1", "pool N closed"]


async def test_an_mcp_server_still_runs_on_the_container_lifespan() -> None:
    """The MCP SDK takes any lifespan value: nothing changes for an MCP server."""
    container = Container()
    server = MCPServer("plain", lifespan=container.lifespan)

    @server.tool()
    async def opened() -> bool:
        return container.is_open

    async with Client(server) as client:
        assert text(await client.call_tool("opened", {})) == "true"
    assert not container.is_open


# -- under uvicorn, in a subprocess ----------------------------------------------------------


@pytest.mark.network
@pytest.mark.parametrize(
    "factory", ["starlette_app", "fastapi_included"], ids=["starlette", "fastapi-included"]
)
def test_the_container_lifespan_starts_under_uvicorn(factory: str) -> None:
    with serve(f"web_apps:{factory}", factory=True) as served:
        with httpx.Client(base_url=served.url, timeout=30) as http:
            first = http.get("/hello").json()
            second = http.get("/hello").json()
            if factory == "starlette_app":  # a class-based endpoint
                assert http.get("/endpoint").json() == {"endpoint": "Notes", "tx": 3}
            else:  # one CALL scope for a dependency and its route
                assert http.get("/together").json() == {"dependency": 3, "route": 3}
        assert first["pool"] == second["pool"]
        assert (first["tx"], second["tx"]) == (1, 2)
        assert "Application startup complete." in " ".join(served.output)
    events = numbered([line.removeprefix("event: ") for line in served.printed("event: ")])
    ours = [e for e in events if not e.startswith("outer")]
    ours.remove("begin 3")
    ours.remove("commit 3")
    assert ours == ONE_APP_SCOPE_TWO_REQUESTS
    assert served.returncode == 0, "\n".join(served.output)


@pytest.mark.network
@pytest.mark.slow  # in CI's slow job: the default run stays under 3 minutes
def test_fastapi_and_a_mounted_mcp_server_share_one_app_scope_under_uvicorn() -> None:
    with serve("web_apps:fastapi_with_mcp", factory=True) as served:

        async def talk() -> tuple[int, str, str]:
            with anyio.fail_after(60):
                return await ask()

        async def ask() -> tuple[int, str, str]:
            async with (
                httpx.AsyncClient(base_url=served.url, timeout=30) as http,
                Client(f"{served.url}/mcp") as mcp,
            ):
                route = (await http.get("/hello")).json()["pool"]
                tool = text(await mcp.call_tool("which_pool", {}))
                again = text(await mcp.call_tool("which_pool", {}))
                return route, tool, again

        route, tool, again = anyio.run(talk)
        assert str(route) == tool == again
    events = numbered([line.removeprefix("event: ") for line in served.printed("event: ")])
    assert events == ["pool N opened", "begin 1", "commit 1", "pool N closed"]
    assert served.returncode == 0, "\n".join(served.output)
