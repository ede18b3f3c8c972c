"""One CALL scope per web request, wherever resolvent is entered within it.

A FastAPI dependency decorated with `resolvent.starlette.inject` and the injected route
that uses it resolve in the request's one CALL scope: a CALL resource they both need (a
transaction, say) opens once, and both see the same value. Run under Starlette's
`TestClient` on asyncio and trio.
"""

import contextlib
import inspect
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import anyio
import pytest
from fastapi import APIRouter, Depends, FastAPI, Security
from starlette.requests import HTTPConnection, Request
from starlette.testclient import TestClient

from modes import MODES, make_container
from resolvent import Container, Resolve, Scope, inline
from resolvent.starlette import inject
from snapshot import assert_snapshot

BACKENDS = ["asyncio", "trio"]


# A web request is one CALL scope in each container setting (no rounds on the web).
WEB_MODES = [m for m in MODES if m != "interpreter"]


def transaction_app(events: list[str], mode: str = "generated") -> tuple[FastAPI, Container, Any]:
    container = make_container(mode)
    numbers = iter(range(1, 1000))

    @container.provider(scope=Scope.APP)
    async def pool() -> AsyncIterator[str]:
        yield "pool"

    async def transaction(p: Annotated[str, Resolve(pool)]) -> AsyncIterator[int]:
        n = next(numbers)
        events.append(f"begin {n}")
        yield n
        events.append(f"commit {n}")

    return FastAPI(lifespan=container.lifespan), container, transaction


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
@pytest.mark.parametrize(
    "how", ["depends", "security", "no-cache", "function-scope", "router", "chain"]
)
def test_an_injected_dependency_shares_the_route_call_scope(
    how: str, mode: str, backend: str
) -> None:
    if how == "function-scope" and "scope" not in inspect.signature(Depends).parameters:
        pytest.skip("this FastAPI has no dependency scopes")
    events: list[str] = []
    app, container, transaction = transaction_app(events, mode)
    seen: list[int] = []

    @inject(container)
    async def user_tx(tx: Annotated[int, Resolve(transaction)]) -> int:
        seen.append(tx)
        return tx

    @inject(container)
    async def outer_tx(
        inner: Annotated[int, Depends(user_tx)], tx: Annotated[int, Resolve(transaction)]
    ) -> int:
        seen.append(tx)
        return inner

    dependency: Any = {
        "depends": Depends(user_tx),
        "security": Security(user_tx, scopes=["notes:read"]),
        "no-cache": Depends(user_tx, use_cache=False),
        "function-scope": Depends(user_tx, scope="function"),
        "router": Depends(user_tx),
        "chain": Depends(outer_tx),
    }[how]
    router = APIRouter(dependencies=[dependency] if how == "router" else [])

    if how == "router":

        @router.get("/tx")
        @inject(container)
        async def route_only(tx: Annotated[int, Resolve(transaction)]) -> dict[str, int]:
            return {"dependency": seen[-1], "route": tx}

    else:

        @router.get("/tx")
        @inject(container)
        async def route(
            dep: Annotated[int, dependency], tx: Annotated[int, Resolve(transaction)]
        ) -> dict[str, int]:
            return {"dependency": dep, "route": tx}

    app.include_router(router)
    with TestClient(app, backend=backend) as client:
        assert client.get("/tx").json() == {"dependency": 1, "route": 1}
        assert client.get("/tx").json() == {"dependency": 2, "route": 2}
    # The CALL resource opened once per request, for the dependency and the route alike.
    assert events == ["begin 1", "commit 1", "begin 2", "commit 2"]
    assert set(seen) == {1, 2}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
