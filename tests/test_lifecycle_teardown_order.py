"""Resources are closed in reverse order of the end of their set-up, in every mode, on
asyncio and trio, for CALL, SESSION and APP scopes, also when set-ups overlap: branches
of a concurrent call, or calls opening shared values at the same time.

Each provider records "open NAME" as the last thing its set-up does and "closed NAME"
as the first thing its teardown does; the rule is then that the "closed" events are
the "open" events reversed. Where two set-ups end in one pass of the event loop, the
order the tasks waiting for them wake in must not matter (trio picks it at random).
"""

import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any

import anyio
import anyio.to_thread
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import client, text
from modes import MODES, make_container, run
from resolvent import Container, Resolve, Scope, Session, inline
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

    await on_app_or_session(container, scope, both)
    assert events[:3] == ["open b", "open a", "calls done"]
    assert closed_in_reverse(events) == ["b", "a"]


async def on_app_or_session(
    container: Container, scope: Scope, both: Callable[[Container | Session], Any]
) -> None:
    """With *container* open, await *both* on it (APP) or on a session of it (SESSION)."""
    async with container:
        if scope is Scope.SESSION:
            async with container.session() as session:
                await both(session)
        else:
            await both(container)


async def call_on(runner: Container | Session, handler: Callable[..., Any], mode: str) -> Any:
    """`call_in` for a container or a session."""
    if "call." not in mode:
        return await run(runner, handler, mode)
    async with runner.call(concurrent=concurrent(mode)) as call:
        if mode.endswith("call.run"):
            return await call.run(handler)
        return (await call.resolve(handler)).popitem()[1]


def slow_and_fast_tools(
    server: MCPServer,
    container: Container,
    slow: Callable[[Scope], Any],
    fast: Callable[[Scope], Any],
) -> None:
    """Two tools of *server*: ``slow_ones`` takes the APP and SESSION resources *slow*
    makes, ``fast_ones`` those *fast* makes (each resource's value, joined)."""
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

    slow_and_fast_tools(server, container, slow, fast)

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


# Sync resources (a plain generator, a sync context manager) set up in worker threads.
# Their set-up ends "when the event loop receives its result": a thread that finished
# first but whose result the loop has not taken yet has not ended. To make the order
# deterministic, a set-up that must end second waits, in its thread, for a sign given
# on the event loop once the first one's value has been received (a resolver that
# uses it ran, or the call that opened it returned).

WAIT = 10
"""Seconds: the bound of every wait of these tests, in a worker thread or on the loop."""


def sync_resource(
    name: str,
    events: list[str],
    *,
    after: threading.Event | None = None,
    started: threading.Event | None = None,
    manager: bool = False,
) -> Callable[[], Any]:
    """A sync resource recording its set-up's end and its teardown's start, as `resource`
    does: a generator, or with *manager* a `contextlib.contextmanager`. Its set-up sets
    *started*, then waits (bounded) for *after*, those of them that are given."""

    def provider() -> Iterator[str]:
        if started is not None:
            started.set()
        if after is not None:
            assert after.wait(WAIT), f"the set-up of {name} waited for its turn in vain"
        events.append(f"open {name}")
        yield name
        events.append(f"closed {name}")

    provider.__name__ = provider.__qualname__ = name
    return contextlib.contextmanager(provider) if manager else provider


KINDS = ["sync, sync", "sync, async", "async, sync"]
"""What the resources a and b of a test are: set up in a worker thread, or async."""


@pytest.mark.parametrize("kinds", KINDS)
@pytest.mark.parametrize("mode", CALL_MODES)
async def test_sync_call_resources_close_in_reverse_order_of_their_set_up(
    mode: str, kinds: str
) -> None:
    """Declared a, b, at least one of them sync, set up in a worker thread. In a
    sequential mode a opens first; in a concurrent one their set-ups run at once, and a's
    waits until the event loop has received b's value. The one opened last closes first."""
    events: list[str] = []
    kind_a, kind_b = kinds.split(", ")
    gates: dict[str, anyio.Event] = {}  # a's turn, when a is async
    b_seen = threading.Event()  # a's turn, when a is sync
    if kind_a == "sync":
        a = sync_resource("a", events, after=b_seen if concurrent(mode) else None)
    else:
        a = resource("a", events, gates)
    b = sync_resource("b", events, manager=True) if kind_b == "sync" else resource("b", events)

    async def seen_b(y: Annotated[str, Resolve(b)]) -> str:
        b_seen.set()
        if "b seen" in gates:
            gates["b seen"].set()
        return y

    async def handler(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(seen_b)]) -> str:
        return x + y

    async with make_container("call" if "call." in mode else mode) as container:
        for _ in range(3):  # the first calls of a plan, and its hot code after them
            events.clear()
            b_seen.clear()
            gates["b seen"] = anyio.Event()
            if concurrent(mode):
                gates["a after"] = gates["b seen"]
            with anyio.fail_after(WAIT):
                assert await call_in(container, handler, mode) == "ab"
            expected = ["b", "a"] if concurrent(mode) else ["a", "b"]
            assert closed_in_reverse(events) == expected


