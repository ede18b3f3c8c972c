"""resolvent.starlette: the container in Starlette endpoints and FastAPI path operations.

The apps (tests/starlette_apps.py) run as people run them: on ``lifespan=container.lifespan``
under Starlette's `TestClient` used as a context manager (the real lifespan protocol, in
process, on asyncio and trio; framework, container setting and backend pairwise where
a test tries them all), and a representative few under ``python -m uvicorn`` in a
subprocess, hit with httpx over 127.0.0.1: one plain Starlette app, and one FastAPI app
that mounts an MCP server. Each served app is one process shared by the module's tests.
"""

import functools
import inspect
import re
import subprocess
import sys
import threading
import typing
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import httpx
import pytest
from fastapi import FastAPI
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient
from websockets.sync.client import connect as websocket_connect

from mcp_helpers import text
from modes import pairwise
from resolvent import Container, InvalidSignature, Resolve, Scope
from resolvent.__main__ import main
from resolvent.starlette import inject
from snapshot import assert_snapshot
from starlette_apps import (
    EVENT,
    FRAMEWORKS,
    MODES,
    Cursor,
    app_of,
    cursor_container,
    echo_route,
    fastapi_routes,
    faulty_route,
    home_route,
    make_container,
    streaming_app,
)
from uvicorn_helpers import Served, serve

Backend = Literal["asyncio", "trio"]
BACKENDS: list[Backend] = ["asyncio", "trio"]
backends = pytest.mark.parametrize("backend", BACKENDS)


@backends
def test_starlette_endpoint_gets_request_and_resources(backend: Backend) -> None:
    log: list[str] = []
    container, _database, transaction = make_container(log.append)
    app = Starlette(routes=[home_route(container, transaction)], lifespan=container.lifespan)
    with TestClient(app, backend=backend) as client:  # runs container.lifespan
        for _ in range(2):
            response = client.get("/", headers={"user-agent": "ua/1"})
            assert response.json() == {"tx": "tx", "agent": "ua/1", "path": "/"}
    assert log == ["app open"] + ["call open", "call close"] * 2 + ["app close"]


def fastapi_app(log: list[str]) -> FastAPI:
    container, _database, transaction = make_container(log.append)
    app = FastAPI(lifespan=container.lifespan)
    fastapi_routes(app, container, transaction)
    return app


def check_fastapi_hides_injected_parameters_and_keeps_its_own(
    client: "ThreadClients | TestClient",
) -> None:
    """What `test_fastapi_hides_injected_parameters_and_keeps_its_own` asks of its app,
    in process or served."""
    response = client.get("/items/3", params={"q": "x"})
    assert response.json() == {"item_id": 3, "tx": "tx", "q": "x"}
    assert client.get("/items/nope").status_code == 422
    failed = client.get("/fail")
    assert failed.status_code == 500
    assert "secret" not in failed.text
    missing_response = client.get("/missing")
    assert missing_response.status_code == 404
    assert missing_response.json() == {"detail": "no such note"}
    schema = client.get("/openapi.json").json()
    params = schema["paths"]["/items/{item_id}"]["get"]["parameters"]
    assert sorted(p["name"] for p in params) == ["item_id", "q"]
    assert "parameters" not in schema["paths"]["/fail"]["get"]


@backends
def test_fastapi_hides_injected_parameters_and_keeps_its_own(backend: Backend) -> None:
    log: list[str] = []
    app = fastapi_app(log)
    with TestClient(app, backend=backend, raise_server_exceptions=False) as client:
        check_fastapi_hides_injected_parameters_and_keeps_its_own(client)
    # Every request closed its CALL resource, the failing ones too; APP opened once.
    assert log.count("app open") == 1
    assert log.count("call open") == log.count("call close") == 3


class Item(BaseModel):
    name: str


class StoredItem(Item):
    owner: str  # not for the client


@backends
def test_a_fastapi_routes_return_annotation_is_its_response_model(backend: Backend) -> None:
    # FastAPI takes a route's response model from its return annotation, which the
    # injected route keeps: the answer has the model's fields only, the schema names it.
    container = Container()

    async def owner() -> str:
        return "alice"

    app = FastAPI(lifespan=container.lifespan)

    @app.get("/item")
    @inject(container)
    async def item(who: Annotated[str, Resolve(owner)]) -> Item:
        return StoredItem(name="lamp", owner=who)

    with TestClient(app, backend=backend) as client:
        assert client.get("/item").json() == {"name": "lamp"}
    answer = app.openapi()["paths"]["/item"]["get"]["responses"]["200"]["content"]
    assert answer["application/json"]["schema"] == {"$ref": "#/components/schemas/Item"}