@pytest.mark.parametrize("kind", ["async", "sync", "inline"])
def test_an_injected_dependency_with_yield_sets_up_before_and_tears_down_after(
    kind: str, mode: str, backend: str
) -> None:
    """As FastAPI runs its own: the code before `yield` runs before the route, the code
    after it once the response is sent, or with the route's error; the request's CALL
    resources stay open around both."""
    events: list[str] = []
    app, container, transaction = transaction_app(events, mode)

    threads: set[int] = set()  # where the sync one runs
    loop: set[int] = set()

    def sync_unit(tx: Annotated[int, Resolve(transaction)]) -> Iterator[str]:
        threads.add(threading.get_ident())
        events.append(f"unit begins in {tx}")
        try:
            yield f"unit {tx}"
        except Exception as exc:
            events.append(f"unit saw {exc}")
            raise
        events.append("unit ends")

    async def unit(tx: Annotated[int, Resolve(transaction)]) -> AsyncIterator[str]:
        with contextlib.contextmanager(sync_unit)(tx) as value:  # the same steps
            yield value

    if kind == "inline":
        inline(sync_unit)  # marks the function itself
    dependency = inject(container)(unit if kind == "async" else sync_unit)

    @app.get("/unit")
    @inject(container)
    async def route(
        u: Annotated[str, Depends(dependency)], tx: Annotated[int, Resolve(transaction)]
    ) -> str:
        events.append("route")
        loop.add(threading.get_ident())
        return f"{u}, route {tx}"

    @app.get("/fails")
    async def fails(u: Annotated[str, Depends(dependency)]) -> str:
        events.append("route fails")
        raise RuntimeError("no stock")

    with TestClient(app, backend=backend, raise_server_exceptions=False) as client:
        assert client.get("/unit").json() == "unit 1, route 1"
        assert events == ["begin 1", "unit begins in 1", "route", "unit ends", "commit 1"]
        events.clear()
        assert client.get("/fails").status_code == 500
    # The transaction sees the error too: no commit.
    assert events == ["begin 2", "unit begins in 2", "route fails", "unit saw no stock"]
    # A sync one runs in a worker thread unless it is marked inline, as a sync route does.
    if kind != "async":
        assert (threads == loop) is (kind == "inline"), (threads, loop)


class Session:
    """A class pydantic has no schema for: only FastAPI's `Depends` can fill it."""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_route_taking_any_class_from_fastapi_decorates_and_serves(backend: str) -> None:
    events: list[str] = []
    app, container, transaction = transaction_app(events)

    @app.get("/session")
    @inject(container)
    async def route(
        s: Annotated[Session, Depends(Session)], tx: Annotated[int, Resolve(transaction)]
    ) -> str:
        return f"{type(s).__name__} in {tx}"

    with TestClient(app, backend=backend) as client:
        assert client.get("/session").json() == "Session in 1"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_injected_dependency_of_a_plain_route_opens_the_call_scope(backend: str) -> None:
    """A route FastAPI calls itself (no `inject`) still gets one CALL scope from its
    injected dependency, closed after the response."""
    events: list[str] = []
    app, container, transaction = transaction_app(events)

    @inject(container)
    async def user_tx(tx: Annotated[int, Resolve(transaction)]) -> int:
        events.append(f"dependency saw {tx}")
        return tx

    @app.get("/plain")
    async def plain(
        a: Annotated[int, Depends(user_tx)], b: Annotated[int, Security(user_tx, scopes=["x"])]
    ) -> list[int]:
        events.append("route")
        return [a, b]

    with TestClient(app, backend=backend) as client:
        assert client.get("/plain").json() == [1, 1]
    assert events[0] == "begin 1" and events[-1] == "commit 1"
    assert events.count("begin 1") == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_containers_in_one_request_keep_their_own_call_scopes(backend: str) -> None:
    events: list[str] = []
    app, container, transaction = transaction_app(events)
    other_events: list[str] = []
    _, other, other_transaction = transaction_app(other_events)

    @inject(other)
    async def other_tx(tx: Annotated[int, Resolve(other_transaction)]) -> int:
        return tx

    @app.get("/both")
    @inject(container)
    async def both(
        theirs: Annotated[int, Depends(other_tx)], ours: Annotated[int, Resolve(transaction)]
    ) -> list[int]:
        return [theirs, ours]

    app.router.lifespan_context = container.wrap_lifespan(other.lifespan)  # both APP scopes
    with TestClient(app, backend=backend) as client:
        assert client.get("/both").json() == [1, 1]
    assert events == ["begin 1", "commit 1"]
    assert other_events == ["begin 1", "commit 1"]


