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
from resolvent.mcp._sessions import SessionTable, _tables, connection_of


def table_of(container: Container) -> SessionTable:
    return _tables[container]


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
    async def exit_callbacks(ctx: Context) -> int:
        # How many callbacks resolvent left on this connection's exit stack.
        connection = connection_of(ctx)
        assert connection is not None
        stack = connection.exit_stack._exit_callbacks  # type: ignore[attr-defined]
        table = table_of(container)
        return sum(1 for _, cb in stack if getattr(cb.__wrapped__, "__self__", None) is table)

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
        # A session in use is never evicted, even past the bound...
        busy, _ = table.acquire("b", None)
        other, victims = table.acquire("d", None)
        assert [v.key for v in victims] == ["c"]
        third, victims = table.acquire("e", None)
        assert victims == []
        assert list(table.entries) == ["b", "d", "e"]
        # ... and once idle, it goes at once, with no new traffic (the table's watcher).
        table.release(busy)
        with anyio.fail_after(5):
            while list(table.entries) != ["d", "e"]:
                await anyio.sleep(0.01)
        table.release(other)
        table.release(third)
        # Idle sessions go after the idle timeout, with no new traffic either.
        table.idle_timeout = 0.0
        entry, _ = table.acquire("f", None)
        table.release(entry)
        with anyio.fail_after(5):
            while table.entries:
                await anyio.sleep(0.01)
    assert not table.entries


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_tools_without_session_values_touch_no_session(mode: str) -> None:
    server, container = build([], session_key=lambda ctx: "k")
    async with client(server, mode) as c:
        await c.call_tool("conn_probe", {})
        from resolvent.mcp._sessions import _tables

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