def test_an_injected_function_keeps_its_names_docstring_and_annotations() -> None:
    # FastAPI names an operation after its function and describes it with its docstring,
    # and tools that read a function's names and annotations see the function written:
    # the decorated route and a dependency written with `yield` keep them.
    container = Container()

    async def settings() -> str:
        return "settings"

    app = FastAPI()

    @app.get("/notes")
    @inject(container)
    async def list_notes(limit: int, s: Annotated[str, Resolve(settings)]) -> list[str]:
        """Every note, newest first."""
        return [s] * limit

    @inject(container)
    async def unit(s: Annotated[str, Resolve(settings)]) -> AsyncIterator[str]:
        """One unit of work."""
        yield s

    operation = app.openapi()["paths"]["/notes"]["get"]
    assert (operation["summary"], operation["description"]) == (
        "List Notes",
        "Every note, newest first.",
    )
    for wrapped, name, doc in ((list_notes, "list_notes", "Every note, newest first."),
                               (unit, "unit", "One unit of work.")):  # fmt: skip
        assert (wrapped.__name__, wrapped.__module__, wrapped.__doc__) == (name, __name__, doc)
        assert wrapped.__qualname__.endswith(f"<locals>.{name}")
    assert list_notes.__annotations__["return"] == list[str]


@backends
def test_a_starlette_endpoint_may_be_a_partial(backend: Backend) -> None:
    # Its fixed arguments stay fixed, the others come from the request, and one missing
    # is a 400 that names the endpoint as resolvent does (a partial has no name).
    container = Container()

    async def settings() -> str:
        return "settings"

    async def greet(
        greeting: str, name: str, s: Annotated[str, Resolve(settings)]
    ) -> PlainTextResponse:
        return PlainTextResponse(f"{greeting} {name} with {s}")

    endpoint = inject(container)(functools.partial(greet, greeting="hello"))
    app = Starlette(
        routes=[Route("/{name}", endpoint), Route("/", endpoint)], lifespan=container.lifespan
    )
    with TestClient(app, backend=backend) as client:
        assert client.get("/ann").text == "hello ann with settings"
        missing = client.get("/")
    assert missing.status_code == 400
    needs = "needs 'name', a path or query parameter"
    assert missing.text == f"partial({__name__}.{greet.__qualname__}) {needs}"


@backends
def test_override_in_a_route(backend: Backend, resolvent_override: object) -> None:
    log: list[str] = []
    container, _database, transaction = make_container(log.append)

    async def fake() -> str:
        return "fake"

    app = FastAPI(lifespan=container.lifespan)

    @app.get("/")
    @inject(container)
    async def home(tx: Annotated[str, Resolve(transaction)]) -> str:
        return tx

    resolvent_override(container, transaction, fake)  # type: ignore[operator]
    with TestClient(app, backend=backend) as client:
        assert client.get("/").json() == "fake"
    assert log == []


# -- resources live until the response is sent ------------------------------------------


@pairwise(("framework", "mode", "backend"), FRAMEWORKS, list(MODES), BACKENDS)
def test_streaming_response_reads_its_resource_while_it_streams(
    backend: Backend, framework: str, mode: str
) -> None:
    log: list[str] = []
    container, cursor = cursor_container(log.append, mode)
    app = streaming_app(framework, container, cursor, chunks=3)
    with TestClient(app, backend=backend) as client:
        response = client.get("/stream")
    assert response.status_code == 200
    assert response.text == "0;1;2;"
    assert log == ["open", "chunk 0", "chunk 1", "chunk 2", "close"]


@pairwise(("framework", "mode", "backend"), FRAMEWORKS, list(MODES), BACKENDS)
def test_a_failing_handler_closes_its_resources_with_the_error(
    backend: Backend, framework: str, mode: str
) -> None:
    log: list[str] = []
    container, cursor = cursor_container(log.append, mode)
    app = streaming_app(framework, container, cursor, chunks=1)
    with TestClient(app, backend=backend, raise_server_exceptions=False) as client:
        response = client.get("/fail")
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