async def test_without_fastapis_request_stack_the_call_scope_covers_the_function() -> None:
    """Called the way FastAPI calls it (the request by keyword) but outside a request that
    FastAPI (0.118 or later) gave an exit stack, `inject` still opens and closes the CALL
    scope: around the function, so nothing stays open."""
    events: list[str] = []
    _, container, transaction = transaction_app(events)

    @inject(container)
    async def user_tx(tx: Annotated[int, Resolve(transaction)]) -> int:
        events.append(f"saw {tx}")
        return tx

    [name] = [
        p.name
        for p in inspect.signature(user_tx).parameters.values()
        if p.annotation is HTTPConnection
    ]
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "query_string": b""}
    async with container:
        assert await user_tx(**{name: Request(scope)}) == 1
        assert events == ["begin 1", "saw 1", "commit 1"]
        assert "resolvent.calls" not in scope or not scope["resolvent.calls"]


# -- a route alone in its request -------------------------------------------------------
# A route's own function that is first in its request to enter resolvent runs with no
# call scope object (nothing after it in the request can share its values); these pin
# what that path keeps: sharing where the route is also a dependency, resources open
# until the response is sent, fresh values per request, and overrides.


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
@pytest.mark.parametrize("depth", ["its own", "its dependency's"])
def test_a_route_that_is_also_its_own_router_dependency_shares_the_call_scope(
    depth: str, mode: str, backend: str
) -> None:
    # The route's function is a dependency of its router, or of that dependency.
    events: list[str] = []
    app, container, transaction = transaction_app(events, mode)
    seen: list[int] = []

    @inject(container)
    async def route(tx: Annotated[int, Resolve(transaction)]) -> int:
        seen.append(tx)
        return tx

    async def middle(tx: Annotated[int, Depends(route)]) -> int:
        return tx

    router = APIRouter(dependencies=[Depends(route if depth == "its own" else middle)])
    router.get("/tx")(route)
    app.include_router(router)
    with TestClient(app, backend=backend) as client:
        assert client.get("/tx").json() == 1
        assert client.get("/tx").json() == 2
    assert seen == [1, 1, 2, 2]  # as the dependency, then as the route
    assert events == ["begin 1", "commit 1", "begin 2", "commit 2"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
def test_a_route_resource_holding_a_task_group_stays_open_until_the_response_is_sent(
    mode: str, backend: str
) -> None:
    """A CALL resource that keeps a task group (and its background task) open across its
    ``yield`` is set up in a task of its own; the response streams from it, then it
    closes, its task group with it."""
    import anyio
    from starlette.responses import StreamingResponse

    events: list[str] = []
    container = make_container(mode)

    async def feed() -> AsyncIterator[list[str]]:
        chunks: list[str] = []
        async with anyio.create_task_group() as group:
            ready = anyio.Event()

            async def produce() -> None:
                chunks.extend(["a", "b"])
                ready.set()
                await anyio.sleep_forever()

            group.start_soon(produce)
            await ready.wait()
            events.append("open")
            try:
                yield chunks
            finally:
                events.append("close")
                group.cancel_scope.cancel()

    app = FastAPI(lifespan=container.lifespan)

    @app.get("/stream")
    @inject(container)
    async def stream(chunks: Annotated[list[str], Resolve(feed)]) -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            for chunk in chunks:
                events.append(f"send {chunk}")
                yield chunk

        return StreamingResponse(body())

    with TestClient(app, backend=backend) as client:
        assert client.get("/stream").text == "ab"
        assert client.get("/stream").text == "ab"
    assert events == ["open", "send a", "send b", "close"] * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["tiered", *WEB_MODES])
def test_a_route_without_resources_resolves_each_request_afresh(mode: str, backend: str) -> None:
    """A route whose plan opens nothing: each request gets its own values, and a
    resolver two parameters need runs once per request (past the requests a plan is
    interpreted for, into its generated code)."""
    container = Container() if mode == "tiered" else make_container(mode)
    runs: list[str] = []

    async def tenant(request: Request) -> str:
        runs.append(request.headers["x-tenant"])
        return request.headers["x-tenant"]

    async def greeting(who: Annotated[str, Resolve(tenant)]) -> str:
        return f"hello {who}"

    app = FastAPI(lifespan=container.lifespan)

    @app.get("/hello")
    @inject(container)
    async def hello(
        who: Annotated[str, Resolve(tenant)], text: Annotated[str, Resolve(greeting)]
    ) -> list[str]:
        return [who, text]

    names = [f"t{i}" for i in range(6)]
    with TestClient(app, backend=backend) as client:
        got = [client.get("/hello", headers={"x-tenant": name}).json() for name in names]
    assert got == [[name, f"hello {name}"] for name in names]
    assert runs == names


