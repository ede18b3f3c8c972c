"""Eager start: a server opens its pool before it accepts traffic.

``await container.start(pool)`` on an open container, or ``Container(warm=[pool])`` on
entry (and so in the MCP server lifespan), creates APP values now with their APP
dependencies, waits for them, and says clearly which provider failed to start and why.
"""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import anyio
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import client, text
from resolvent import Container, Resolve, ResolventError, Scope
from resolvent.mcp import inject
from snapshot import assert_snapshot


class Settings:
    dsn = "postgres://db"


class Pool:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn


class Cache:
    pass


class Tracer:
    pass


def pool_app(events: list[str], *, fail: bool = False, warm: tuple[type, ...] = ()) -> Container:
    """A container with settings and a pool (which fails to connect when *fail*)."""
    container = Container(warm=warm)

    @container.provider(scope=Scope.APP)
    def settings() -> Settings:
        events.append("settings read")
        return Settings()

    @container.provider(scope=Scope.APP)
    async def pool(s: Annotated[Settings, Resolve(settings)]) -> AsyncIterator[Pool]:
        events.append("pool opening")
        if fail:
            raise ConnectionRefusedError(f"cannot reach {s.dsn}")
        yield Pool(s.dsn)
        events.append("pool closed")

    return container


async def handler(pool: Annotated[Pool, Resolve()]) -> str:
    return pool.dsn


async def test_start_opens_the_pool_and_its_settings_before_the_first_call() -> None:
    events: list[str] = []
    container = pool_app(events)
    async with container:
        await container.start(Pool)  # by provided type, as Resolve() finds it
        assert events == ["settings read", "pool opening"]
        assert await container.run(handler) == "postgres://db"
        await container.start(Pool)  # already open: nothing happens
        assert events == ["settings read", "pool opening"]
    assert events == ["settings read", "pool opening", "pool closed"]


async def test_warm_starts_on_entry_and_every_entry_waits_for_it() -> None:
    events: list[str] = []
    container = pool_app(events, warm=(Pool, Cache))
    gate = anyio.Event()

    @container.provider(scope=Scope.APP)
    async def cache() -> Cache:
        await gate.wait()
        events.append("cache filled")
        return Cache()

    entered: list[str] = []

    async def serve(name: str) -> None:
        async with container:
            entered.append(name)
            assert events[-1] == "cache filled"

    async with anyio.create_task_group() as group:
        group.start_soon(serve, "first")
        group.start_soon(serve, "second")
        await anyio.wait_all_tasks_blocked()
        assert entered == []  # nobody serves before the warm values exist
        gate.set()
    assert sorted(entered) == ["first", "second"]
    assert events.count("pool opening") == 1
    assert events[-1] == "pool closed"


def read_settings() -> Settings:
    return Settings()


async def unreachable_pool(s: Annotated[Settings, Resolve(read_settings)]) -> AsyncIterator[Pool]:
    raise ConnectionRefusedError(f"cannot reach {s.dsn}")
    yield Pool(s.dsn)


async def test_a_failed_start_names_the_provider_and_keeps_the_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    container = Container()
    container.provide(read_settings, scope=Scope.APP)
    container.provide(unreachable_pool, scope=Scope.APP)
    async with container:
        with (
            caplog.at_level(logging.DEBUG, logger="resolvent"),
            pytest.raises(ResolventError) as caught,
        ):
            await container.start(Pool)
        # The whole chain, for whoever asks for detail.
        [record] = [r for r in caplog.records if r.name == "resolvent"]
        assert record.levelno == logging.DEBUG and record.exc_info
        assert record.exc_info[1] is caught.value.__context__
        assert_snapshot("start_failed", str(caught.value))
        # The cause is kept, but not printed again under the error that says it.
        assert isinstance(caught.value.__context__, ConnectionRefusedError)
        assert caught.value.__cause__ is None and caught.value.__suppress_context__


async def test_after_a_failed_start_the_container_stays_open_and_tries_again() -> None:
    events: list[str] = []
    container = pool_app(events, fail=True)
    async with container:
        with pytest.raises(ResolventError):
            await container.start(Pool)
        with pytest.raises(ResolventError):
            await container.start(Pool)  # tried again, not a cached failure
        # The settings read before the failure are kept.
        assert events == ["settings read", "pool opening", "pool opening"]


