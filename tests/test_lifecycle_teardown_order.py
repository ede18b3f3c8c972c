"""Resources are closed in reverse order of the end of their set-up, in every mode, on
asyncio and trio, for CALL, SESSION and APP scopes, also when set-ups overlap: branches
of a concurrent call, or calls opening shared values at the same time.

Each provider records "open NAME" as the last thing its set-up does and "closed NAME"
as the first thing its teardown does; the rule is then that the "closed" events are
the "open" events reversed. Where two set-ups end in one pass of the event loop, the
order the tasks waiting for them wake in must not matter (trio picks it at random).
"""

from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import client, text
from modes import MODES, make_container, run
from resolvent import Container, Resolve, Scope, Session
from resolvent.mcp import inject

# The modes of tests/modes.py, and a call scope of one's own, sequential or concurrent,
# used through `call.run` or `call.resolve`.
CALL_MODES = [*MODES, "call.run", "call.resolve", "concurrent call.run", "concurrent call.resolve"]

RACES = 20
"""Calls per test whose set-ups end in one pass of the event loop: on trio, a close
order taken from the order the waiting tasks wake in is wrong in about half of them."""


def closed_in_reverse(events: list[str]) -> list[str]:
    """The names in *events*, as opened; asserts they were closed in reverse."""
    opened = [e.removeprefix("open ") for e in events if e.startswith("open ")]
    closed = [e.removeprefix("closed ") for e in events if e.startswith("closed ")]
    assert sorted(opened) == sorted(closed), events
    assert closed == opened[::-1], events
    return opened


def resource(
    name: str, events: list[str], gates: dict[str, anyio.Event] | None = None
) -> Callable[[], AsyncIterator[str]]:
    """An async-generator resource recording its set-up's end and its teardown's start;
    its set-up waits for ``gates["NAME after"]`` and then sets ``gates["NAME opened"]``,
    those of them that are there."""

    async def provider() -> AsyncIterator[str]:
        after = (gates or {}).get(f"{name} after")
        if after is not None:
            await after.wait()
        events.append(f"open {name}")
        opened = (gates or {}).get(f"{name} opened")
        if opened is not None:
            opened.set()
        yield name
        events.append(f"closed {name}")

    provider.__name__ = provider.__qualname__ = name
    return provider


def concurrent(mode: str) -> bool:
    return mode.startswith("concurrent")


async def call_in(container: Container, handler: Callable[..., Any], mode: str) -> Any:
    """Call *handler* as *mode* says (see `CALL_MODES`)."""
    if "call." not in mode:
        return await run(container, handler, mode)
    async with container.call(concurrent=concurrent(mode)) as call:
        if mode.endswith("call.run"):
            return await call.run(handler)
        return "".join((await call.resolve(handler)).values())


@pytest.mark.parametrize("mode", CALL_MODES)
async def test_call_resources_close_in_reverse_order_of_their_set_up(mode: str) -> None:
    """Declared a, b: in a sequential mode a opens first; in a concurrent one a's set-up
    waits until b has opened. Either way the one opened last closes first."""
    events: list[str] = []
    gates: dict[str, anyio.Event] = {}
    a, b = resource("a", events, gates), resource("b", events, gates)

    async def handler(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
        return x + y

    async with make_container("call" if "call." in mode else mode) as container:
        for _ in range(3):  # the first calls of a plan, and its hot code after them
            events.clear()
            gates["b opened"] = anyio.Event()
            if concurrent(mode):
                gates["a after"] = gates["b opened"]
            assert await call_in(container, handler, mode) == "ab"
            expected = ["b", "a"] if concurrent(mode) else ["a", "b"]
            assert closed_in_reverse(events) == expected


@pytest.mark.parametrize("mode", CALL_MODES)
async def test_call_resources_whose_set_ups_end_at_once_close_in_reverse_order(
    mode: str,
) -> None:
    """Three resources whose set-ups do not suspend: a concurrent call opens them in
    one pass of the event loop, in an order of the loop's choosing."""
    events: list[str] = []
    a, b, c = (resource(n, events) for n in "abc")

    async def handler(
        x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)], z: Annotated[str, Resolve(c)]
    ) -> str:
        return x + y + z

    async with make_container("call" if "call." in mode else mode) as container:
        for _ in range(RACES):
            events.clear()
            assert await call_in(container, handler, mode) == "abc"
            opened = closed_in_reverse(events)
            if not concurrent(mode):
                assert opened == ["a", "b", "c"]


