"""An MCP tool leaves its plan's cold runner once the plan is hot (tiered execution):
its calls then start the generated code directly, as `container.run` does, instead of
asking the cold runner on every call (which cost the in-process tools/call benchmark 7%)."""

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES, client, text
from resolvent import Container, Resolve, Scope
from resolvent._graph.plan import Plan


async def word() -> str:
    return "hi"


@pytest.mark.parametrize("mode", MODES)
async def test_a_hot_tool_starts_its_generated_code(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    heated: list[str] = []
    heat = Plan.heat

    def counting_heat(self: Plan) -> Any:
        heated.append(self.name)
        return heat(self)

    monkeypatch.setattr(Plan, "heat", counting_heat)
    container = Container()
    server = MCPServer("t", lifespan=container.lifespan)

    from resolvent.mcp import inject

    @server.tool()
    @inject(container)
    async def greet(name: str, w: Annotated[str, Resolve(word)]) -> str:
        return f"{w} {name}"

    async with client(server, mode) as c:
        for _ in range(8):
            assert text(await c.call_tool("greet", {"name": "Ada"})) == "hi Ada"
    assert len(heated) == 1  # made hot once; later calls do not go through the cold runner


@pytest.mark.parametrize("mode", MODES)
async def test_a_hot_tool_follows_an_override_block_and_leaves_it(mode: str) -> None:
    """Once hot, a tool starts its code from the wrapper; an override entered later still
    applies inside its block, and the tool goes back to the real provider after it."""
    container = Container()
    server = MCPServer("t")

    from resolvent.mcp import inject

    @server.tool()
    @inject(container)
    async def greet(w: Annotated[str, Resolve(word)]) -> str:
        return w

    async def fake() -> str:  # async, as `word`: the overridden plan starts directly too
        return "fake"

    async with client(server, mode) as c:
        for _ in range(8):
            assert text(await c.call_tool("greet", {})) == "hi"
    with container.override(word, fake):
        async with client(server, mode) as c:
            for _ in range(8):
                assert text(await c.call_tool("greet", {})) == "fake"
    async with client(server, mode) as c:
        assert text(await c.call_tool("greet", {})) == "hi"


@pytest.mark.parametrize("mode", MODES)
async def test_a_hot_tool_obeys_concurrent_and_call_timeout_set_later(mode: str) -> None:
    """Settings changed after a tool is hot apply to its next call: `concurrent` runs
    the two branches at once (each waits for the other), `call_timeout` bounds a
    resolver that never finishes."""
    container = Container()
    server = MCPServer("t")
    state = {"meet": False, "stall": False}
    met = {"a": anyio.Event(), "b": anyio.Event()}

    async def branch_a() -> str:
        if state["meet"]:
            met["a"].set()
            await met["b"].wait()
        if state["stall"]:
            await anyio.Event().wait()
        return "a"

    async def branch_b() -> str:
        if state["meet"]:
            met["b"].set()
            await met["a"].wait()
        return "b"

    from resolvent.mcp import inject

    @server.tool()
    @inject(container)
    async def pair(
        a: Annotated[str, Resolve(branch_a)], b: Annotated[str, Resolve(branch_b)]
    ) -> str:
        return a + b

    with anyio.fail_after(30):  # a tool that ignored the new settings would hang
        async with client(server, mode) as c:
            for _ in range(8):
                assert text(await c.call_tool("pair", {})) == "ab"
            container.concurrent = True
            state["meet"] = True
            assert text(await c.call_tool("pair", {})) == "ab"
            container.concurrent = False
            state["meet"] = False
            container.call_timeout = 0.05
            state["stall"] = True
            result = await c.call_tool("pair", {})
    assert result.is_error
    assert "call_timeout=0.05" in text(result)


@pytest.mark.parametrize("mode", MODES)
async def test_a_hot_tool_that_takes_nothing_from_the_request_follows_the_app_scope(
    mode: str,
) -> None:
    """A tool with no Context starts its plan's generated entry, bound to the open APP
    scope: after the server's lifespan closes and opens again it uses the new APP
    values, and its CALL resource opens and closes on every call, the failing one too."""
    container = Container()
    server = MCPServer("t", lifespan=container.lifespan)
    events: list[str] = []
    opened = iter(range(1, 100))

    @container.provider(scope=Scope.APP)
    async def pool() -> AsyncIterator[int]:
        n = next(opened)
        events.append(f"pool {n} open")
        yield n
        events.append(f"pool {n} close")

    async def cursor(p: Annotated[int, Resolve(pool)]) -> AsyncIterator[str]:
        events.append("cursor open")
        try:
            yield f"cursor on pool {p}"
        except RuntimeError:
            events.append("cursor saw the error")
            raise
        finally:
            events.append("cursor close")

    from resolvent.mcp import inject

    @server.tool()
    @inject(container)
    async def read(fail: bool, c: Annotated[str, Resolve(cursor)]) -> str:
        if fail:
            raise RuntimeError("boom")
        return c

    got: list[str] = []
    for _ in range(2):  # each connection enters and leaves the server's lifespan
        async with client(server, mode) as c:
            for _ in range(4):
                got.append(text(await c.call_tool("read", {"fail": False})))
            assert (await c.call_tool("read", {"fail": True})).is_error
    assert got == ["cursor on pool 1"] * 4 + ["cursor on pool 2"] * 4
    call = ["cursor open", "cursor close"]
    failed = ["cursor open", "cursor saw the error", "cursor close"]
    assert events == [
        *["pool 1 open", *call * 4, *failed, "pool 1 close"],
        *["pool 2 open", *call * 4, *failed, "pool 2 close"],
    ]