# Driven by hand on purpose: TestClient reads a whole response before it returns (an
# endless stream never does) and cannot leave mid-response, and a real server speaks one
# ASGI spec version; only a hand-made server can say "gone" both ways. The same departure
# through uvicorn and a real socket is test_a_client_that_leaves_mid_stream_under_uvicorn.
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("spec_version", ["2.0", "2.4"])
async def test_a_client_that_leaves_mid_stream_still_closes_the_resources(
    anyio_backend: Backend, framework: str, spec_version: str
) -> None:
    """The client goes after the first chunk of an endless stream: ASGI servers say so
    with ``http.disconnect`` (spec 2.0) or by failing ``send`` with OSError (2.4)."""
    log: list[str] = []
    container, cursor = cursor_container(log.append)
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


@pairwise(("framework", "mode", "backend"), FRAMEWORKS, list(MODES), BACKENDS)
def test_a_websocket_keeps_its_resources_for_the_whole_connection(
    backend: Backend, framework: str, mode: str
) -> None:
    log: list[str] = []
    container, cursor = cursor_container(log.append, mode)
    app = app_of(framework, container, [echo_route(container, cursor)])
    with TestClient(app, backend=backend) as client:
        with client.websocket_connect("/ws") as websocket:
            echoed = []
            for text_ in ("a", "b"):
                websocket.send_text(text_)
                echoed.append(websocket.receive_text())
        assert echoed == ["a0;", "b1;"]
    assert log == ["open", "chunk 0", "chunk 1", "close"]


@backends
def test_a_plain_starlette_response_is_sent_inside_the_call(backend: Backend) -> None:
    """A CALL resource is still open while Starlette sends an ordinary response."""
    log: list[str] = []
    container, cursor = cursor_container(log.append)

    class Tracking(PlainTextResponse):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            log.append("sending")
            await super().__call__(scope, receive, send)

    @inject(container)
    async def home(c: Annotated[Cursor, Resolve(cursor)]) -> Response:
        return Tracking(c.read(0))

    app = Starlette(routes=[Route("/", home)], lifespan=container.lifespan)
    with TestClient(app, backend=backend) as client:
        assert client.get("/").text == "0;"
    assert log == ["open", "chunk 0", "sending", "close"]


@backends
def test_starlette_http_exception_passes_through_a_sync_endpoint(backend: Backend) -> None:
    """Starlette's own `HTTPException` from a plain `def` endpoint (run in a worker thread)
    is the framework's 404, and the request's resource still closes, seeing the error."""
    log: list[str] = []
    container, cursor = cursor_container(log.append)

    @inject(container)
    def note(request: Request, c: Annotated[Cursor, Resolve(cursor)]) -> Response:
        c.read(0)
        raise StarletteHTTPException(404, f"there is no note {request.path_params['n']}")

    app = Starlette(routes=[Route("/notes/{n}", note)], lifespan=container.lifespan)
    with TestClient(app, backend=backend) as client:
        response = client.get("/notes/7")
    assert response.status_code == 404
    assert response.text == "there is no note 7"
    assert log == ["open", "chunk 0", "failed HTTPException", "close"]


def ask_concurrently(get: Callable[[str], str], names: tuple[str, ...]) -> dict[str, str]:
    """``get(name)`` for every name at once, each from its own thread."""
    with ThreadPoolExecutor(len(names)) as pool:
        return dict(zip(names, pool.map(get, names, timeout=60), strict=True))


@backends
def test_fastapi_resolver_reads_the_request_by_type(backend: Backend) -> None:
    """A resolver asks for the `Request` by type; each request gets its own, and its own
    CALL scope, while the APP value is made once for all of them."""
    log: list[str] = []
    app = fastapi_app(log)
    with TestClient(app, backend=backend) as client:
        results = ask_concurrently(
            lambda name: client.get("/whoami", headers={"x-tenant": name}).json(),
            ("a", "b", "c"),
        )
        schema = client.get("/openapi.json").json()
    assert results == {"a": "a/tx", "b": "b/tx", "c": "c/tx"}
    assert "parameters" not in schema["paths"]["/whoami"]["get"]
    assert log.count("app open") == log.count("app close") == 1
    assert log.count("call open") == log.count("call close") == 3