@pytest.mark.parametrize("mode", WEB_MODES)
async def test_an_override_reaches_a_route_already_started_without_a_call_scope(
    anyio_backend: str, mode: str
) -> None:
    """Overrides entered after a route served requests apply to the requests made in
    their block, and only there."""
    import httpx

    events: list[str] = []
    app, container, transaction = transaction_app(events, mode)

    async def fake() -> int:
        return -1

    @app.get("/tx")
    @inject(container)
    async def route(tx: Annotated[int, Resolve(transaction)]) -> int:
        return tx

    transport = httpx.ASGITransport(app=app)
    async with container, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        got = [(await client.get("/tx")).json() for _ in range(3)]
        with container.override(transaction, fake):
            got.append((await client.get("/tx")).json())
        got.append((await client.get("/tx")).json())
    assert got == [1, 2, 3, -1, 4]
    assert events == [e for n in (1, 2, 3, 4) for e in (f"begin {n}", f"commit {n}")]


def test_a_route_puts_its_exit_on_fastapis_stack_with_one_append() -> None:
    """The route's exit goes on FastAPI's request exit stack by appending to the stack's
    own list of exits, the shape every CPython we support has; if a Python changes it,
    this fails (and routes fall back to `push_async_exit`)."""
    from resolvent import starlette

    assert starlette._APPENDS and starlette._appends()


async def test_a_generator_outside_fastapis_dependencies_says_where_it_serves() -> None:
    container = Container()

    @inject(container)
    async def unit() -> AsyncIterator[str]:
        yield "unit"

    with pytest.raises(TypeError) as info:
        await anext(unit())  # as a Starlette endpoint (or any caller but FastAPI) would
    assert_snapshot("starlette_generator_outside_fastapi", str(info.value))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
