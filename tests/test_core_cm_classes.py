"""Providers whose class is itself a context manager: ``-> httpx.AsyncClient``,
``-> sqlite3.Connection``, a pool of your own.

The return annotation decides, at compile time: the provider is a resource, entered
when first needed and exited when its scope ends, whether the factory is a ``def`` or an
``async def``. What is injected is what ``__aenter__``/``__enter__`` returns, and
``Resolve()`` finds the provider by that type.
"""

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from typing import Annotated, Any, Generic, Self, TypeVar

import anyio
import httpx
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES as MCP_MODES
from mcp_helpers import client, text
from modes import MODES, make_container, run
from resolvent import Container, InvalidSignature, Resolve, Scope
from resolvent.mcp import inject
from snapshot import assert_snapshot

SCOPES = [Scope.CALL, Scope.SESSION, Scope.APP]


class Upstream:
    """A client of our own, shaped like httpx.AsyncClient: entering it opens it."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.open = False

    async def __aenter__(self) -> Self:
        self.open = True
        self.log.append("open")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.open = False
        self.log.append("close")

    async def get(self) -> str:
        assert self.open, "used while closed"
        return "pong"


class Files:
    """A sync context manager of our own, shaped like requests.Session or a file."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.open = False

    def __enter__(self) -> "Files":
        self.open = True
        self.log.append("open")
        return self

    def __exit__(self, *exc: object) -> None:
        self.open = False
        self.log.append("close")

    def get(self) -> str:
        assert self.open, "used while closed"
        return "pong"


def factories(log: list[str]) -> dict[str, Callable[..., Any]]:
    def sync_factory() -> Upstream:
        return Upstream(log)

    async def async_factory() -> Upstream:
        return Upstream(log)

    def sync_files() -> Files:
        return Files(log)

    async def async_files() -> Files:
        return Files(log)

    return {
        "def-async-cm": sync_factory,
        "async-def-async-cm": async_factory,
        "def-sync-cm": sync_files,
        "async-def-sync-cm": async_files,
    }


async def upstream_handler(up: Annotated[Upstream, Resolve()]) -> str:
    assert isinstance(up, Upstream)
    return await up.get()


def files_handler(files: Annotated[Files, Resolve()]) -> str:
    assert isinstance(files, Files)
    return files.get()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: s.name)
@pytest.mark.parametrize(
    "shape", ["def-async-cm", "async-def-async-cm", "def-sync-cm", "async-def-sync-cm"]
)
async def test_a_factory_of_a_context_manager_class_is_entered_and_closed(
    shape: str, scope: Scope, mode: str
) -> None:
    log: list[str] = []
    container = make_container(mode)
    container.provide(factories(log)[shape], scope=scope)
    handler = files_handler if shape.endswith("-sync-cm") else upstream_handler

    async with container:
        async with container.session() as session:
            assert await run(session, handler, mode) == "pong"
            assert await run(session, handler, mode) == "pong"
        log.append("session over")
    opened_per_call = ["open", "close", "open", "close", "session over"]
    expected = {
        Scope.CALL: opened_per_call,
        Scope.SESSION: ["open", "close", "session over"],
        Scope.APP: ["open", "session over", "close"],
    }[scope]
    assert log == expected


@pytest.mark.parametrize("shape", ["def-async-cm", "async-def-async-cm"])
async def test_a_call_resolves_a_client_under_its_own_deadline(shape: str) -> None:
    """``call.resolve`` inside the caller's own ``fail_after``: the client is still open
    after the deadline's block, and closed when the call ends."""
    log: list[str] = []
    container = Container()
    container.provide(factories(log)[shape])
    async with container.call() as call:
        with anyio.fail_after(30):
            up = (await call.resolve(upstream_handler))["up"]
        assert await up.get() == "pong"
        assert log == ["open"]
    assert log == ["open", "close"]


async def test_the_class_itself_as_provider_is_found_by_type() -> None:
    log: list[str] = []

    class Pool(Upstream):
        def __init__(self) -> None:
            super().__init__(log)

    container = Container()
    container.provide(Pool, scope=Scope.APP)

    async def handler(pool: Annotated[Pool, Resolve()]) -> str:
        return await pool.get()

    async with container:
        assert await container.run(handler) == "pong"
        assert log == ["open"]
    assert log == ["open", "close"]