def get_many_with_faults(get: Callable[..., Any]) -> dict[int, int]:
    """120 requests to ``/r/{i}``, 12 at a time; the status of each."""

    def one(i: int) -> tuple[int, int]:
        response = get(f"/r/{i}")
        assert "secret" not in response.text
        if i % 3 == 0:
            assert response.text == "0;1;2;"
        return i, response.status_code

    with ThreadPoolExecutor(12) as pool:
        statuses = dict(pool.map(one, range(120), timeout=60))
    assert sorted(statuses) == list(range(120))
    assert {statuses[i] for i in range(0, 120, 3)} == {200}
    assert {statuses[i] for i in range(1, 120, 3)} == {500}
    assert {statuses[i] for i in range(2, 120, 3)} == {404}
    return statuses


@pairwise(("framework", "mode", "backend"), FRAMEWORKS, list(MODES), BACKENDS)
def test_many_concurrent_requests_with_faults_leave_nothing_open(
    backend: Backend, framework: str, mode: str
) -> None:
    """120 requests, 12 at a time, a third streaming, a third failing, a third answering
    404 with HTTPException: every request's resource closes once, none is read after it
    closed, and the APP value is made once."""
    log: list[str] = []
    made: list[str] = []
    container = Container(**MODES[mode])
    app = app_of(framework, container, [faulty_route(container, log.append, made.append)])
    with TestClient(app, backend=backend, raise_server_exceptions=False) as client:
        get_many_with_faults(client.get)
    assert log.count("open") == log.count("close") == 120
    assert log.count("chunk 2") == 40
    assert made == ["settings made"]


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

    @container.provider(scope=Scope.SESSION)
    async def wishlist() -> list[str]:
        return []

    async def compare(
        items: Annotated[list[str], Resolve(cart)], wished: Annotated[list[str], Resolve(wishlist)]
    ) -> int:
        return len(items) - len(wished)

    with pytest.raises(InvalidSignature) as info:
        inject(container)(compare)
    message = str(info.value).replace(cart.__qualname__, "cart")
    message = message.replace(wishlist.__qualname__, "wishlist")
    assert f"SESSION-scoped values ({__name__}.cart, {__name__}.wishlist)" in message


# -- under uvicorn, in a subprocess -------------------------------------------------------


class Events:
    """The events a served app prints for one test's requests (tagged with its name)."""

    def __init__(self, served: Served, request: pytest.FixtureRequest) -> None:
        self.served = served
        self.tag = re.sub(r"\W", "-", request.node.name)
        self.headers = {"x-test": self.tag}

    def now(self) -> list[str]:
        return events_of(self.served.output, self.tag)

    def wait(self, done: Callable[[list[str]], bool]) -> list[str]:
        """The events once *done* holds of them: the server prints a request's last events
        after its response is sent, so a test waits for them (boundedly)."""
        self.served.read_until(lambda output: done(events_of(output, self.tag)))
        return self.now()

    def client(self) -> "ThreadClients":
        """A client of the server that tags its requests."""
        return ThreadClients(base_url=self.served.url, headers=self.headers, timeout=30)


class ThreadClients:
    """httpx clients of one server, one per calling thread, each with a connection per
    request.

    - A connection per request: uvicorn closes a connection after the app raised, even
      with its 500 already sent, and a request that reused that connection meanwhile
      would fail with a reset instead of testing the app.
    - A client per thread: httpcore's sync pool can close a connection it has just
      handed to a waiting thread (encode/httpcore#1110), which fails that request with
      "Bad file descriptor" or hangs it; a pool that one thread uses never races.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._local = threading.local()
        self._made: list[httpx.Client] = []
        self._lock = threading.Lock()

    def _mine(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            limits = httpx.Limits(max_keepalive_connections=0)
            client = self._local.client = httpx.Client(limits=limits, **self._options)
            with self._lock:
                self._made.append(client)
        return client

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._mine().get(url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self._mine().post(url, **kwargs)

    def stream(self, method: str, url: str, **kwargs: Any) -> Any:
        return self._mine().stream(method, url, **kwargs)

    def __enter__(self) -> "ThreadClients":
        return self

    def __exit__(self, *exc_info: object) -> None:
        for client in self._made:
            client.close()


def events_of(output: list[str], tag: str | None = None) -> list[str]:
    """The events in *output* (of requests tagged *tag*, or of all)."""
    events = [line.removeprefix(EVENT).split(" ", 1) for line in output if line.startswith(EVENT)]
    return [event for t, event in events if tag is None or t == tag]


def check_served(served: Served, opened: str, closed: str) -> None:
    """After the server stopped: its APP scope opened once, closed last, and the server
    exited cleanly on Ctrl-C."""
    events = events_of(served.output)
    assert events.count(opened) == 1, events
    assert events[-1] == closed, events
    assert served.returncode == 0, "\n".join(served.output)


@pytest.fixture(scope="module")
def starlette_server() -> Iterator[Served]:
    """The plain Starlette app under uvicorn, shared by this module's tests."""
    with serve("starlette_apps:served_starlette", factory=True) as served:
        yield served
    check_served(served, "app open", "app close")


