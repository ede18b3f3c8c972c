"""resolvent.starlette: the container in Starlette endpoints and FastAPI path operations."""

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
import httpx
import pytest
from fastapi import FastAPI, HTTPException
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from resolvent import Container, InvalidSignature, Resolve, Scope
from resolvent.starlette import inject
from snapshot import assert_snapshot


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
    async with (
        app.router.lifespan_context(app),  # the app's own lifespan: container.lifespan
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
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
    async with (
        app.router.lifespan_context(app),  # the app's own lifespan: container.lifespan
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
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


# -- resources live until the response is sent ------------------------------------------


class Cursor:
    """A per-request resource that must stay open while the response streams."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.closed = False

    def read(self, n: int) -> str:
        assert not self.closed, "read from a closed cursor"
        self.log.append(f"chunk {n}")
        return f"{n};"


MODES: dict[str, dict[str, Any]] = {
    "plain": {},
    "concurrent": {"concurrent": True},
    "call_timeout": {"call_timeout": 30.0},
}


def cursor_container(log: list[str], mode: str = "plain") -> tuple[Container, Callable[..., Any]]:
    container = Container(**MODES[mode])

    async def cursor() -> AsyncIterator[Cursor]:
        log.append("open")
        resource = Cursor(log)
        try:
            yield resource
        except BaseException as exc:
            log.append(f"failed {type(exc).__name__}")
            raise
        finally:
            resource.closed = True
            log.append("close")

    return container, cursor


FRAMEWORKS = ("starlette", "fastapi")


def streaming_app(
    framework: str, container: Container, cursor: Callable[..., Any], chunks: int | None
) -> Any:
    """An app whose ``/stream`` reads the injected cursor while it streams (*chunks* or
    forever) and whose ``/fail`` raises after its cursor is open."""

    async def body(c: Cursor) -> AsyncIterator[str]:
        n = 0
        while chunks is None or n < chunks:
            yield c.read(n)
            n += 1
            await anyio.sleep(0)

    async def stream(c: Annotated[Cursor, Resolve(cursor)]) -> StreamingResponse:
        return StreamingResponse(body(c), media_type="text/plain")

    async def fail(c: Annotated[Cursor, Resolve(cursor)]) -> Response:
        raise RuntimeError("secret detail")

    if framework == "starlette":
        routes = [
            Route("/stream", inject(container)(stream)),
            Route("/fail", inject(container)(fail)),
        ]
        return Starlette(routes=routes)
    app = FastAPI()
    app.get("/stream")(inject(container)(stream))
    app.get("/fail")(inject(container)(fail))
    return app


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
async def test_streaming_response_reads_its_resource_while_it_streams(
    anyio_backend: str, framework: str, mode: str
) -> None:
    log: list[str] = []
    container, cursor = cursor_container(log, mode)
    app = streaming_app(framework, container, cursor, chunks=3)
    transport = httpx.ASGITransport(app=app)
    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/stream")
    assert response.status_code == 200
    assert response.text == "0;1;2;"
    assert log == ["open", "chunk 0", "chunk 1", "chunk 2", "close"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_failing_handler_closes_its_resources_with_the_error(
    anyio_backend: str, framework: str, mode: str
) -> None:
    log: list[str] = []
    container, cursor = cursor_container(log, mode)
    app = streaming_app(framework, container, cursor, chunks=1)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/fail")
    assert response.status_code == 500
    assert "secret" not in response.text
    assert log == ["open", "failed RuntimeError", "close"]


def http_scope(path: str, spec_version: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"t")],
        "client": ("127.0.0.1", 50000),
        "server": ("t", 80),
    }


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("spec_version", ["2.0", "2.4"])
async def test_a_client_that_leaves_mid_stream_still_closes_the_resources(
    anyio_backend: str, framework: str, spec_version: str
) -> None:
    """The client goes after the first chunk of an endless stream: ASGI servers say so
    with ``http.disconnect`` (spec 2.0) or by failing ``send`` with OSError (2.4)."""
    log: list[str] = []
    container, cursor = cursor_container(log)
    app = streaming_app(framework, container, cursor, chunks=None)
    gone = anyio.Event()
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if gone.is_set() and spec_version == "2.4":
            raise OSError("connection reset by peer")
        if message["type"] == "http.response.body" and message.get("body"):
            gone.set()

    async with container:
        with anyio.fail_after(10):
            try:
                await app(http_scope("/stream", spec_version), receive, send)
            except Exception as exc:  # 2.4: the disconnect surfaces to the server
                assert spec_version == "2.4", exc
    assert log[0] == "open"
    assert log[-1] == "close"
    assert "chunk 0" in log


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_websocket_keeps_its_resources_for_the_whole_connection(
    anyio_backend: str, framework: str, mode: str
) -> None:
    log: list[str] = []
    container, cursor = cursor_container(log, mode)

    async def echo(websocket: WebSocket, c: Annotated[Cursor, Resolve(cursor)]) -> None:
        await websocket.accept()
        n = 0
        async for text in websocket.iter_text():
            await websocket.send_text(text + c.read(n))
            n += 1

    app: Any
    if framework == "starlette":
        app = Starlette(routes=[WebSocketRoute("/ws", inject(container)(echo))])
    else:
        app = FastAPI()
        app.websocket("/ws")(inject(container)(echo))
    incoming = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": "a"},
        {"type": "websocket.receive", "text": "b"},
        {"type": "websocket.disconnect", "code": 1000},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = http_scope("/ws", "2.4") | {"type": "websocket", "scheme": "ws", "subprotocols": []}
    async with container:
        with anyio.fail_after(10):
            await app(scope, receive, send)
    assert [m.get("text") for m in sent if m["type"] == "websocket.send"] == ["a0;", "b1;"]
    assert log == ["open", "chunk 0", "chunk 1", "close"]


async def test_a_plain_starlette_response_is_sent_inside_the_call(anyio_backend: str) -> None:
    """A CALL resource is still open while Starlette sends an ordinary response."""
    log: list[str] = []
    container, cursor = cursor_container(log)

    class Tracking(PlainTextResponse):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            log.append("sending")
            await super().__call__(scope, receive, send)

    @inject(container)
    async def home(c: Annotated[Cursor, Resolve(cursor)]) -> Response:
        return Tracking(c.read(0))

    transport = httpx.ASGITransport(app=Starlette(routes=[Route("/", home)]))
    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/")).text == "0;"
    assert log == ["open", "chunk 0", "sending", "close"]


async def test_starlette_http_exception_passes_through_a_sync_endpoint(anyio_backend: str) -> None:
    """Starlette's own `HTTPException` from a plain `def` endpoint (run in a worker thread)
    is the framework's 404, and the request's resource still closes, seeing the error."""
    log: list[str] = []
    container, cursor = cursor_container(log)

    @inject(container)
    def note(request: Request, c: Annotated[Cursor, Resolve(cursor)]) -> Response:
        c.read(0)
        raise StarletteHTTPException(404, f"there is no note {request.path_params['n']}")

    app = Starlette(routes=[Route("/notes/{n}", note)])
    transport = httpx.ASGITransport(app=app)
    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/notes/7")
    assert response.status_code == 404
    assert response.text == "there is no note 7"
    assert log == ["open", "chunk 0", "failed HTTPException", "close"]


async def test_fastapi_resolver_reads_the_request_by_type(anyio_backend: str) -> None:
    """A resolver asks for the `Request` by type; each request gets its own, and its own
    CALL scope, while the APP value is made once for all of them."""
    log: list[str] = []
    container, _database, transaction = make_container(log)

    async def tenant(request: Request, tx: Annotated[str, Resolve(transaction)]) -> str:
        return f"{request.headers['x-tenant']}/{tx}"

    app = FastAPI(lifespan=container.lifespan)

    @app.get("/whoami")
    @inject(container)
    async def whoami(who: Annotated[str, Resolve(tenant)]) -> str:
        return who

    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
    ):
        async with anyio.create_task_group() as tg:
            results: dict[str, str] = {}

            async def ask(name: str) -> None:
                results[name] = (await client.get("/whoami", headers={"x-tenant": name})).json()

            for name in ("a", "b", "c"):
                tg.start_soon(ask, name)
        schema = (await client.get("/openapi.json")).json()
    assert results == {"a": "a/tx", "b": "b/tx", "c": "c/tx"}
    assert "parameters" not in schema["paths"]["/whoami"]["get"]
    assert log.count("app open") == log.count("app close") == 1
    assert log.count("call open") == log.count("call close") == 3


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("mode", MODES)
async def test_many_concurrent_requests_with_faults_leave_nothing_open(
    anyio_backend: str, framework: str, mode: str
) -> None:
    """120 requests, 12 at a time, a third streaming, a third failing, a third answering
    404 with HTTPException: every request's resource closes once, none is read after it
    closed, and the APP value is made once."""
    log: list[str] = []
    container = Container(**MODES[mode])
    made: list[int] = []

    @container.provider(scope=Scope.APP)
    async def settings() -> AsyncIterator[int]:
        made.append(1)
        yield 3

    async def cursor(chunks: Annotated[int, Resolve(settings)]) -> AsyncIterator[Cursor]:
        log.append("open")
        resource = Cursor(log)
        try:
            yield resource
        finally:
            resource.closed = True
            log.append("close")

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

    app: Any
    if framework == "starlette":
        app = Starlette(routes=[Route("/r/{i}", inject(container)(handle))])
    else:
        app = FastAPI()
        app.get("/r/{i}")(inject(container)(handle))
    statuses: dict[int, int] = {}
    limit = anyio.Semaphore(12)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    async def one(client: httpx.AsyncClient, i: int) -> None:
        async with limit:
            response = await client.get(f"/r/{i}")
        statuses[i] = response.status_code
        assert "secret" not in response.text
        if i % 3 == 0:
            assert response.text == "0;1;2;"

    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(120):
                    tg.start_soon(one, client, i)
    assert sorted(statuses) == list(range(120))
    assert {statuses[i] for i in range(0, 120, 3)} == {200}
    assert {statuses[i] for i in range(1, 120, 3)} == {500}
    assert {statuses[i] for i in range(2, 120, 3)} == {404}
    assert log.count("open") == log.count("close") == 120
    assert log.count("chunk 2") == 40
    assert made == [1]


def test_a_route_needing_a_session_value_is_refused_at_decoration() -> None:
    """A web request has no SESSION scope: say so when the route is declared, not with a
    500 on its first request."""
    container = Container()

    @container.provider(scope=Scope.SESSION)
    async def cart() -> list[str]:
        return []

    async def checkout(items: Annotated[list[str], Resolve(cart)]) -> int:
        return len(items)

    with pytest.raises(InvalidSignature) as info:
        inject(container)(checkout)
    message = str(info.value).replace(checkout.__qualname__, "checkout")
    message = message.replace(cart.__qualname__, "cart")
    assert_snapshot("starlette_route_needs_session", message)


# Runs in a fresh interpreter: the core and the pytest plugin import neither Starlette nor
# FastAPI; the MCP adapter imports no more of Starlette than the SDK itself does (its HTTP
# transport is built on it) and never this module or FastAPI.
_IMPORT_WITHOUT_STARLETTE = """
import sys

def web():
    return {m for m in sys.modules if m.split(".")[0] in ("starlette", "fastapi")}

import resolvent, resolvent.testing
assert not web(), sorted(web())
import mcp.server.mcpserver
sdk = web()
import resolvent.mcp
assert web() == sdk, sorted(web() - sdk)
assert "resolvent.starlette" not in sys.modules and "fastapi" not in sys.modules
print("ok")
"""


def test_core_and_mcp_adapter_do_not_import_starlette() -> None:
    pytest.importorskip("mcp", reason="checks what resolvent.mcp imports: needs the mcp extra")
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT_STARLETTE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