class Connection:
    def __init__(self, pool: "Pool") -> None:
        self.pool = pool


class Pool:
    """A pool whose ``async with`` hands out a connection, not itself."""

    def __init__(self) -> None:
        self.log: list[str] = []

    async def __aenter__(self) -> Connection:
        self.log.append("acquire")
        return Connection(self)

    async def __aexit__(self, *exc: object) -> None:
        self.log.append("release")


POOL = Pool()


async def connection() -> Pool:
    return POOL


@pytest.mark.parametrize("mode", MODES)
async def test_what_enter_returns_is_injected_and_offered_by_its_type(
    mode: str,
) -> None:
    POOL.log.clear()
    container = make_container(mode)
    container.provide(connection)

    async def handler(conn: Annotated[Connection, Resolve()]) -> bool:
        return conn.pool is POOL

    assert await run(container, handler, mode) is True
    assert POOL.log == ["acquire", "release"]


@pytest.mark.parametrize("shape", ["def", "async def"])
async def test_sqlite_connection_commits_when_the_call_ends(shape: str) -> None:
    """sqlite3.Connection's ``with`` commits (or rolls back on error) at the end."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.execute("create table notes (text)")

    def sync_db() -> sqlite3.Connection:
        return db

    async def async_db() -> sqlite3.Connection:
        return db

    container = Container()
    container.provide(sync_db if shape == "def" else async_db)

    async def add(note: str, conn: Annotated[sqlite3.Connection, Resolve()]) -> bool:
        conn.execute("insert into notes values (?)", (note,))
        return conn.in_transaction

    async def fail(conn: Annotated[sqlite3.Connection, Resolve()]) -> None:
        conn.execute("insert into notes values ('lost')")
        raise LookupError("the body failed")

    assert await container.run(add, note="milk") is True  # open during the call
    assert not db.in_transaction  # committed when the call ended
    with pytest.raises(LookupError):
        await container.run(fail)
    assert [row[0] for row in db.execute("select text from notes")] == ["milk"]


@pytest.mark.parametrize("mode", MODES)
async def test_an_httpx_client_from_an_async_factory_is_closed(mode: str) -> None:
    made: list[httpx.AsyncClient] = []

    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="pong")

    container = make_container(mode)

    @container.provider(scope=Scope.APP)
    async def http() -> httpx.AsyncClient:
        made.append(httpx.AsyncClient(transport=httpx.MockTransport(reply)))
        return made[-1]

    async def ping(client: Annotated[httpx.AsyncClient, Resolve()]) -> str:
        return (await client.get("http://upstream/ping")).text

    async with container:
        assert await run(container, ping, mode) == "pong"
        assert await run(container, ping, mode) == "pong"
        assert len(made) == 1
        assert not made[0].is_closed
    assert made[0].is_closed


def test_the_plan_shows_the_factory_as_a_resource() -> None:
    container = Container()
    container.provide(factories([])["async-def-async-cm"])
    container.provide(connection)

    async def handler(
        up: Annotated[Upstream, Resolve()], conn: Annotated[Connection, Resolve()]
    ) -> None: ...

    lines = container.compile(handler).describe().splitlines()
    assert lines[1].split()[1:] == [
        "test_core_cm_classes.factories.<locals>.async_factory",
        *["CALL", "async", "context", "manager"],
    ]
    assert lines[2].split()[1:] == [
        "test_core_cm_classes.connection",
        *["CALL", "async", "context", "manager"],
    ]


@pytest.mark.parametrize("mode", MCP_MODES)
async def test_an_mcp_tool_uses_an_app_http_client_closed_at_shutdown(mode: str) -> None:
    made: list[httpx.AsyncClient] = []
    container = Container()
    server = MCPServer("proxy", lifespan=container.lifespan)

    @container.provider(scope=Scope.APP)
    async def http() -> httpx.AsyncClient:
        reply = httpx.Response(200, text="pong")
        made.append(httpx.AsyncClient(transport=httpx.MockTransport(lambda _: reply)))
        return made[-1]

    @server.tool()
    @inject(container)
    async def ping(client: Annotated[httpx.AsyncClient, Resolve()]) -> str:
        return (await client.get("http://upstream/ping")).text

    async with client(server, mode) as c:
        assert text(await c.call_tool("ping", {})) == "pong"
        assert text(await c.call_tool("ping", {})) == "pong"
        assert len(made) == 1
        assert not made[0].is_closed
    assert made[0].is_closed


def test_a_consumer_type_is_checked_against_what_enter_returns() -> None:
    async def wrong(conn: Annotated[Pool, Resolve(connection)]) -> None: ...

    async def right(conn: Annotated[Connection, Resolve(connection)]) -> None: ...

    with pytest.raises(InvalidSignature, match="expects Pool, but its resolver"):
        Container().compile(wrong)
    Container().compile(right)


def test_an_unannotated_enter_is_not_held_against_the_consumer() -> None:
    class Lock:
        async def __aenter__(self):  # type: ignore[no-untyped-def]  # what it enters is unknown
            return None

        async def __aexit__(self, *exc: object) -> None: ...

    def lock() -> Lock:
        return Lock()

    async def guarded(held: Annotated[None, Resolve(lock)]) -> None: ...

    Container().compile(guarded)


# -- locks: context managers whose entering gives nothing ------------------------------------


async def test_a_lock_wanted_as_itself_is_refused_with_the_fix() -> None:
    """``-> asyncio.Lock`` is entered for the scope like any context manager: an APP lock
    would be held until shutdown and None injected. Asking for the Lock says so."""
    container = Container()

    @container.provider(scope=Scope.APP)
    async def shared_lock() -> asyncio.Lock:
        return asyncio.Lock()

    async def named(lock: Annotated[asyncio.Lock, Resolve(shared_lock)]) -> None: ...

    async def by_type(lock: Annotated[asyncio.Lock, Resolve()]) -> None: ...

    with pytest.raises(InvalidSignature) as named_error:
        container.compile(named)
    with pytest.raises(InvalidSignature) as by_type_error:
        container.compile(by_type)
    where = f"{__name__}.test_a_lock_wanted_as_itself_is_refused_with_the_fix.<locals>."
    assert_snapshot("cm_class_wanted_itself", str(named_error.value).replace(where, ""))
    assert_snapshot("cm_class_wanted_itself_by_type", str(by_type_error.value).replace(where, ""))


async def test_a_shared_lock_registered_with_provides_is_injected_not_entered() -> None:
    """The fix the error gives: no return annotation, ``provides=`` for lookup by type."""
    container = Container()

    @container.provider(scope=Scope.APP, provides=anyio.Lock)
    async def shared_lock() -> Any:  # not `-> anyio.Lock`: the lock itself, not entered
        return anyio.Lock()

    async def bump(lock: Annotated[anyio.Lock, Resolve()]) -> bool:
        async with lock:
            return lock.locked()

    async with container:
        assert await container.run(bump) is True
        assert await container.run(bump) is True  # never held between calls


async def test_a_lock_returned_as_a_lock_is_held_for_the_call() -> None:
    """Entering is the point here: every call of the handler holds the shared lock."""
    lock = anyio.Lock()

    async def serialized() -> anyio.Lock:
        return lock

    async def handler(_: Annotated[None, Resolve(serialized)]) -> bool:
        return lock.locked()

    assert await Container().run(handler) is True
    assert not lock.locked()


class Conn:
    pass


T = TypeVar("T")


class GenericPool(Generic[T]):
    """``async with pool`` hands out a T; ``-> GenericPool[Conn]`` provides a Conn."""

    def __init__(self, make: Callable[[], T]) -> None:
        self.make = make
        self.out = 0

    async def __aenter__(self) -> T:
        self.out += 1
        return self.make()

    async def __aexit__(self, *exc: object) -> None:
        self.out -= 1


async def test_a_generic_pool_provides_its_type_argument() -> None:
    pool = GenericPool(Conn)

    def connections() -> GenericPool[Conn]:
        return pool

    container = Container()
    container.provide(connections)

    async def handler(conn: Annotated[Conn, Resolve()]) -> int:
        assert isinstance(conn, Conn)
        return pool.out

    assert await container.run(handler) == 1
    assert pool.out == 0


# -- an async factory that is slow to return its client ---------------------------------------


async def test_a_slow_async_factory_survives_the_first_callers_timeout() -> None:
    """The client's start belongs to the APP scope: a caller that times out stops waiting,
    the factory goes on, and the client is entered once and closed at shutdown."""
    log: list[str] = []
    release = anyio.Event()

    async def slow_client() -> Upstream:
        await release.wait()  # a DNS lookup, a token fetch...
        return Upstream(log)

    container = Container(call_timeout=0.05)
    container.provide(slow_client, scope=Scope.APP)

    async with container:
        with pytest.raises(TimeoutError):
            await container.run(upstream_handler)
        release.set()
        assert await container.run(upstream_handler) == "pong"
        assert await container.run(upstream_handler) == "pong"
        assert log == ["open"]
    assert log == ["open", "close"]


async def test_closing_the_container_stops_an_async_factory_still_awaited() -> None:
    log: list[str] = []
    cancelled: list[str] = []
    started = anyio.Event()

    async def never_ready() -> Upstream:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append("factory")
            raise
        return Upstream(log)

    container = Container(call_timeout=0.05)
    container.provide(never_ready, scope=Scope.APP)

    async with container:
        with pytest.raises(TimeoutError):
            await container.run(upstream_handler)
        await started.wait()
    assert cancelled == ["factory"]
    assert log == []  # never entered, so nothing to close


# -- a library's client class registered as it is ----------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_httpx_async_client_registered_as_the_provider_is_opened_and_closed(
    mode: str,
) -> None:
    """``container.provide(httpx.AsyncClient)``: its ``__init__`` names ``ssl.SSLContext``,
    imported only for type checkers; every parameter has a default, so it is built with
    those, entered, found by type and closed at shutdown."""
    seen: list[httpx.AsyncClient] = []
    container = make_container(mode)
    container.provide(httpx.AsyncClient, scope=Scope.APP)

    async def handler(client: Annotated[httpx.AsyncClient, Resolve()]) -> bool:
        seen.append(client)
        return client.is_closed

    async with container:
        assert await run(container, handler, mode) is False
        assert await run(container, handler, mode) is False
        assert seen[0] is seen[1]
    assert seen[0].is_closed


class NeedsUnimportable:
    def __init__(self, context: "ssl.SSLContext") -> None:  # type: ignore[name-defined]  # noqa: F821
        self.context = context


def test_an_unresolvable_annotation_without_a_default_is_still_refused() -> None:
    with pytest.raises(
        InvalidSignature, match=r"cannot read the annotations of .*NeedsUnimportable"
    ):
        Container().provide(NeedsUnimportable)


@pytest.mark.parametrize("mode", MODES)
async def test_an_async_factory_opens_sqlite_on_the_event_loop_thread(
    mode: str, tmp_path: Any
) -> None:
    """``async def db() -> sqlite3.Connection`` makes, enters and exits the connection on
    the event loop, where an async handler uses it: sqlite's same-thread check holds
    without ``check_same_thread=False``."""
    path = str(tmp_path / "notes.db")
    opened: list[sqlite3.Connection] = []

    async def db() -> sqlite3.Connection:
        opened.append(sqlite3.connect(path))
        opened[-1].execute("create table if not exists notes (text)")
        return opened[-1]

    async def add(conn: Annotated[sqlite3.Connection, Resolve(db)]) -> int:
        conn.execute("insert into notes values ('milk')")
        return len(conn.execute("select * from notes").fetchall())

    container = make_container(mode)
    assert await run(container, add, mode) == 1
    assert await run(container, add, mode) == 2  # the first call's insert was committed
    for conn in opened:  # sqlite's `with` commits; closing stays the owner's job
        conn.close()


def test_a_thread_semaphore_wanted_as_itself_is_refused_too() -> None:
    """Its ``__enter__`` is ``acquire()``: entering gives True, not the semaphore."""

    def slots() -> threading.Semaphore:
        return threading.Semaphore(4)

    def consumer(sem: Annotated[threading.Semaphore, Resolve(slots)]) -> None: ...

    with pytest.raises(InvalidSignature, match="injects what __enter__ gives, bool"):
        Container().compile(consumer)