@pytest.fixture(scope="module")
def fastapi_server() -> Iterator[Served]:
    """The FastAPI app mounting an MCP server under uvicorn, shared by this module's tests."""
    with serve("starlette_apps:served_fastapi_with_mcp", factory=True) as served:
        yield served
    check_served(served, "app open", "app close")


@pytest.mark.network
def test_starlette_endpoint_gets_request_and_resources_under_uvicorn(
    starlette_server: Served, request: pytest.FixtureRequest
) -> None:
    events = Events(starlette_server, request)
    with events.client() as client:
        for _ in range(2):
            response = client.get("/", headers={"user-agent": "ua/1"})
            assert response.json() == {"tx": "tx", "agent": "ua/1", "path": "/"}
    mine = events.wait(lambda e: e.count("call close") == 2)
    assert [e for e in mine if e != "app open"] == ["call open", "call close"] * 2
    assert events_of(starlette_server.output).count("app open") == 1


@pytest.mark.network
def test_starlette_routes_keep_a_cart_by_path_and_query_under_uvicorn(
    starlette_server: Served, request: pytest.FixtureRequest
) -> None:
    """A plain Starlette endpoint takes its call arguments (here a state handle) from the
    path, else the query string."""
    with Events(starlette_server, request).client() as client:
        handle = client.post("/carts").json()["cart"]
        assert client.post(f"/carts/{handle}/items/pear", params={"qty": 2}).json() == {"pear": 2}
        assert client.get(f"/carts/{handle}").json() == {"pear": 2}
        assert client.get("/cart", params={"cart": handle}).json() == {"pear": 2}
        missing = client.get("/cart")
        assert missing.status_code == 400
        assert missing.text == "show_cart needs 'cart', a path or query parameter"
        assert client.get(f"/carts/{'A' * 32}").status_code == 404


@pytest.mark.network
def test_streaming_and_failing_under_uvicorn(
    starlette_server: Served, request: pytest.FixtureRequest
) -> None:
    events = Events(starlette_server, request)
    with events.client() as client:
        response = client.get("/stream")
        assert response.status_code == 200
        assert response.text == "0;1;2;"
        assert events.wait(lambda e: "close" in e) == [
            "open", "chunk 0", "chunk 1", "chunk 2", "close"
        ]  # fmt: skip
        response = client.get("/fail")
    assert response.status_code == 500
    assert "secret" not in response.text
    failing = events.wait(lambda e: e.count("close") == 2)[5:]
    assert failing == ["open", "failed RuntimeError", "close"]


@pytest.mark.network
def test_a_client_that_leaves_mid_stream_under_uvicorn(
    starlette_server: Served, request: pytest.FixtureRequest
) -> None:
    """A real client reads the first chunk of an endless stream and hangs up: the server
    notices, and the request's resource closes."""
    events = Events(starlette_server, request)
    with (
        events.client() as client,
        client.stream("GET", "/endless") as response,
    ):
        assert response.status_code == 200
        first = next(response.iter_text())
        assert first.startswith("0;")
    log = events.wait(lambda e: "close" in e)
    assert log[0] == "open"
    assert log[-1] == "close"
    assert "chunk 0" in log


