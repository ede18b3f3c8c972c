"""SESSION and APP scopes mapped onto MCP connections, keys and the server lifespan."""

import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import pytest
from mcp.server.connection import Connection
from mcp.server.mcpserver import Context, MCPServer

from mcp_helpers import client, text
from resolvent import Container, Resolve, Scope
from resolvent.mcp import inject
from resolvent.mcp._sessions import SessionTable, connection_of


def build(events: list[str], **options: object) -> tuple[MCPServer, Container]:
    container = Container()
    server = MCPServer("sessions", lifespan=container.lifespan)
    numbers = itertools.count(1)

    @container.provider(scope=Scope.APP)
    async def pool():
        events.append("pool open")
        try:
            yield "pool"
        finally:
            events.append("pool close")

    @container.provider(scope=Scope.SESSION)
    async def identity(p: Annotated[str, Resolve(pool)]):
        n = next(numbers)
        events.append(f"identity {n} open")
        try:
            yield f"visitor-{n}"
        finally:
            events.append(f"identity {n} close")

    @server.tool()
    @inject(container, **options)  # type: ignore[arg-type]
    async def whoami(
        who: Annotated[str, Resolve(identity)], p: Annotated[str, Resolve(pool)]
    ) -> str:
        return f"{who} via {p}"

    @server.tool()
    @inject(container)
    async def conn_probe(ctx: Context) -> bool:
        # Canary: fails loudly when the SDK stops exposing the connection to tools.
        return isinstance(connection_of(ctx), Connection)

    return server, container


async def test_the_connection_is_reachable_from_context() -> None:
    server, _ = build([])
    async with client(server, "legacy") as c:
        result = await c.call_tool("conn_probe", {})
    assert text(result) == "true", (
        "resolvent.mcp cannot reach the MCP connection from Context (ctx.session._connection); "
        "the SDK changed: update resolvent.mcp._sessions.connection_of"
    )


async def test_legacy_sessions_are_connections() -> None:
    events: list[str] = []
    server, _ = build(events)
    async with client(server, "legacy") as two:
        async with client(server, "legacy") as one:
            a1 = text(await one.call_tool("whoami", {}))
            b1 = text(await two.call_tool("whoami", {}))
            a2 = text(await one.call_tool("whoami", {}))
            assert a1 == a2 != b1
        # The first session ended: its values are torn down, the other's are not.
        with anyio.fail_after(5):
            while "identity 1 close" not in events:
                await anyio.sleep(0.01)
        assert "identity 2 close" not in events
        assert "pool close" not in events
        assert text(await two.call_tool("whoami", {})) == b1
    # APP: opened once for both sessions, closed last.
    assert events.count("pool open") == 1
    assert events[-1] == "pool close"
    assert events.count("identity 2 close") == 1


async def test_modern_sessions_live_for_the_request_without_a_key() -> None:
    events: list[str] = []
    server, _ = build(events)
    async with client(server, "2026-07-28") as c:
        first = text(await c.call_tool("whoami", {}))
        assert "identity 1 close" in events
        second = text(await c.call_tool("whoami", {}))
    assert first != second
    assert events.count("pool open") == 1


async def test_modern_sessions_are_shared_by_key_and_closed_with_the_app() -> None:
    events: list[str] = []
    server, _ = build(events, session_key=lambda ctx: "alice")
    async with client(server, "2026-07-28") as c:
        first = text(await c.call_tool("whoami", {}))
        second = text(await c.call_tool("whoami", {}))
        assert first == second == "visitor-1 via pool"
        assert "identity 1 close" not in events
    # The keyed session closes at shutdown, before the APP resource it uses.
    assert events[-2:] == ["identity 1 close", "pool close"]


async def test_session_table_is_bounded_in_number_and_idle_time() -> None:
    container = Container()
    table = SessionTable(container, max_sessions=2, idle_timeout=3600)
    async with container:
        evicted = []
        for key in "abc":
            entry, victims = table.acquire(key, None)
            evicted += [v.key for v in victims]
            table.release(entry)
        # The third session pushed out the least recently used idle one.
        assert evicted == ["a"]
        assert list(table.entries) == ["b", "c"]
        # A session in use is never evicted, even past the bound.
        busy, _ = table.acquire("b", None)
        other, victims = table.acquire("d", None)
        assert [v.key for v in victims] == ["c"]
        assert "b" in table.entries
        table.release(busy)
        table.release(other)
        # Idle sessions go after the idle timeout.
        table.idle_timeout = 0.0
        await anyio.sleep(0.01)
        entry, victims = table.acquire("e", None)
        assert sorted(v.key for v in victims) == ["b", "d"]
        table.release(entry)
    assert not table.entries


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_tools_without_session_values_touch_no_session(mode: str) -> None:
    server, container = build([], session_key=lambda ctx: "k")
    async with client(server, mode) as c:
        await c.call_tool("conn_probe", {})
        from resolvent.mcp._tool import _tables

        assert not _tables[container].entries


async def test_app_scope_composes_with_a_user_lifespan() -> None:
    events: list[str] = []
    container = Container()

    @contextlib.asynccontextmanager
    async def own_lifespan(server: MCPServer) -> AsyncIterator[dict[str, str]]:
        events.append("own enter")
        yield {"greeting": "hi"}
        events.append("own exit")

    @container.provider(scope=Scope.APP)
    async def pool():
        events.append("pool open")
        yield "pool"
        events.append("pool close")

    server = MCPServer("composed", lifespan=container.wrap_lifespan(own_lifespan))

    @server.tool()
    @inject(container)
    async def hello(p: Annotated[str, Resolve(pool)], ctx: Context) -> str:
        return f"{ctx.request_context.lifespan_context['greeting']} from {p}"

    async with client(server, "legacy") as c:
        assert text(await c.call_tool("hello", {})) == "hi from pool"
        assert text(await c.call_tool("hello", {})) == "hi from pool"
    assert events == ["own enter", "pool open", "own exit", "pool close"]