async def test_three_sync_call_resources_close_in_reverse_order_of_their_set_up() -> None:
    """A concurrent call sets up a, b and c in worker threads at once; c's set-up ends
    first, then b's (it waits until the loop has c's value), then a's."""
    events: list[str] = []
    b_seen, c_seen = threading.Event(), threading.Event()
    a = sync_resource("a", events, after=b_seen)
    b = sync_resource("b", events, after=c_seen, manager=True)
    c = sync_resource("c", events)

    async def seen_b(y: Annotated[str, Resolve(b)]) -> str:
        b_seen.set()
        return y

    async def seen_c(z: Annotated[str, Resolve(c)]) -> str:
        c_seen.set()
        return z

    async def handler(
        x: Annotated[str, Resolve(a)],
        y: Annotated[str, Resolve(seen_b)],
        z: Annotated[str, Resolve(seen_c)],
    ) -> str:
        return x + y + z

    for mode in ["concurrent", "concurrent call.run", "concurrent call.resolve"]:
        async with make_container("concurrent" if mode == "concurrent" else "call") as container:
            for _ in range(3):
                events.clear()
                b_seen.clear()
                c_seen.clear()
                with anyio.fail_after(WAIT):
                    assert await call_in(container, handler, mode) == "abc"
                assert closed_in_reverse(events) == ["c", "b", "a"], mode


@pytest.mark.parametrize("kinds", KINDS)
@pytest.mark.parametrize("scope", [Scope.APP, Scope.SESSION])
@pytest.mark.parametrize("mode", CALL_MODES)
async def test_sync_shared_resources_opened_by_concurrent_calls_close_in_reverse_order(
    mode: str, scope: Scope, kinds: str
) -> None:
    """Two calls at once, each the first to need one shared resource, at least one of
    them sync, set up in a worker thread: a's set-up starts first and waits until the
    call that opened b has returned, so a closes first."""
    events: list[str] = []
    kind_a, kind_b = kinds.split(", ")
    a_started, b_seen = threading.Event(), threading.Event()
    b_returned = anyio.Event()
    container = make_container("call" if "call." in mode else mode)

    if kind_a == "sync":
        a = container.provider(scope=scope)(
            sync_resource("a", events, started=a_started, after=b_seen)
        )
    else:

        @container.provider(scope=scope)
        async def a() -> AsyncIterator[str]:
            a_started.set()
            await b_returned.wait()
            events.append("open a")
            yield "a"
            events.append("closed a")

    if kind_b == "sync":
        b = container.provider(scope=scope)(sync_resource("b", events, manager=True))
    else:
        b = container.provider(scope=scope)(resource("b", events))

    async def uses_a(x: Annotated[str, Resolve(a)]) -> str:
        return x

    async def uses_b(y: Annotated[str, Resolve(b)]) -> str:
        return y

    async def both(runner: Container | Session) -> None:
        async def first() -> None:
            assert await call_on(runner, uses_a, mode) == "a"

        async def second() -> None:
            # a's set-up is under way before b's starts (a sign given in a's thread, if sync)
            assert await anyio.to_thread.run_sync(a_started.wait, WAIT)
            assert await call_on(runner, uses_b, mode) == "b"
            b_seen.set()
            b_returned.set()

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as group:
                group.start_soon(first)
                group.start_soon(second)
        events.append("calls done")

    await on_app_or_session(container, scope, both)
    assert events[:3] == ["open b", "open a", "calls done"]
    assert closed_in_reverse(events) == ["b", "a"]


@pytest.mark.parametrize("mode", CALL_MODES)
async def test_inline_sync_resources_close_in_reverse_order_of_their_set_up(mode: str) -> None:
    """Sync resources marked inline are set up on the event loop's thread, one after the
    other even in a concurrent call, in an order of the loop's choosing there; an async
    one that waits until the loop has one of their values ends after it. Each call closes
    them in reverse order of their set-up's end."""
    events: list[str] = []
    loop_thread = threading.get_ident()
    threads: set[int] = set()
    gates: dict[str, anyio.Event] = {}

    def inline_resource(name: str, *, manager: bool = False) -> Callable[[], Any]:
        def provider() -> Iterator[str]:
            threads.add(threading.get_ident())
            events.append(f"open {name}")
            yield name
            events.append(f"closed {name}")

        provider.__name__ = provider.__qualname__ = name
        return inline(contextlib.contextmanager(provider) if manager else provider)

    a, b, c = inline_resource("a"), inline_resource("b", manager=True), inline_resource("c")
    d = resource("d", events, gates)

    async def seen_c(z: Annotated[str, Resolve(c)]) -> str:
        gates["c seen"].set()
        return z

    async def handler(
        w: Annotated[str, Resolve(d)],
        x: Annotated[str, Resolve(a)],
        y: Annotated[str, Resolve(b)],
        z: Annotated[str, Resolve(seen_c)],
    ) -> str:
        return w + x + y + z

    async with make_container("call" if "call." in mode else mode) as container:
        for _ in range(RACES):
            events.clear()
            gates["c seen"] = anyio.Event()
            if concurrent(mode):
                gates["d after"] = gates["c seen"]
            with anyio.fail_after(WAIT):
                assert await call_in(container, handler, mode) == "dabc"
            opened = closed_in_reverse(events)
            if concurrent(mode):
                assert opened.index("d") > opened.index("c"), events
            else:
                assert opened == ["d", "a", "b", "c"]
    assert threads == {loop_thread}