@pytest.mark.parametrize("scope", [Scope.APP, Scope.SESSION])
@pytest.mark.parametrize("mode", CALL_MODES)
async def test_shared_resources_opened_by_concurrent_calls_close_in_reverse_order(
    mode: str, scope: Scope
) -> None:
    """Two calls at once, each the first to need one shared resource: a's set-up
    starts first and ends last, so a closes first."""
    events: list[str] = []
    a_started, b_opened = anyio.Event(), anyio.Event()
    container = make_container("call" if "call." in mode else mode)

    @container.provider(scope=scope)
    async def a() -> AsyncIterator[int]:
        a_started.set()
        await b_opened.wait()
        events.append("open a")
        yield 1
        events.append("closed a")

    @container.provider(scope=scope)
    async def b() -> AsyncIterator[str]:
        events.append("open b")
        b_opened.set()
        yield "b"
        events.append("closed b")

    async def uses_a(x: Annotated[int, Resolve(a)]) -> int:
        return x

    async def uses_b(y: Annotated[str, Resolve(b)]) -> str:
        return y

    async def both(runner: Container | Session) -> None:
        async def first() -> None:
            await call_on(runner, uses_a, mode)

        async def second() -> None:
            await a_started.wait()  # a's set-up is under way before b's starts
            await call_on(runner, uses_b, mode)

        async with anyio.create_task_group() as group:
            group.start_soon(first)
            group.start_soon(second)
        events.append("calls done")

    async with container:
        if scope is Scope.SESSION:
            async with container.session() as session:
                await both(session)
        else:
            await both(container)
    assert events[:3] == ["open b", "open a", "calls done"]
    assert closed_in_reverse(events) == ["b", "a"]


async def call_on(runner: Container | Session, handler: Callable[..., Any], mode: str) -> Any:
    """`call_in` for a container or a session."""
    if "call." not in mode:
        return await run(runner, handler, mode)
    async with runner.call(concurrent=concurrent(mode)) as call:
        if mode.endswith("call.run"):
            return await call.run(handler)
        return (await call.resolve(handler)).popitem()[1]


async def test_an_mcp_tools_resources_close_in_reverse_order_of_their_set_up() -> None:
    """A tool of a concurrent container, called through the SDK's in-memory client:
    its CALL resources, set up at once, and SESSION and APP ones opened by two
    tool calls at once, each close in reverse order of their set-up's end."""
    events: list[str] = []
    container = Container(concurrent=True)
    server = MCPServer("order", lifespan=container.lifespan)
    a, b, c = (resource(n, events) for n in "abc")

    @server.tool()
    @inject(container)
    async def three(
        x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)], z: Annotated[str, Resolve(c)]
    ) -> str:
        return x + y + z

    shared: dict[Scope, list[str]] = {Scope.APP: [], Scope.SESSION: []}
    started = {s: anyio.Event() for s in shared}
    opened = {s: anyio.Event() for s in shared}

    def slow(scope: Scope) -> Callable[[], AsyncIterator[str]]:
        async def provider() -> AsyncIterator[str]:
            started[scope].set()
            await opened[scope].wait()
            shared[scope].append("open slow")
            yield "slow"
            shared[scope].append("closed slow")

        provider.__name__ = provider.__qualname__ = f"slow_{scope.name.lower()}"
        return container.provider(scope=scope)(provider)

    def fast(scope: Scope) -> Callable[[], AsyncIterator[str]]:
        async def provider() -> AsyncIterator[str]:
            shared[scope].append("open fast")
            opened[scope].set()
            yield "fast"
            shared[scope].append("closed fast")

        provider.__name__ = provider.__qualname__ = f"fast_{scope.name.lower()}"
        return container.provider(scope=scope)(provider)

    slow_app, fast_app, slow_session, fast_session = (
        slow(Scope.APP),
        fast(Scope.APP),
        slow(Scope.SESSION),
        fast(Scope.SESSION),
    )

    @server.tool()
    @inject(container)
    async def slow_ones(
        x: Annotated[str, Resolve(slow_app)], y: Annotated[str, Resolve(slow_session)]
    ) -> str:
        return x + y

    @server.tool()
    @inject(container)
    async def fast_ones(
        x: Annotated[str, Resolve(fast_app)], y: Annotated[str, Resolve(fast_session)]
    ) -> str:
        return x + y

    async with client(server, "legacy") as session:
        for _ in range(RACES):
            events.clear()
            result = await session.call_tool("three", {})
            assert not result.is_error, text(result)
            closed_in_reverse(events)

        async def slow_call() -> None:
            assert text(await session.call_tool("slow_ones", {})) == "slowslow"

        async def fast_call() -> None:
            await started[Scope.APP].wait()
            await started[Scope.SESSION].wait()
            assert text(await session.call_tool("fast_ones", {})) == "fastfast"

        async with anyio.create_task_group() as group:
            group.start_soon(slow_call)
            group.start_soon(fast_call)
    for scope in shared:
        assert closed_in_reverse(shared[scope]) == ["fast", "slow"]
