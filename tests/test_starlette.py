"""resolvent.starlette: the container in Starlette endpoints and FastAPI path operations."""

from collections.abc import AsyncIterator
from typing import Annotated

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from resolvent import Container, Resolve, Scope
from resolvent.starlette import inject


class Db:
    def __init__(self) -> None:
        self.closed = False


def make_container(log: list[str]) -> tuple[Container, object, object]:
    container = Container()

    @container.provider(scope=Scope.APP)
    async def database() -> AsyncIterator[Db]:
        log.append("app open")
        db = Db()
        yield db
        db.closed = True
        log.append("app close")

    async def transaction(db: Annotated[Db, Resolve(database)]) -> AsyncIterator[str]:
        log.append("call open")
        try:
            yield "tx"
        finally:
            log.append("call close")

    return container, database, transaction


async def test_starlette_endpoint_gets_request_and_resources(anyio_backend: str) -> None:
    log: list[str] = []
    container, _database, transaction = make_container(log)

    async def user_agent(request: Request) -> str:
        return request.headers.get("user-agent", "")

    @inject(container)
    async def home(
        request: Request,
        tx: Annotated[str, Resolve(transaction)],
        agent: Annotated[str, Resolve(user_agent)],
    ) -> JSONResponse:
        return JSONResponse({"tx": tx, "agent": agent, "path": request.url.path})

    app = Starlette(routes=[Route("/", home)], lifespan=container.lifespan)
    transport = httpx.ASGITransport(app=app)
    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        for _ in range(2):
            response = await client.get("/", headers={"user-agent": "ua/1"})
            assert response.json() == {"tx": "tx", "agent": "ua/1", "path": "/"}
    assert log == ["app open"] + ["call open", "call close"] * 2 + ["app close"]


async def test_fastapi_hides_injected_parameters_and_keeps_its_own(anyio_backend: str) -> None:
    log: list[str] = []
    container, _database, transaction = make_container(log)
    app = FastAPI(lifespan=container.lifespan)

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

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/items/3", params={"q": "x"})
        assert response.json() == {"item_id": 3, "tx": "tx", "q": "x"}
        assert (await client.get("/items/nope")).status_code == 422
        failed = await client.get("/fail")
        assert failed.status_code == 500
        assert "secret" not in failed.text
        missing_response = await client.get("/missing")
        assert missing_response.status_code == 404
        assert missing_response.json() == {"detail": "no such note"}
        schema = (await client.get("/openapi.json")).json()
    params = schema["paths"]["/items/{item_id}"]["get"]["parameters"]
    assert sorted(p["name"] for p in params) == ["item_id", "q"]
    assert "parameters" not in schema["paths"]["/fail"]["get"]
    # Every request closed its CALL resource, the failing ones too; APP opened once.
    assert log.count("app open") == 1
    assert log.count("call open") == log.count("call close") == 3


async def test_override_in_a_route(anyio_backend: str, resolvent_override: object) -> None:
    log: list[str] = []
    container, _database, transaction = make_container(log)

    async def fake() -> str:
        return "fake"

    app = FastAPI()

    @app.get("/")
    @inject(container)
    async def home(tx: Annotated[str, Resolve(transaction)]) -> str:
        return tx

    resolvent_override(container, transaction, fake)  # type: ignore[operator]
    transport = httpx.ASGITransport(app=app)
    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/")).json() == "fake"
    assert log == []


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