def test_a_starlette_endpoint_that_hands_over_to_another_shares_its_call_scope(
    mode: str, backend: str
) -> None:
    """A Starlette endpoint that answers with another injected endpoint's response: the
    other one resolves in the request's CALL scope, so their resource opens once; it
    takes its own arguments from the request's path, and its response streams."""
    from starlette.applications import Starlette
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    events: list[str] = []
    _, container, transaction = transaction_app(events, mode)

    @inject(container)
    async def inner(name: str, tx: Annotated[int, Resolve(transaction)]) -> Response:
        async def body() -> AsyncIterator[str]:
            yield f"inner {tx} "
            yield f"for {name}"

        return StreamingResponse(body())

    @inject(container)
    async def outer(request: Request, tx: Annotated[int, Resolve(transaction)]) -> Any:
        events.append(f"outer {tx}")
        return await inner(request)

    app = Starlette(routes=[Route("/{name}", outer)], lifespan=container.lifespan)
    with TestClient(app, backend=backend) as client:
        assert client.get("/ann").text == "inner 1 for ann"
        assert client.get("/bob").text == "inner 2 for bob"
    assert events == ["begin 1", "outer 1", "commit 1", "begin 2", "outer 2", "commit 2"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
def test_a_websocket_endpoint_that_hands_over_to_another_shares_its_call_scope(
    mode: str, backend: str
) -> None:
    """A Starlette WebSocket endpoint that hands the connection to another injected
    endpoint: the other one resolves in the connection's CALL scope, so their resource
    opens once per connection."""
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket

    events: list[str] = []
    _, container, transaction = transaction_app(events, mode)

    @inject(container)
    async def inner(websocket: WebSocket, tx: Annotated[int, Resolve(transaction)]) -> None:
        await websocket.send_text(f"inner {tx}")

    @inject(container)
    async def outer(websocket: WebSocket, tx: Annotated[int, Resolve(transaction)]) -> None:
        await websocket.accept()
        events.append(f"outer {tx}")
        await inner(websocket)
        await websocket.close()

    app = Starlette(routes=[WebSocketRoute("/ws", outer)], lifespan=container.lifespan)
    received: list[str] = []
    with TestClient(app, backend=backend) as client:
        for _ in range(2):
            with client.websocket_connect("/ws") as websocket:
                received.append(websocket.receive_text())
    assert received == ["inner 1", "inner 2"]
    assert events == ["begin 1", "outer 1", "commit 1", "begin 2", "outer 2", "commit 2"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
def test_a_fastapi_websocket_routes_resolvers_take_the_websocket(mode: str, backend: str) -> None:
    """A FastAPI WebSocket route's resolvers get its `WebSocket` by type, as a request's
    get its `Request`, however the route starts."""
    from fastapi import WebSocket

    container = make_container(mode)

    async def room(websocket: WebSocket) -> str:
        return websocket.path_params["room"]

    app = FastAPI(lifespan=container.lifespan)

    @app.websocket("/rooms/{room}")
    @inject(container)
    async def chat(websocket: WebSocket, name: Annotated[str, Resolve(room)]) -> None:
        await websocket.accept()
        await websocket.send_text(f"welcome to {name}")
        await websocket.close()

    with TestClient(app, backend=backend) as client:
        for name in ("lobby", "kitchen"):
            with client.websocket_connect(f"/rooms/{name}") as websocket:
                assert websocket.receive_text() == f"welcome to {name}"


def test_a_fastapi_route_keeps_its_containers_deadline_and_concurrent_branches() -> None:
    # A container's call_timeout bounds each call and `concurrent` runs independent
    # branches at once: a FastAPI route keeps both, however it starts its plan.
    finished: list[str] = []

    def served(container: Container, dependency: Any) -> FastAPI:
        app = FastAPI(lifespan=container.lifespan)

        @app.get("/")
        @inject(container)
        async def route(value: Annotated[str, Resolve(dependency)]) -> str:
            return value

        return app

    async def slow() -> str:
        await anyio.sleep(5)
        finished.append("slow")
        return "slow"

    deadline = Container(call_timeout=0.05)
    with TestClient(served(deadline, slow), raise_server_exceptions=False) as client:
        assert client.get("/").status_code == 500  # cut at the deadline, not served late
    assert finished == []

    async def meeting() -> tuple[anyio.Event, anyio.Event]:
        return anyio.Event(), anyio.Event()

    async def left(met: Annotated[tuple[anyio.Event, anyio.Event], Resolve(meeting)]) -> str:
        met[0].set()
        with anyio.fail_after(4):  # one after the other, each would wait for the other
            await met[1].wait()
        return "left"

    async def right(met: Annotated[tuple[anyio.Event, anyio.Event], Resolve(meeting)]) -> str:
        met[1].set()
        with anyio.fail_after(4):
            await met[0].wait()
        return "right"

    async def both(a: Annotated[str, Resolve(left)], b: Annotated[str, Resolve(right)]) -> str:
        return f"{a} and {b}"

    with TestClient(served(Container(concurrent=True), both)) as client:
        assert client.get("/").json() == "left and right"


def failing_route_resource(shape: str, seen: list[str]) -> Any:
    """A CALL resource of *shape* that records what its teardown is given: the route's
    error (to roll back) or nothing (to commit)."""

    def saw(exc: BaseException | None, tb: Any = None) -> None:
        traced = "" if exc is None or tb is exc.__traceback__ else " without its traceback"
        seen.append(f"{shape} saw {exc!r}{traced}")

    async def async_generator() -> AsyncIterator[str]:
        try:
            yield "r"
        except BaseException as exc:
            saw(exc, exc.__traceback__)
            raise
        saw(None)

    def generator() -> Iterator[str]:
        try:
            yield "r"
        except BaseException as exc:
            saw(exc, exc.__traceback__)
            raise
        saw(None)

    class Async:
        async def __aenter__(self) -> str:
            return "r"

        async def __aexit__(self, tp: Any, exc: BaseException | None, tb: Any) -> None:
            saw(exc, tb)

    class Sync:
        def __enter__(self) -> str:
            return "r"

        def __exit__(self, tp: Any, exc: BaseException | None, tb: Any) -> None:
            saw(exc, tb)

    def async_cm() -> contextlib.AbstractAsyncContextManager[str]:
        return Async()

    def sync_cm() -> contextlib.AbstractContextManager[str]:
        return Sync()

    return {
        "async generator": async_generator,
        "generator": generator,
        "async context manager": async_cm,
        "context manager": sync_cm,
    }[shape]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shield", ["lazy", "eager"])
@pytest.mark.parametrize(
    "shape", ["async generator", "generator", "async context manager", "context manager"]
)
def test_a_failing_routes_error_reaches_its_resources_and_their_own_errors_are_notes(
    shape: str, shield: str, backend: str
) -> None:
    """A FastAPI route that raises: each CALL resource it opened is given the route's
    error as it closes (a transaction rolls back), one whose teardown fails too adds its
    error to the route's as a note, and the server reports the route's error. After a
    success they are given nothing (they commit). *shield* "eager": the teardown shield
    of an anyio or trio without the shape the lazy one reads (`resolvent._runtime.shield`)."""
    from unittest.mock import patch

    from resolvent._runtime import shield as _shield

    seen: list[str] = []
    container = make_container("generated")
    resource = failing_route_resource(shape, seen)

    async def broken() -> AsyncIterator[str]:
        try:
            yield "b"
        finally:
            raise RuntimeError("the connection broke while closing")

    app = FastAPI(lifespan=container.lifespan)

    @app.get("/")
    @inject(container)
    async def route(
        fail: bool, r: Annotated[str, Resolve(resource)], b: Annotated[str, Resolve(broken)]
    ) -> str:
        if fail:
            raise LookupError("the route failed")
        return r

    eager = [
        patch.object(_shield, "_ok", False),
        patch.object(_shield, "_trio_ok", False),
        patch.object(_shield, "_loop", None),
    ]
    with contextlib.ExitStack() as patches, TestClient(app, backend=backend) as client:
        for patched in eager if shield == "eager" else []:
            patches.enter_context(patched)
        with pytest.raises(LookupError) as caught:
            client.get("/", params={"fail": True})
        with pytest.raises(RuntimeError, match="the connection broke while closing"):
            client.get("/", params={"fail": False})
    assert seen == [f"{shape} saw LookupError('the route failed')", f"{shape} saw None"]
    assert getattr(caught.value, "__notes__", []) == [
        "resolvent: a finalizer also failed during teardown: "
        "RuntimeError('the connection broke while closing')"
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("way", ["route", "dependency and route", "dependency"])
def test_a_requests_writes_commit_once_it_succeeds_and_roll_back_when_it_fails(
    way: str, backend: str
) -> None:
    """A settling resource (a transaction) opened by the route, by an injected dependency
    the route shares its call scope with, or by an injected dependency of a plain route:
    it commits once the route has returned and rolls back, given the route's error, when
    the route raises (FastAPI answers 500)."""
    from resolvent import settles

    events: list[str] = []
    container = make_container("generated")

    @settles
    async def transaction() -> AsyncIterator[str]:
        events.append("begin")
        try:
            yield "tx"
        except BaseException as exc:
            events.append(f"rollback {exc!r}")
            raise
        events.append("commit")

    @inject(container)
    async def user(tx: Annotated[str, Resolve(transaction)]) -> str:
        return f"user in {tx}"

    app = FastAPI(lifespan=container.lifespan)
    if way == "route":

        @app.get("/")
        @inject(container)
        async def route(fail: bool, tx: Annotated[str, Resolve(transaction)]) -> str:
            if fail:
                raise LookupError("the route failed")
            return tx

    elif way == "dependency and route":

        @app.get("/")
        @inject(container)
        async def shared(
            fail: bool, who: Annotated[str, Depends(user)], tx: Annotated[str, Resolve(transaction)]
        ) -> str:
            if fail:
                raise LookupError("the route failed")
            return f"{who}, {tx}"

    else:

        @app.get("/")
        async def plain(fail: bool, who: Annotated[str, Depends(user)]) -> str:
            if fail:
                raise LookupError("the route failed")
            return who

    with TestClient(app, backend=backend, raise_server_exceptions=False) as client:
        assert client.get("/", params={"fail": False}).status_code == 200
        assert events == ["begin", "commit"]
        assert client.get("/", params={"fail": True}).status_code == 500
    assert events == ["begin", "commit", "begin", "rollback LookupError('the route failed')"]