async def test_a_failed_warm_start_leaves_the_container_closed_and_closes_what_opened(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[str] = []
    container = pool_app(events, warm=(Tracer, Pool, int))
    thrown: list[BaseException | None] = []

    @container.provider(scope=Scope.APP)
    async def tracer() -> AsyncIterator[Tracer]:
        try:
            yield Tracer()
        except BaseException as error:  # what teardown threw into it, if anything
            thrown.append(error)
            raise
        thrown.append(None)

    @container.provider(scope=Scope.APP)
    async def broken() -> int:
        raise OSError("disk full")

    with caplog.at_level(logging.ERROR, logger="resolvent"), pytest.raises(ResolventError) as err:
        async with container:
            pytest.fail("the body must not run when the warm start fails")
    last = str(err.value).splitlines()[-1]
    assert last.startswith("test_lifecycle_start.")
    assert last.endswith("broken (Scope.APP) failed to start: OSError: disk full")
    assert not container.is_open
    # What opened was closed cleanly: the failure was not theirs.
    assert thrown == [None]
    assert events[-1] == "pool closed"


async def current_user() -> str:
    return "u1"


@pytest.mark.parametrize("scope", [Scope.CALL, Scope.SESSION])
async def test_start_refuses_values_that_are_not_app_scoped(scope: Scope) -> None:
    container = Container()
    container.provide(current_user, scope=scope)
    async with container:
        with pytest.raises(ResolventError) as caught:
            await container.start(current_user)
    assert_snapshot(f"start_refuses_{scope.name.lower()}", str(caught.value))


async def test_start_refuses_an_unregistered_function_and_a_closed_container() -> None:
    container = Container()

    async def helper() -> str:
        return "not registered"

    with pytest.raises(ResolventError) as caught:
        await container.start(helper)
    assert_snapshot("start_closed_container", str(caught.value))
    async with container:
        with pytest.raises(ResolventError, match=r"it is Scope\.CALL"):
            await container.start(helper)


async def test_a_start_joins_the_start_a_timed_out_call_began() -> None:
    gate = anyio.Event()
    opened: list[str] = []
    container = Container(call_timeout=0.05)

    @container.provider(scope=Scope.APP)
    async def slow_pool() -> AsyncIterator[Pool]:
        await gate.wait()
        opened.append("pool")
        yield Pool("slow")

    async def use(pool: Annotated[Pool, Resolve(slow_pool)]) -> str:
        return pool.dsn

    async with container:
        with pytest.raises(TimeoutError):
            await container.run(use)  # stops waiting; the start goes on
        async with anyio.create_task_group() as group:
            group.start_soon(container.start, slow_pool)
            await anyio.wait_all_tasks_blocked()
            gate.set()
        assert opened == ["pool"]
        assert await container.run(use) == "slow"


# -- the MCP server lifespan ------------------------------------------------------------


def mcp_server(events: list[str], *, fail: bool = False, own_lifespan: bool = False) -> MCPServer:
    container = pool_app(events, fail=fail, warm=() if own_lifespan else (Pool,))

    @asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[None]:
        await container.start(Pool)
        events.append("accepting")
        yield

    if own_lifespan:
        server = MCPServer("db", lifespan=container.wrap_lifespan(lifespan))
    else:
        server = MCPServer("db", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    async def dsn(pool: Annotated[Pool, Resolve()]) -> str:
        return pool.dsn

    return server


@pytest.mark.parametrize("own_lifespan", [False, True], ids=["warm", "start"])
async def test_an_mcp_server_opens_its_pool_before_the_first_call(own_lifespan: bool) -> None:
    events: list[str] = []
    server = mcp_server(events, own_lifespan=own_lifespan)
    async with client(server, "legacy") as c:
        assert events[:2] == ["settings read", "pool opening"]
        assert text(await c.call_tool("dsn", {})) == "postgres://db"
        assert events.count("pool opening") == 1
    assert events[-1] == "pool closed"


async def test_an_mcp_server_whose_pool_cannot_start_does_not_serve() -> None:
    events: list[str] = []
    server = mcp_server(events, fail=True)
    with pytest.raises(ExceptionGroup) as caught:  # the SDK's task group wraps it
        async with client(server, "legacy") as c:
            await c.call_tool("dsn", {})
    assert caught.group_contains(ResolventError, match=r"failed to start: ConnectionRefused")
    assert events == ["settings read", "pool opening"]
