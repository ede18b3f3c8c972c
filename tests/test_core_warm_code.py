"""Generated code starts warm: on Python 3.11, whose interpreter specializes a function
only from its eighth call, each generated function is called seven times over empty
globals (see `resolvent._codegen._warm`). Those calls must stop before anything runs:
no resolver, no handler, no finalizer, and every value still made once per call."""

import dis
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any

import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES as MCP_MODES
from mcp_helpers import client as mcp_client
from mcp_helpers import text
from modes import MODES, make_container, run
from resolvent import Container, Resolve, Scope, inline
from resolvent._plan import Plan, direct_shape
from resolvent.mcp import inject


def every_function(plan: Plan) -> list[Callable[..., Any]]:
    """Generate every variant of *plan* now (what the first calls would generate)."""
    functions = [plan.heat(), plan.resolve_fn]
    if plan.direct_fn is not None:
        functions.append(plan.direct_fn)
    if direct_shape(plan.steps) and not plan.value_types:
        functions.append(plan.entry_fn)
    return functions


def graph(container: Container, events: list[str], *, threaded_root: bool) -> Any:
    """A handler over every kind of step the generator writes: an APP value, an async
    resolver, an inline one, worker-thread resolvers sharing a hop, an async resource
    (set up in the caller's task) and a sync one (in a worker thread)."""

    @container.provider(scope=Scope.APP)
    async def settings() -> str:
        events.append("settings")
        return "s"

    async def user(s: Annotated[str, Resolve(settings)]) -> str:
        events.append("user")
        return f"ada/{s}"

    @inline
    def name(u: Annotated[str, Resolve(user)]) -> str:
        events.append("name")
        return u.upper()

    def first(n: Annotated[str, Resolve(name)]) -> str:
        events.append("first")
        return f"{n}1"

    def second(f: Annotated[str, Resolve(first)]) -> str:
        events.append("second")
        return f"{f}2"

    async def tx(u: Annotated[str, Resolve(user)]) -> AsyncIterator[str]:
        events.append("tx open")
        yield "tx"
        events.append("tx close")

    def files() -> Iterator[str]:
        events.append("files open")
        yield "files"
        events.append("files close")

    if threaded_root:  # a sync handler, called in the hop of its last resolvers

        def sync_handler(
            t: Annotated[str, Resolve(tx)],
            f: Annotated[str, Resolve(files)],
            s: Annotated[str, Resolve(second)],
        ) -> str:
            events.append("handler")
            return f"{t} {f} {s}"

        return sync_handler

    async def handler(
        t: Annotated[str, Resolve(tx)],
        s: Annotated[str, Resolve(second)],
        f: Annotated[str, Resolve(files)],
    ) -> str:
        events.append("handler")
        return f"{t} {f} {s}"

    return handler


# What each call runs (the APP value aside), in some order.
EACH_CALL = ("user", "name", "first", "second", "tx open", "files open", "handler")
EACH_CALL += ("tx close", "files close")


@pytest.mark.parametrize("threaded_root", [False, True])
@pytest.mark.parametrize("mode", MODES)
async def test_generating_code_runs_nothing_and_calls_run_everything_once(
    mode: str, threaded_root: bool
) -> None:
    container = make_container(mode)
    events: list[str] = []
    handler = graph(container, events, threaded_root=threaded_root)
    async with container:
        made = list(events)  # what the container made up front, if anything
        events.clear()
        every_function(container.compile(handler))
        assert events == []  # generating (and warming) the code ran none of it
        for _ in range(3):
            events.clear()
            assert await run(container, handler, mode) == "tx files ADA/S12"
            each = sorted(e for e in events if e != "settings")
            assert each == sorted(EACH_CALL)
            assert events.index("tx close") > events.index("handler")
            assert events.index("files close") > events.index("handler")
            made += events
        assert made.count("settings") == 1  # an APP value: made once


@pytest.mark.parametrize("mode", MODES)
async def test_warm_code_in_a_call_scope_makes_each_value_once(mode: str) -> None:
    """`call.run` and `call.resolve` in one call scope: one set of values between them."""
    container = make_container(mode)
    events: list[str] = []
    handler = graph(container, events, threaded_root=False)
    async with container:
        every_function(container.compile(handler))
        for _ in range(3):
            events.clear()
            async with container.call(rounds=mode == "interpreter") as call:
                assert await call.run(handler) == "tx files ADA/S12"
                injected = await call.resolve(handler)
                assert injected == {"t": "tx", "s": "ADA/S12", "f": "files"}
            assert sorted(e for e in events if e != "settings") == sorted(EACH_CALL)


@pytest.mark.parametrize("mode", MCP_MODES)
async def test_a_tool_runs_each_resolver_once_per_call_once_its_code_is_warm(mode: str) -> None:
    """Past the interpreted first calls an MCP tool runs generated (warmed) code."""
    container = Container()
    server = MCPServer("t", lifespan=container.lifespan)
    made: list[str] = []

    async def word() -> str:
        made.append("word")
        return "hi"

    @server.tool()
    @inject(container)
    async def greet(name: str, w: Annotated[str, Resolve(word)]) -> str:
        return f"{w} {name}"

    async with mcp_client(server, mode) as c:
        for calls in range(1, 6):
            assert text(await c.call_tool("greet", {"name": "Ada"})) == "hi Ada"
            assert made == ["word"] * calls


@pytest.mark.parametrize("mode", MODES)
async def test_a_failure_in_warm_code_names_its_resolver(mode: str) -> None:
    container = make_container(mode)
    calls: list[str] = []

    async def user() -> str:
        calls.append("user")
        raise LookupError("no such user")

    async def handler(u: Annotated[str, Resolve(user)]) -> str:
        return u

    every_function(container.compile(handler))
    assert calls == []
    for expected in (["user"], ["user", "user"]):
        with pytest.raises(LookupError) as caught:
            await run(container, handler, mode)
        assert any("user" in note for note in getattr(caught.value, "__notes__", []))
        assert calls == expected


def specialized(function: Callable[..., Any]) -> bool:
    """Whether the interpreter has specialized *function*'s global lookups."""
    return any(
        i.opname == "LOAD_GLOBAL_MODULE" for i in dis.get_instructions(function, adaptive=True)
    )


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="3.11 waits for 8 calls")
async def test_generated_code_is_specialized_from_its_first_call() -> None:
    container = make_container("generated")

    def one(x: int) -> int:
        return x + 1

    def two(o: Annotated[int, Resolve(one)]) -> int:
        return o + 1

    async def handler(x: int, t: Annotated[int, Resolve(two)]) -> int:
        return t

    plan = container.compile(handler)
    entry = plan.entry_fn
    block = entry.__globals__["block0"]  # `one` and `two`, in one worker-thread hop
    assert not specialized(entry)
    assert await container.run(handler, x=1) == 3
    assert specialized(entry)
    assert specialized(block)
