"""Calls as users write them: deadlines over worker threads, decorated and class-based
providers, sync handlers, and a call scope used after it closed."""

import threading
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import anyio
import anyio.to_thread
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES, client, text
from resolvent import Container, Resolve
from resolvent.mcp import inject

# -- call_timeout bounds worker-thread resolvers ----------------------------------------

DEADLINE_MODES = ["generated", "interpreter", "concurrent"]


class Gate:
    """A sync resolver's thread blocks on `release`; the test sees when it got there."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def block(self) -> None:
        self.entered.set()
        self.release.wait(10)

    async def let_go(self) -> bool:
        """Release the abandoned thread and wait until it has run to completion.

        Returns False if it never started (a setup abandoned before its thread began)."""
        self.release.set()
        if not self.entered.is_set() and not await anyio.to_thread.run_sync(self.entered.wait, 1):
            return False
        assert await anyio.to_thread.run_sync(self.finished.wait, 10)
        return True


async def _run(container: Container, handler: Any, mode: str) -> Any:
    if mode == "interpreter":  # a multi-round call is interpreted step by step
        async with container.call(rounds=True) as call:
            return await call.run(handler)
    return await container.run(handler)


@pytest.mark.parametrize("mode", DEADLINE_MODES)
async def test_call_timeout_abandons_a_slow_sync_resolver_and_closes_what_it_was_given(
    mode: str,
) -> None:
    gate = Gate()
    log: list[str] = []

    async def connection() -> AsyncIterator[str]:
        log.append("open connection")
        try:
            yield "conn"
        finally:
            log.append("close connection")

    async def tracer() -> AsyncIterator[str]:
        log.append("open tracer")
        try:
            yield "trace"
        finally:
            log.append("close tracer")

    def report(conn: Annotated[str, Resolve(connection)]) -> str:  # sync: a worker thread
        gate.block()
        log.append(f"late report on {conn}")
        gate.finished.set()
        return "report"

    async def handler(
        t: Annotated[str, Resolve(tracer)], r: Annotated[str, Resolve(report)]
    ) -> str:
        log.append("handler ran")
        return r

    # 1 s leaves the two async set-ups room to finish first on a loaded machine.
    container = Container(call_timeout=1, concurrent=mode == "concurrent")
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        await _run(container, handler, mode)
    # The call failed while the thread was still blocked: it did not wait for it.
    assert not gate.finished.is_set()
    assert sorted(log) == ["close connection", "close tracer", "open connection", "open tracer"]
    if mode != "concurrent":  # closed in reverse order of setup
        assert log == ["open tracer", "open connection", "close connection", "close tracer"]
    started = await gate.let_go()
    assert "handler ran" not in log
    if started:  # it ran on, after the call; its result dropped
        assert log[-1] == "late report on conn"


@pytest.mark.parametrize("mode", DEADLINE_MODES)
async def test_call_timeout_abandons_a_slow_sync_generator_setup_which_closes_itself(
    mode: str,
) -> None:
    gate = Gate()
    log: list[str] = []

    def database() -> Iterator[str]:  # a sync generator: set up in a worker thread
        gate.block()
        log.append("opened late")
        yield "db"
        log.append("closed late")
        gate.finished.set()

    async def handler(db: Annotated[str, Resolve(database)]) -> str:
        log.append("handler ran")
        return db

    container = Container(call_timeout=0.2, concurrent=mode == "concurrent")
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        await _run(container, handler, mode)
    assert not gate.finished.is_set()
    started = await gate.let_go()
    assert log == (["opened late", "closed late"] if started else [])


async def test_a_fast_sync_resolver_under_a_deadline_still_gives_its_value() -> None:
    def database() -> Iterator[str]:
        yield "db"

    def user(db: Annotated[str, Resolve(database)]) -> str:
        return f"user via {db}"

    async def handler(u: Annotated[str, Resolve(user)]) -> str:
        return u

    for concurrent in (False, True):
        container = Container(call_timeout=60, concurrent=concurrent)
        assert await container.run(handler) == "user via db"


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_tool_call_times_out_on_a_slow_sync_resolver(mode: str) -> None:
    gate = Gate()

    def lookup() -> str:
        gate.block()
        gate.finished.set()
        return "late"

    container = Container(call_timeout=0.2)
    server = MCPServer("deadline", lifespan=container.lifespan)

    @server.tool()
    @inject(container)
    async def find(found: Annotated[str, Resolve(lookup)]) -> str:
        return found

    async with client(server, mode) as c:
        with anyio.fail_after(5):
            result = await c.call_tool("find", {})
        assert result.is_error and not gate.finished.is_set()
        assert "late" not in text(result)
    await gate.let_go()