@pytest.mark.network
def test_a_websocket_keeps_its_resources_under_uvicorn(
    starlette_server: Served, request: pytest.FixtureRequest
) -> None:
    events = Events(starlette_server, request)
    url = starlette_server.url.replace("http://", "ws://") + "/ws"
    with websocket_connect(url, additional_headers=events.headers, open_timeout=30) as websocket:
        echoed = []
        for text_ in ("a", "b"):
            websocket.send(text_)
            echoed.append(websocket.recv(timeout=30))
    assert echoed == ["a0;", "b1;"]
    assert events.wait(lambda e: "close" in e) == ["open", "chunk 0", "chunk 1", "close"]


@pytest.mark.network
def test_many_concurrent_requests_with_faults_under_uvicorn(
    starlette_server: Served, request: pytest.FixtureRequest
) -> None:
    events = Events(starlette_server, request)
    with events.client() as client:
        get_many_with_faults(client.get)
    log = events.wait(lambda e: e.count("close") == 120)
    assert log.count("open") == log.count("close") == 120
    assert log.count("chunk 2") == 40
    assert events_of(starlette_server.output).count("settings made") == 1


@pytest.mark.network
def test_fastapi_hides_injected_parameters_and_keeps_its_own_under_uvicorn(
    fastapi_server: Served, request: pytest.FixtureRequest
) -> None:
    events = Events(fastapi_server, request)
    with events.client() as client:
        check_fastapi_hides_injected_parameters_and_keeps_its_own(client)
    log = events.wait(lambda e: e.count("call close") == 3)
    assert log.count("call open") == log.count("call close") == 3
    assert events_of(fastapi_server.output).count("app open") == 1


@pytest.mark.network
def test_fastapi_resolver_reads_the_request_by_type_under_uvicorn(
    fastapi_server: Served, request: pytest.FixtureRequest
) -> None:
    events = Events(fastapi_server, request)
    with events.client() as client:
        results = ask_concurrently(
            lambda name: client.get("/whoami", headers={"x-tenant": name}).json(),
            ("a", "b", "c"),
        )
        schema = client.get("/openapi.json").json()
    assert results == {"a": "a/tx", "b": "b/tx", "c": "c/tx"}
    assert "parameters" not in schema["paths"]["/whoami"]["get"]
    log = events.wait(lambda e: e.count("call close") == 3)
    assert log.count("call open") == log.count("call close") == 3
    assert events_of(fastapi_server.output).count("app open") == 1


@pytest.mark.network
def test_a_tool_of_the_mounted_mcp_server_shares_the_app_scope_under_uvicorn(
    fastapi_server: Served, request: pytest.FixtureRequest
) -> None:
    """Each ``tools/call`` is one CALL scope on the APP scope the routes use."""
    events = Events(fastapi_server, request)

    async def call_twice() -> list[str]:
        with anyio.fail_after(60):
            http = create_mcp_http_client(headers=events.headers)
            transport = streamable_http_client(f"{fastapi_server.url}/mcp", http_client=http)
            async with Client(transport) as mcp:
                return [text(await mcp.call_tool("in_a_transaction", {})) for _ in range(2)]

    assert anyio.run(call_twice) == ["tx, database closed: False"] * 2
    log = events.wait(lambda e: e.count("call close") == 2)
    assert [e for e in log if e != "app open"] == ["call open", "call close"] * 2
    assert events_of(fastapi_server.output).count("app open") == 1


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


# -- a Starlette endpoint's arguments, and the answers for writes refused -------------------


