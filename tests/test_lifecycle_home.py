"""APP and SESSION values live in a home task of their own, not in the first caller's.

What a gateway server writes: an APP resource that keeps a task group open across its
``yield`` (an upstream client session), opened by whichever call needs it first, used by
calls in other tasks, closed when the container closes. And what a slow pool does: its
start-up belongs to the scope, so one caller's deadline does not kill it for everyone.
"""

from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
import pytest

from resolvent import Container, Resolve, Scope

MODES: list[Any] = [
    pytest.param({}, id="generated"),
    pytest.param({"concurrent": True}, id="concurrent"),
    pytest.param({"call_timeout": 30}, id="timeout"),
]


class Upstream:
    """Stands in for a client session: a background task reads replies while it is open."""

    def __init__(self) -> None:
        self.served = 0
        self.requests: Any = None

    async def ask(self) -> int:
        done = anyio.Event()
        assert self.requests is not None, "upstream used after it closed"
        await self.requests.send(done)
        await done.wait()
        return self.served


def gateway(container: Container, scope: Scope, log: list[str]) -> Callable[..., Any]:
    """Register an upstream resource that holds a task group across its yield."""

    @container.provider(scope=scope)
    async def upstream() -> AsyncIterator[Upstream]:
        up = Upstream()
        send, receive = anyio.create_memory_object_stream[anyio.Event](8)

        async def serve() -> None:
            async with receive:
                async for done in receive:
                    up.served += 1
                    done.set()

        log.append("open")
        async with anyio.create_task_group() as group:
            group.start_soon(serve)
            up.requests = send
            try:
                yield up
            finally:
                up.requests = None
                await send.aclose()
        log.append("closed")

    async def tool(up: Annotated[Upstream, Resolve(upstream)]) -> int:
        return await up.ask()

    return tool


@pytest.mark.parametrize("options", MODES)
async def test_an_app_resource_holding_a_task_group_serves_calls_from_other_tasks(
    options: dict[str, Any],
) -> None:
    log: list[str] = []
    container = Container(**options)
    tool = gateway(container, Scope.APP, log)
    async with container:
        assert await container.run(tool) == 1  # opened inside this call's task
        results: list[int] = []

        async def one() -> None:
            results.append(await container.run(tool))

        async with anyio.create_task_group() as group:  # used from other tasks
            for _ in range(3):
                group.start_soon(one)
        assert len(results) == 3
        assert await container.run(tool) == 5  # one upstream served all of them
        assert log == ["open"]
    assert log == ["open", "closed"]


@pytest.mark.parametrize("options", MODES)
async def test_a_session_resource_holding_a_task_group_closes_from_another_task(
    options: dict[str, Any],
) -> None:
    log: list[str] = []
    container = Container(**options)
    tool = gateway(container, Scope.SESSION, log)
    async with container:
        session = container.session()

        async def first_call() -> None:  # a task that ends long before the session
            assert await session.run(tool) == 1

        async with anyio.create_task_group() as group:
            group.start_soon(first_call)
        assert await session.run(tool) == 2
        await session.aclose()
    assert log == ["open", "closed"]


async def test_call_resolve_under_the_callers_deadline_opens_a_shared_resource() -> None:
    log: list[str] = []
    container = Container()
    tool = gateway(container, Scope.APP, log)
    async with container:
        with anyio.fail_after(30):  # the caller's own cancel scope around the resolution
            async with container.call() as call:
                kwargs = await call.resolve(container.compile(tool), {})
        assert await kwargs["up"].ask() == 1  # still open: it belongs to APP
    assert log == ["open", "closed"]


async def test_a_shared_resource_that_fails_to_open_is_retried_by_the_next_call() -> None:
    attempts: list[int] = []

    async def flaky() -> AsyncIterator[str]:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("upstream refused")
        async with anyio.create_task_group():
            yield "up"

    container = Container()
    container.provide(flaky, scope=Scope.APP)

    async def tool(v: Annotated[str, Resolve(flaky)]) -> str:
        return v

    async with container:
        with pytest.raises(OSError, match="upstream refused"):
            await container.run(tool)
        assert await container.run(tool) == "up"
    assert len(attempts) == 2


# -- start-up belongs to the scope ---------------------------------------------------------


@pytest.mark.parametrize("resource", [False, True], ids=["value", "resource"])
async def test_a_slow_app_start_survives_the_first_callers_timeout(resource: bool) -> None:
    started: list[str] = []
    ready = anyio.Event()
    closed: list[str] = []

    async def make_pool() -> str:
        started.append("pool")
        await ready.wait()  # longer than the first caller is willing to wait
        return "pool"

    async def pool_resource() -> AsyncIterator[str]:
        value = await make_pool()
        yield value
        closed.append(value)

    async def pool_value() -> str:
        return await make_pool()

    container = Container(call_timeout=0.05)
    provider = pool_resource if resource else pool_value
    container.provide(provider, scope=Scope.APP)

    async def tool(pool: Annotated[str, Resolve(provider)]) -> str:
        return pool

    async with container:
        with pytest.raises(TimeoutError):
            await container.run(tool)
        with pytest.raises(TimeoutError):  # still starting: this caller waits, not restarts
            await container.run(tool)
        ready.set()
        with anyio.fail_after(5):
            while True:  # the start goes on without any caller
                try:
                    assert await container.run(tool) == "pool"
                    break
                except TimeoutError:
                    await anyio.sleep(0.01)
        assert started == ["pool"]
    assert closed == (["pool"] if resource else [])


@pytest.mark.parametrize("resource", [False, True], ids=["value", "resource"])
async def test_closing_the_container_stops_a_start_that_is_still_under_way(
    resource: bool,
) -> None:
    cancelled: list[str] = []
    started = anyio.Event()

    async def wait_forever() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append("setup")
            raise
        return "never"

    async def never_ready_resource() -> AsyncIterator[str]:
        yield await wait_forever()

    never_ready = never_ready_resource if resource else wait_forever
    container = Container(call_timeout=0.05)
    container.provide(never_ready, scope=Scope.APP)

    async def tool(v: Annotated[str, Resolve(never_ready)]) -> str:
        return v

    async with container:
        with pytest.raises(TimeoutError):
            await container.run(tool)
        await started.wait()
    assert cancelled == ["setup"]
