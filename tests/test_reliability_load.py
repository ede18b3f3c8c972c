"""Load with faults through the SDK's real in-memory client: nothing leaks, nothing hangs.

Thousands of concurrent ``tools/call`` requests hit a tool with resources at all three
scopes. A seeded random.Random assigns every call a fault: a resolver or the tool body
raises, a resource fails in setup or teardown, or the client cancels the call while a
resolver, a resource setup or the tool body is running (the resolver cancels the client's
own CancelScope, so the moment is deterministic, never a sleep). Afterwards every
resource is closed, every failure came back as an ``isError`` result, every cancelled call
was cancelled, every other call returned its own value, and the server still answers.

1,000 calls per mode and backend by default; ``RESOLVENT_LOAD=full`` runs 10,000.
"""

import logging
import random
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import anyio
import mcp_types as types
import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mcp_helpers import MODES, client, text
from reliability_figures import load_size, record
from resolvent import Container, Resolve, Scope
from resolvent.mcp import inject

CALLS = load_size(1_000, 10_000)
CONCURRENCY = 256
FAILURES = ("resolver_raises", "tool_error", "setup_fails", "teardown_fails", "body_raises")
CANCELS = ("cancel_in_resolver", "cancel_in_setup", "cancel_in_body")


@pytest.fixture(autouse=True)
def quiet_logs() -> Iterator[None]:
    """Hundreds of injected failures are logged with tracebacks; keep only critical ones."""
    loggers = [logging.getLogger(name) for name in ("mcp", "resolvent", "resolvent.mcp")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


class Gauge:
    """Opened/closed counts of one scope's resource; `settled` waits for zero open."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0
        self._changed = anyio.Event()

    @property
    def open(self) -> int:
        return self.opened - self.closed

    def up(self) -> None:
        self.opened += 1

    def down(self) -> None:
        self.closed += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def settled(self) -> None:
        while self.open:
            await self._changed.wait()


class Load:
    """A server whose tool depends on an APP, a SESSION and a CALL resource."""

    def __init__(self, *, keyed: bool) -> None:
        self.gauges = {scope: Gauge() for scope in ("app", "session", "call")}
        self.cancel: dict[int, anyio.CancelScope] = {}
        container = Container()
        self.server = server = MCPServer("load", lifespan=container.lifespan)
        gauges = self.gauges

        @container.provider(scope=Scope.APP)
        async def app_resource() -> AsyncIterator[str]:
            gauges["app"].up()
            try:
                yield "app"
            finally:
                gauges["app"].down()

        @container.provider(scope=Scope.SESSION)
        async def session_resource(
            app: Annotated[str, Resolve(app_resource)],
        ) -> AsyncIterator[str]:
            gauges["session"].up()
            try:
                yield f"{app}/session"
            finally:
                gauges["session"].down()

        async def call_resource(
            n: int, fault: str, session: Annotated[str, Resolve(session_resource)]
        ) -> AsyncIterator[str]:
            gauges["call"].up()
            try:
                if fault == "setup_fails":
                    raise RuntimeError("setup failed")
                if fault == "cancel_in_setup":
                    await self.stop(n)
                yield f"{session}/call-{n}"
            finally:
                gauges["call"].down()
                if fault == "teardown_fails":
                    raise RuntimeError("teardown failed")

        async def work(
            n: int, fault: str, resource: Annotated[str, Resolve(call_resource)], ctx: Context
        ) -> str:
            if fault == "resolver_raises":
                raise RuntimeError(f"secret detail {n}")
            if fault == "tool_error":
                raise ToolError(f"refused {n}")
            if fault == "cancel_in_resolver":
                await self.stop(n)
            return f"{resource}:{n}"

        key = (lambda ctx: "tenant") if keyed else None

        @server.tool()
        @inject(container, session_key=key)
        async def job(n: int, fault: str, value: Annotated[str, Resolve(work)]) -> str:
            if fault == "body_raises":
                raise RuntimeError(f"body failed {n}")
            if fault == "cancel_in_body":
                await self.stop(n)
            return value

    async def stop(self, n: int) -> None:
        """Cancel the client's call *n* from inside the server, then wait to be cancelled."""
        self.cancel[n].cancel()
        await anyio.sleep_forever()


def plan_faults(rng: random.Random, calls: int) -> list[str]:
    """10% failures, 10% cancellations, the rest plain; each kind spread evenly."""
    faults: list[str] = []
    for _ in range(calls):
        roll = rng.random()
        if roll < 0.1:
            faults.append(rng.choice(FAILURES))
        elif roll < 0.2:
            faults.append(rng.choice(CANCELS))
        else:
            faults.append("none")
    return faults


@pytest.mark.parametrize("mode", MODES)
async def test_concurrent_calls_with_faults_and_cancellations_leak_nothing(
    mode: str, anyio_backend: str
) -> None:
    load = Load(keyed=mode != "legacy")
    faults = plan_faults(random.Random(7), CALLS)
    outcomes: Counter[str] = Counter()
    wrong: list[str] = []
    limiter = anyio.CapacityLimiter(CONCURRENCY)

    async def one(c: Any, n: int) -> None:
        fault = faults[n]
        async with limiter:
            with anyio.CancelScope() as scope:
                load.cancel[n] = scope
                result = await c.call_tool("job", {"n": n, "fault": fault})
            if scope.cancelled_caught:
                outcomes["cancelled"] += 1
                if fault not in CANCELS:
                    wrong.append(f"{n}: {fault} was cancelled")
                return
            outcomes["error" if result.is_error else "ok"] += 1
            if fault in FAILURES:
                if not result.is_error:
                    wrong.append(f"{n}: {fault} succeeded")
                elif "secret detail" in text(result):
                    wrong.append(f"{n}: a hidden resolver error reached the client")
                elif fault == "tool_error" and f"refused {n}" not in text(result):
                    wrong.append(f"{n}: the resolver's ToolError text was lost")
            elif fault == "none" and (result.is_error or not text(result).endswith(f":{n}")):
                wrong.append(f"{n}: expected its own value, got {text(result)!r}")

    with anyio.fail_after(120):
        async with client(load.server, mode) as c:
            async with anyio.create_task_group() as group:
                for n in range(CALLS):
                    group.start_soon(one, c, n)
            # Cancelled requests end on the server side once it processes the cancellation.
            await load.gauges["call"].settled()
            assert load.gauges["call"].open == 0
            # The server still answers, with fresh resources.
            after = await c.call_tool("job", {"n": CALLS, "fault": "none"})
            assert not after.is_error and text(after).endswith(f":{CALLS}")
        for gauge in load.gauges.values():
            await gauge.settled()

    assert wrong == []
    expected = Counter(
        "cancelled" if f in CANCELS else "error" if f in FAILURES else "ok" for f in faults
    )
    assert outcomes == expected
    leaked = {scope: gauge.open for scope, gauge in load.gauges.items()}
    assert leaked == {"app": 0, "session": 0, "call": 0}
    # Every call opened its own CALL resource; APP and SESSION were shared by all.
    opened = {scope: gauge.opened for scope, gauge in load.gauges.items()}
    assert opened == {"app": 1, "session": 1, "call": CALLS + 1}
    record(
        f"load {mode} {anyio_backend}",
        {
            "calls": CALLS + 1,
            "concurrency": CONCURRENCY,
            "failures_injected": sum(f in FAILURES for f in faults),
            "cancellations_injected": sum(f in CANCELS for f in faults),
            "results": dict(outcomes),
            "resources_opened": opened,
            "resources_leaked": leaked,
        },
    )


# -- a resolver that hangs ------------------------------------------------------------------


def hanging_server(events: list[str]) -> MCPServer:
    container = Container(call_timeout=0.05)
    server = MCPServer("hang", lifespan=container.lifespan)

    async def connection() -> AsyncIterator[str]:
        events.append("open")
        try:
            yield "conn"
        finally:
            events.append("close")

    async def stuck(hang: bool, conn: Annotated[str, Resolve(connection)]) -> str:
        if hang:
            events.append("hanging")
            await anyio.sleep_forever()
        return conn

    @server.tool()
    @inject(container)
    async def fetch(hang: bool, value: Annotated[str, Resolve(stuck)]) -> str:
        return value

    return server


@pytest.mark.parametrize("mode", MODES)
async def test_a_hanging_resolver_is_bounded_by_call_timeout(mode: str, anyio_backend: str) -> None:
    events: list[str] = []
    server = hanging_server(events)
    with anyio.fail_after(30):
        async with client(server, mode) as c:
            timed_out = await c.call_tool("fetch", {"hang": True})
            assert timed_out.is_error
            assert events == ["open", "hanging", "close"]
            # The server keeps serving, and a fast call is not affected by the bound.
            fine = await c.call_tool("fetch", {"hang": False})
    assert isinstance(fine, types.CallToolResult)
    assert not fine.is_error and text(fine) == "conn"
    assert events.count("open") == events.count("close") == 2
    record(
        f"call_timeout {mode} {anyio_backend}",
        {
            "calls": 2,
            "timeouts": 1,
            "resources_leaked": events.count("open") - events.count("close"),
        },
    )