def test_a_starlette_endpoints_arguments_come_by_name_and_a_bad_one_is_refused() -> None:
    # "Its other parameters taken by name from the path parameters, else the query string:
    # a missing or invalid one is a 400 naming it" (for a WebSocket, a close with 1008).
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    container = Container()

    @inject(container)
    async def page(request: Request, book: int, line: int = 1, tag: str = "-") -> Response:
        return PlainTextResponse(f"book {book!r} line {line!r} tag {tag}")

    @inject(container)
    async def chat(websocket: WebSocket, room: int) -> None:
        await websocket.accept()
        await websocket.send_text(f"room {room!r}")
        await websocket.close()

    app = Starlette(
        routes=[
            Route("/books/{book}", page),
            Route("/pages", page),
            WebSocketRoute("/chat/{room}", chat),
        ],
        lifespan=container.lifespan,
    )
    with TestClient(app) as client:
        # The path first, then the query; a default where neither has it.
        assert client.get("/books/3?book=9&tag=x").text == "book 3 line 1 tag x"
        assert client.get("/pages?book=4&line=7").text == "book 4 line 7 tag -"
        for url, status, detail in (
            ("/books/x", 400, "path parameter 'book' of page is not an int"),
            ("/pages?book=x", 400, "query parameter 'book' of page is not an int"),
            ("/pages", 400, "page needs 'book', a path or query parameter"),
        ):
            answer = client.get(url)
            assert (answer.status_code, answer.text) == (status, detail), url
        with client.websocket_connect("/chat/5") as ws:
            assert ws.receive_text() == "room 5"
        with (
            pytest.raises(WebSocketDisconnect) as refused_socket,
            client.websocket_connect("/chat/x") as ws,
        ):
            ws.receive_text()
        assert refused_socket.value.code == 1008
        assert refused_socket.value.reason == "path parameter 'room' of chat is not an int"


def test_refused_answers_each_write_the_call_could_not_make() -> None:
    # "raise refused(exc) yourself to answer the same way to such an error raised
    # elsewhere in a route": 409, 413, 503 with the store's brief, 503 for a network error.
    from resolvent import StateConflict, StateTooLarge, StoreUnavailable
    from resolvent.starlette import refused

    def answer(exc: BaseException) -> tuple[int, str] | None:
        found = refused(exc)
        return None if found is None else (found.status_code, found.detail)

    assert answer(StateConflict("cart 'c1' is being edited")) == (
        409,
        "cart 'c1' is being edited",
    )
    assert answer(StateTooLarge("cart too large")) == (413, "cart too large")
    down = StoreUnavailable("redis://cache:6379/0", "ConnectionError: refused")
    assert answer(down) == (503, down.brief)
    assert "cache" not in down.brief  # no address for a remote caller
    assert answer(ConnectionResetError("reset by peer")) == (503, "reset by peer")
    assert answer(TimeoutError()) == (503, "TimeoutError")  # no text: its kind
    assert answer(ValueError("not a write")) is None


def test_a_wrapped_routes_type_hints_are_those_its_signature_shows() -> None:
    # A tool that reads `typing.get_type_hints` (not the signature) sees the same call
    # arguments and return type the framework does, without the injected parameters.
    container = Container()

    @container.provider(scope=Scope.APP)
    async def greeting() -> str:
        return "hello"

    @inject(container)
    async def hello(
        name: str, times: int, word: Annotated[str, Resolve(greeting)]
    ) -> PlainTextResponse:
        return PlainTextResponse(f"{word}, {name}" * times)

    shown = inspect.signature(hello)
    hints = typing.get_type_hints(hello)
    assert {"name", "times"} <= set(hints) and "word" not in hints
    assert hints == {
        **{p.name: p.annotation for p in shown.parameters.values()},
        "return": PlainTextResponse,
    }


def test_resolvent_graph_draws_a_wrapped_routes_own_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A module imported afresh (a new name each run), as `resolvent graph app:route` does.
    module = f"graph_route_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        "from typing import Annotated\n"
        "from starlette.responses import PlainTextResponse\n"
        "from resolvent import Container, Resolve, Scope\n"
        "from resolvent.starlette import inject\n"
        "container = Container()\n"
        "@container.provider(scope=Scope.APP)\n"
        "async def greeting() -> str:\n"
        "    return 'hello'\n"
        "@inject(container)\n"
        "async def home(name: str, word: Annotated[str, Resolve(greeting)]) -> PlainTextResponse:\n"
        "    return PlainTextResponse(word + name)\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        code = main(["graph", f"{module}:home"])
    finally:
        sys.modules.pop(module, None)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(f"plan for {module}.home(name): 1 step(s)"), out
    assert f"word <- step 1 ({module}.greeting)" in out
    assert "resolvent_connection" not in out


def test_a_wrapped_endpoint_called_without_its_request_says_which_and_what_it_needs() -> None:
    container = Container()

    @inject(container)
    async def home(request: Request) -> PlainTextResponse:
        return PlainTextResponse("home")

    with pytest.raises(TypeError, match=r"\bhome needs the request \(or WebSocket\) it serves"):
        anyio.run(home)
