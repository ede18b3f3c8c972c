"""`inject` on methods: Starlette's class-based `HTTPEndpoint` handlers and bound-method
handlers, in Starlette and FastAPI alike.

A function decorated in a class body takes ``self`` (or ``cls``) as Python binds it; the
request (or WebSocket), the caller-facing parameters and the injected ones work as they do
for a plain function. Run under Starlette's `TestClient` on asyncio and trio.
"""

from collections.abc import AsyncIterator
from typing import Annotated

import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.endpoints import HTTPEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from modes import MODES, make_container
from resolvent import Container, Resolve, Scope, inline
from resolvent.starlette import inject
from snapshot import assert_snapshot

BACKENDS = ["asyncio", "trio"]


class Cursor:
    def __init__(self, n: int) -> None:
        self.n = n
        self.open = True

    def row(self, i: int) -> str:
        assert self.open, "read from a closed cursor"
        return f"row {i} of cursor {self.n}\n"


WEB_MODES = [m for m in MODES if m != "interpreter"]  # no rounds on the web


def cursor_container(events: list[str], mode: str = "generated") -> tuple[Container, object]:
    container = make_container(mode)
    numbers = iter(range(1, 1000))

    @container.provider(scope=Scope.APP)
    async def pool() -> AsyncIterator[str]:
        events.append("pool opened")
        yield "pool"
        events.append("pool closed")

    async def cursor(p: Annotated[str, Resolve(pool)]) -> AsyncIterator[Cursor]:
        c = Cursor(next(numbers))
        events.append(f"cursor {c.n} opened")
        yield c
        c.open = False
        events.append(f"cursor {c.n} closed")

    return container, cursor


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
def test_http_endpoint_methods_are_injected(mode: str, backend: str) -> None:
    events: list[str] = []
    container, cursor = cursor_container(events, mode)

    class Rows(HTTPEndpoint):
        @inject(container)
        async def get(
            self, request: Request, c: Annotated[Cursor, Resolve(cursor)]
        ) -> StreamingResponse:
            assert isinstance(self, Rows)

            async def rows() -> AsyncIterator[str]:
                for i in range(2):
                    yield c.row(i)  # open until the last chunk is sent

            return StreamingResponse(rows(), media_type="text/plain")

        @inject(container)
        def post(self, request: Request, c: Annotated[Cursor, Resolve(cursor)]) -> JSONResponse:
            # A sync method runs in a worker thread, as a sync route does.
            return JSONResponse(
                {"method": request.method, "cursor": c.n, "self": type(self).__name__}
            )

    app = Starlette(routes=[Route("/rows", Rows)], lifespan=container.lifespan)
    with TestClient(app, backend=backend) as client:
        assert client.get("/rows").text == "row 0 of cursor 1\nrow 1 of cursor 1\n"
        assert client.post("/rows").json() == {"method": "POST", "cursor": 2, "self": "Rows"}
        assert client.put("/rows").status_code == 405  # HTTPEndpoint's own answer
    assert events == [
        "pool opened",
        "cursor 1 opened",
        "cursor 1 closed",
        "cursor 2 opened",
        "cursor 2 closed",
        "pool closed",
    ]


def notes_class(container: Container, cursor: object) -> type:
    class Api:
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

        @inject(container)
        async def page(
            self, request: Request, c: Annotated[Cursor, Resolve(cursor)]
        ) -> PlainTextResponse:
            return PlainTextResponse(f"{self.prefix}{request.url.path} {c.n}")

        @inject(container)
        async def note(
            self, note_id: int, c: Annotated[Cursor, Resolve(cursor)], verbose: bool = False
        ) -> dict[str, object]:
            note: dict[str, object] = {"id": note_id, "prefix": self.prefix}
            return note | {"cursor": c.n} if verbose else note

        @classmethod
        @inject(container)
        async def kind(cls, c: Annotated[Cursor, Resolve(cursor)]) -> str:
            return f"{cls.__name__} {c.n}"

        @staticmethod
        @inject(container)
        async def static(
            request: Request, c: Annotated[Cursor, Resolve(cursor)]
        ) -> PlainTextResponse:
            return PlainTextResponse(f"static {c.n}")

        @inject(container)
        @inline
        def sync_note(self, c: Annotated[Cursor, Resolve(cursor)]) -> str:
            return f"{self.prefix} sync {c.n}"

    return Api


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
def test_bound_methods_as_starlette_endpoints(mode: str, backend: str) -> None:
    events: list[str] = []
    container, cursor = cursor_container(events, mode)
    api = notes_class(container, cursor)("api:")
    app = Starlette(
        routes=[Route("/page", api.page), Route("/static", api.static)],
        lifespan=container.lifespan,
    )
    with TestClient(app, backend=backend) as client:
        assert client.get("/page").text == "api:/page 1"
        assert client.get("/static").text == "static 2"
    assert events.count("cursor 1 closed") == events.count("cursor 2 closed") == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
def test_bound_methods_as_fastapi_routes(mode: str, backend: str) -> None:
    events: list[str] = []
    container, cursor = cursor_container(events, mode)
    Api = notes_class(container, cursor)
    api = Api("v1")
    app = FastAPI(lifespan=container.lifespan)
    app.get("/notes/{note_id}")(api.note)
    app.get("/kind")(Api.kind)
    app.get("/sync")(api.sync_note)
    with TestClient(app, backend=backend) as client:
        assert client.get("/notes/3").json() == {"id": 3, "prefix": "v1"}
        verbose = client.get("/notes/4", params={"verbose": True}).json()
        assert verbose == {"id": 4, "prefix": "v1", "cursor": 2}
        assert client.get("/kind").json() == "Api 3"
        assert client.get("/sync").json() == "v1 sync 4"
        schema = client.get("/openapi.json").json()
    # Neither `self` nor the injected cursor is a parameter of the API.
    parameters = schema["paths"]["/notes/{note_id}"]["get"]["parameters"]
    assert [p["name"] for p in parameters] == ["note_id", "verbose"]
    assert "parameters" not in schema["paths"]["/kind"]["get"]
    assert "parameters" not in schema["paths"]["/sync"]["get"]
    assert events[-1] == "pool closed"
    assert sum(e.endswith("opened") for e in events) == sum(e.endswith("closed") for e in events)


async def test_a_method_called_with_extra_arguments_says_what_inject_serves() -> None:
    container, cursor = cursor_container([])
    api = notes_class(container, cursor)("x")
    with pytest.raises(TypeError) as info:
        await api.page("surplus", "request")
    assert_snapshot("starlette_method_extra_arguments", str(info.value))


def test_a_generator_method_is_a_fastapi_dependency_bound_to_its_instance() -> None:
    from fastapi import Depends

    events: list[str] = []
    container, cursor = cursor_container(events)

    def page(size: int) -> str:  # the route's query parameter, as a resolver's argument
        return f"{size} rows"

    class Api:
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

        @inject(container)
        async def unit(
            self,
            size: int,
            c: Annotated[Cursor, Resolve(cursor)],
            rows: Annotated[str, Resolve(page)],
        ) -> AsyncIterator[str]:
            yield f"{self.prefix} {rows} from cursor {c.n}"
            events.append("unit ends")

    api = Api("unit of")
    app = FastAPI(lifespan=container.lifespan)

    @app.get("/")
    async def route(u: Annotated[str, Depends(api.unit)]) -> str:
        return u

    with TestClient(app) as client:
        assert client.get("/?size=3").json() == "unit of 3 rows from cursor 1"
    assert events == ["pool opened", "cursor 1 opened", "unit ends", "cursor 1 closed",
                      "pool closed"]  # fmt: skip