class Tracked:
    """SESSION values of one server, one per key, with an event when each closes."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closed: dict[str, anyio.Event] = {}
        self.gates: dict[str, anyio.Event] = {}
        self.failing = ""  # the user whose SESSION value's teardown raises

    def closing(self, name: str) -> anyio.Event:
        return self.closed.setdefault(name, anyio.Event())

    def gate(self, name: str) -> anyio.Event:
        return self.gates.setdefault(name, anyio.Event())


def keyed_server(tracked: Tracked, **options: object) -> MCPServer:
    """Keyed sessions (the tool's `user` argument is the key) on the 2026-07-28 protocol."""
    # (A SESSION provider cannot take the per-call Context: the tools label their value.)
    container = Container()
    server = MCPServer("keyed", lifespan=container.lifespan)

    @container.provider(scope=Scope.SESSION)
    async def account() -> AsyncIterator[dict[str, object]]:
        value: dict[str, object] = {"open": True}
        try:
            yield value
        finally:
            value["open"] = False
            if value["name"] == tracked.failing:
                raise RuntimeError(f"{tracked.failing}'s teardown broke")
            tracked.closing(str(value["name"])).set()

    def label(acct: dict[str, object], user: str) -> None:
        if "name" not in acct:  # a new SESSION value: the key's user is its owner
            acct["name"] = user
            tracked.opened.append(user)

    options.setdefault("session_key", lambda ctx: ctx.request_context.params["arguments"]["user"])

    @server.tool()
    @inject(container, **options)  # type: ignore[arg-type]
    async def visit(user: str, acct: Annotated[dict[str, object], Resolve(account)]) -> str:
        label(acct, user)
        if user in tracked.gates:  # a call in progress until the test opens its gate
            await tracked.gates[user].wait()
        assert acct["open"], "a SESSION value was closed under a call in progress"
        return f"hello {acct['name']}"

    @server.tool()
    @inject(container, **options)  # type: ignore[arg-type]
    async def fail(user: str, acct: Annotated[dict[str, object], Resolve(account)]) -> str:
        label(acct, user)
        raise RuntimeError(f"{acct['name']} broke it")

    return server


async def test_an_idle_keyed_session_closes_without_new_traffic() -> None:
    tracked = Tracked()
    server = keyed_server(tracked, session_idle_timeout=0.05)
    async with client(server, "2026-07-28") as c:
        assert text(await c.call_tool("visit", {"user": "alice"})) == "hello alice"
        # Nothing else happens on the server: the idle session still closes.
        with anyio.fail_after(5):
            await tracked.closing("alice").wait()
    assert tracked.opened == ["alice"]


async def test_a_session_with_a_call_in_progress_is_not_closed_past_the_bound() -> None:
    tracked = Tracked()
    server = keyed_server(tracked, max_sessions=1)
    async with client(server, "2026-07-28") as c:
        results: dict[str, str] = {}

        async def visit(user: str) -> None:
            results[user] = text(await c.call_tool("visit", {"user": user}))

        async with anyio.create_task_group() as group:
            for user in ("alice", "bob"):  # two sessions, both busy: one past the bound
                tracked.gate(user)
                group.start_soon(visit, user)
            with anyio.fail_after(5):
                while sorted(tracked.opened) != ["alice", "bob"]:
                    await anyio.sleep(0.01)
            tracked.gate("alice").set()  # alice's call ends; bob's is still running
            with anyio.fail_after(5):
                await tracked.closing("alice").wait()  # evicted once idle
            assert not tracked.closing("bob").is_set()
            tracked.gate("bob").set()
        assert results == {"alice": "hello alice", "bob": "hello bob"}
        assert not tracked.closing("bob").is_set()  # within the bound now: kept


async def test_a_call_that_raises_still_releases_its_session() -> None:
    tracked = Tracked()
    server = keyed_server(tracked, max_sessions=1)
    async with client(server, "2026-07-28") as c:
        failed = await c.call_tool("fail", {"user": "alice"})
        assert failed.is_error
        assert text(await c.call_tool("visit", {"user": "bob"})) == "hello bob"
        # alice's failed call let go of her session, so the bound can evict it.
        with anyio.fail_after(5):
            await tracked.closing("alice").wait()
        assert not tracked.closing("bob").is_set()


async def test_more_connections_than_max_sessions_keep_their_values() -> None:
    events: list[str] = []
    server, _ = build(events, max_sessions=1)
    clients = [client(server, "legacy") for _ in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        connected = [await stack.enter_async_context(c) for c in clients]
        first = [text(await c.call_tool("whoami", {})) for c in connected]
        for _ in range(10):  # connected sessions are not idle between calls
            for c, seen in zip(connected, first, strict=True):
                assert text(await c.call_tool("whoami", {})) == seen
                assert text(await c.call_tool("exit_callbacks", {})) == "1"
        assert len(set(first)) == 3
        assert [e for e in events if e.startswith("identity")] == [
            "identity 1 open",
            "identity 2 open",
            "identity 3 open",
        ]
        await stack.aclose()
    # Each connection's values closed once, when it ended.
    for n in (1, 2, 3):
        assert events.count(f"identity {n} close") == 1


async def test_a_session_whose_teardown_fails_is_logged_and_the_others_still_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Closing the keyed sessions at shutdown (most recently used first): bob's teardown
    # fails, which the server's log says in one line with its traceback; alice's closes.
    tracked = Tracked()
    server = keyed_server(tracked)
    async with client(server, "2026-07-28") as c:
        for user in ("alice", "bob"):
            assert text(await c.call_tool("visit", {"user": user})) == f"hello {user}"
        tracked.failing = "bob"
    failed = [r for r in caplog.records if r.name == "resolvent.mcp"]
    assert [(r.levelname, r.getMessage()) for r in failed] == [
        ("ERROR", "resolvent.mcp: closing a SESSION scope failed")
    ]
    assert failed[0].exc_info and str(failed[0].exc_info[1]) == "bob's teardown broke"
    assert tracked.closing("alice").is_set()


async def test_a_closed_connection_leaves_nothing_behind() -> None:
    # A long-running server sees many connections: each one's SESSION scope is forgotten
    # when it closes, so the server does not grow with the connections it has served.
    events: list[str] = []
    server, container = build(events)
    async with client(server, "legacy") as two:
        for _ in range(3):
            async with client(server, "legacy") as one:
                await one.call_tool("whoami", {})
        await two.call_tool("whoami", {})
        assert len(table_of(container).connections) == 1  # only the one still connected


# Keyed sessions are closed by a watcher "with or without new traffic": it waits for the
# next idle deadline, and takes no turn of the event loop before then.
async def test_the_idle_watcher_waits_between_deadlines() -> None:
    tracked = Tracked()
    server = keyed_server(tracked, session_idle_timeout=3600)
    async with client(server, "2026-07-28") as c:
        assert text(await c.call_tool("visit", {"user": "alice"})) == "hello alice"
        with anyio.fail_after(10):  # a watcher spinning until the deadline never blocks
            await anyio.wait_all_tasks_blocked()
        assert not tracked.closing("alice").is_set()


# The table "closes what it still holds when the container's APP scope closes" -- its
# watcher too: a server's lifespan leaves no task of it behind.
async def test_a_lifespan_leaves_no_watcher_behind() -> None:
    tracked = Tracked()
    server = keyed_server(tracked, session_idle_timeout=3600)
    before = {task.id for task in anyio.get_running_tasks()}
    async with client(server, "2026-07-28") as c:
        assert text(await c.call_tool("visit", {"user": "alice"})) == "hello alice"
    assert tracked.closing("alice").is_set()
    left: list[str] = []
    for _ in range(100):  # bounded: the watcher finishes as the lifespan ends
        left = [t.name for t in anyio.get_running_tasks() if t.id not in before]
        if not left:
            break
        await anyio.sleep(0.01)
    assert left == []