async def test_an_mcp_tools_sync_resources_close_in_reverse_order_of_their_set_up() -> None:
    """`test_an_mcp_tools_resources_close_in_reverse_order_of_their_set_up` with sync
    resources set up in worker threads: CALL ones set up at once, whose set-ups end c,
    then b, then a; and SESSION and APP ones opened by two tool calls at once, the slow
    ones' set-ups started first and ended once the fast ones' call has returned."""
    events: list[str] = []
    container = Container(concurrent=True)
    server = MCPServer("order", lifespan=container.lifespan)
    b_seen, c_seen = threading.Event(), threading.Event()
    a = sync_resource("a", events, after=b_seen)
    b = sync_resource("b", events, after=c_seen, manager=True)
    c = sync_resource("c", events)

    async def seen_b(y: Annotated[str, Resolve(b)]) -> str:
        b_seen.set()
        return y

    async def seen_c(z: Annotated[str, Resolve(c)]) -> str:
        c_seen.set()
        return z

    @server.tool()
    @inject(container)
    async def three(
        x: Annotated[str, Resolve(a)],
        y: Annotated[str, Resolve(seen_b)],
        z: Annotated[str, Resolve(seen_c)],
    ) -> str:
        return x + y + z

    shared: dict[Scope, list[str]] = {Scope.APP: [], Scope.SESSION: []}
    started = {s: threading.Event() for s in shared}
    fast_returned = threading.Event()

    def slow(scope: Scope) -> Callable[[], Any]:
        provider = sync_resource(
            f"slow_{scope.name.lower()}",
            shared[scope],
            started=started[scope],
            after=fast_returned,
        )
        return container.provider(scope=scope)(provider)

    def fast(scope: Scope) -> Callable[[], Any]:
        provider = sync_resource(f"fast_{scope.name.lower()}", shared[scope], manager=True)
        return container.provider(scope=scope)(provider)

    slow_and_fast_tools(server, container, slow, fast)

    async with client(server, "legacy") as session:
        for _ in range(3):
            events.clear()
            b_seen.clear()
            c_seen.clear()
            with anyio.fail_after(WAIT):
                result = await session.call_tool("three", {})
            assert not result.is_error, text(result)
            assert closed_in_reverse(events) == ["c", "b", "a"]

        async def slow_call() -> None:
            result = await session.call_tool("slow_ones", {})
            assert text(result) == "slow_appslow_session", text(result)

        async def fast_call() -> None:
            for scope in shared:  # a sign given in the slow set-up's thread
                assert await anyio.to_thread.run_sync(started[scope].wait, WAIT)
            result = await session.call_tool("fast_ones", {})
            assert text(result) == "fast_appfast_session", text(result)
            fast_returned.set()

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as group:
                group.start_soon(slow_call)
                group.start_soon(fast_call)
    for scope in shared:
        name = scope.name.lower()
        assert closed_in_reverse(shared[scope]) == [f"fast_{name}", f"slow_{name}"]


@pytest.mark.parametrize("mode", ["generated", "call.run"])
async def test_resources_after_a_finalizer_that_cancels_its_caller_close_in_reverse(
    mode: str,
) -> None:
    # The last resource set up cancels its own caller as it closes (and is done): the
    # others still close, shielded, in reverse order.
    events: list[str] = []
    caller = anyio.CancelScope()

    def closing(name: str, *, cancels: bool = False) -> Callable[[], AsyncIterator[str]]:
        async def provider() -> AsyncIterator[str]:
            events.append(f"open {name}")
            yield name
            if cancels:
                caller.cancel()
            else:
                await anyio.sleep(0)  # the teardown suspends
            events.append(f"closed {name}")

        provider.__name__ = provider.__qualname__ = name
        return provider

    a, b, c, d = closing("a"), closing("b"), closing("c"), closing("d", cancels=True)

    async def handler(
        ra: Annotated[str, Resolve(a)],
        rb: Annotated[str, Resolve(b)],
        rc: Annotated[str, Resolve(c)],
        rd: Annotated[str, Resolve(d)],
    ) -> str:
        return ra + rb + rc + rd

    container = make_container("generated")
    with caller:
        await call_in(container, handler, mode)
        await anyio.sleep(0)
    assert caller.cancelled_caught
    assert events == [*(f"open {n}" for n in "abcd"), *(f"closed {n}" for n in "dcba")]
