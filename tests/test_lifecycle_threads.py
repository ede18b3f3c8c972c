"""Worker threads that a call or a scope stops waiting for (abandons) are bounded, and
closing a scope never waits for one.

Python cannot stop a thread: a sync resolver, a sync handler's body or a sync provider
blocked in a call that never returns keeps its thread after its caller gave up. Those
threads keep their worker-thread slot until they end, on both backends, so stuck threads
are bounded by the default thread limiter; and closing a session or the container stops
waiting for a stuck APP/SESSION provider (its thread closes what it opened, if it ever
returns).
"""

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from modes import MODES, make_container
from resolvent import Container, Resolve, Scope

LIMIT = 2  # the worker-thread slots in these tests: small, so the bound is reached fast


class Stuck:
    """A blocking call that never returns until the test releases it.

    Counts the threads inside it; each entry sets `entered` (on the event loop), each
    exit counts down until `all_out` is set.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.peak = 0
        self.runs = 0
        self.release = threading.Event()
        self.entered = anyio.Event()
        self.all_out = anyio.Event()

    def block(self) -> str:
        with self.lock:
            self.inside += 1
            self.runs += 1
            self.peak = max(self.peak, self.inside)
        anyio.from_thread.run_sync(self.entered.set)
        try:
            self.release.wait(10)
        finally:
            anyio.from_thread.run_sync(self._out)
        return "late"

    def _out(self) -> None:
        with self.lock:
            self.inside -= 1
            if not self.inside:
                self.all_out.set()

    async def let_go(self) -> None:
        """Release every stuck thread and wait until each has left."""
        self.release.set()
        with anyio.fail_after(10):  # a safety net: the threads return at once
            if self.inside:
                await self.all_out.wait()


@asynccontextmanager
async def few_slots() -> AsyncIterator[anyio.CapacityLimiter]:
    """The default thread limiter, at `LIMIT` tokens for the test."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    tokens = limiter.total_tokens
    limiter.total_tokens = LIMIT
    try:
        yield limiter
    finally:
        limiter.total_tokens = tokens


async def run(container: Container, handler: Callable[..., Any], mode: str) -> Any:
    """Run *handler* as *mode* says; "call" is `async with container.call()` + `call.run`."""
    if mode == "interpreter":
        async with container.call(rounds=True) as call:
            return await call.run(handler)
    if mode == "call":
        async with container.call() as call:
            return await call.run(handler)
    return await container.run(handler)


def stuck_handlers(stuck: Stuck) -> dict[str, Callable[..., Any]]:
    """A handler whose sync resolver blocks, and a sync handler that blocks itself."""

    def lookup() -> str:  # a sync resolver: runs in a worker thread
        return stuck.block()

    async def via_resolver(v: Annotated[str, Resolve(lookup)]) -> str:
        return v

    def sync_handler() -> str:  # a sync handler: its body runs in a worker thread
        return stuck.block()

    return {"resolver": via_resolver, "handler": sync_handler}


@pytest.mark.parametrize("where", ["resolver", "handler"])
@pytest.mark.parametrize("mode", [*MODES, "call"])
async def test_abandoned_threads_keep_their_slot_so_stuck_threads_are_bounded(
    mode: str, where: str
) -> None:
    stuck = Stuck()
    handler = stuck_handlers(stuck)[where]
    container = make_container(mode)
    async with few_slots() as limiter:
        try:
            # Each call gives up (its caller is cancelled) while its thread is stuck.
            for _ in range(LIMIT):
                stuck.entered = anyio.Event()
                async with anyio.create_task_group() as group:
                    group.start_soon(run, container, handler, mode)
                    await stuck.entered.wait()
                    group.cancel_scope.cancel()
            assert stuck.inside == LIMIT
            # Every slot is held by a stuck thread: the next call waits for one ...
            result: list[str] = []

            async def one_more() -> None:
                result.append(await run(container, handler, mode))

            async with anyio.create_task_group() as group:
                group.start_soon(one_more)
                await anyio.wait_all_tasks_blocked()
                assert limiter.statistics().tasks_waiting == 1
                assert stuck.runs == LIMIT  # no new thread was started
                # ... and gets it once a stuck thread ends.
                stuck.release.set()
            assert result == ["late"]
            assert stuck.peak == LIMIT
        finally:
            await stuck.let_go()


async def test_call_timeout_expiring_on_stuck_threads_starts_no_more_of_them() -> None:
    stuck = Stuck()
    handler = stuck_handlers(stuck)["resolver"]
    container = Container(call_timeout=0.2)
    async with few_slots():
        try:
            for _ in range(6):  # more calls than slots, each timing out
                with pytest.raises(TimeoutError):
                    await container.run(handler)
            # A thread abandoned before it started never runs; one that did holds its
            # slot: never more stuck threads than slots.
            assert stuck.peak <= LIMIT
        finally:
            await stuck.let_go()


# -- closing a scope does not wait for a stuck APP/SESSION provider ------------------------


def make_providers(
    stuck: Stuck, log: list[str], closed: threading.Event
) -> dict[str, Callable[..., Any]]:
    def settings() -> str:  # a sync provider: created in a worker thread
        return stuck.block()

    def database() -> Iterator[str]:  # a sync resource: set up in a worker thread
        value = stuck.block()
        log.append("opened late")
        yield value
        log.append("closed late")
        closed.set()

    return {"function": settings, "generator": database}


async def _give_up_on(runner: Any, handler: Callable[..., Any], stuck: Stuck) -> None:
    """Run *handler* until the provider's thread is stuck, then cancel the run."""
    async with anyio.create_task_group() as group:
        group.start_soon(runner.run, handler)
        await stuck.entered.wait()
        group.cancel_scope.cancel()


@pytest.mark.parametrize("kind", ["function", "generator"])
@pytest.mark.parametrize("scope", [Scope.APP, Scope.SESSION])
async def test_closing_abandons_a_stuck_shared_provider_that_closes_what_it_opened(
    scope: Scope, kind: str
) -> None:
    stuck = Stuck()
    log: list[str] = []
    closed = threading.Event()
    container = Container()
    provider = container.provide(make_providers(stuck, log, closed)[kind], scope=scope)

    async def handler(v: Annotated[str, Resolve(provider)]) -> str:
        return v

    try:
        with anyio.fail_after(10):  # a safety net: closing must not wait for the thread
            async with container:
                if scope is Scope.APP:
                    await _give_up_on(container, handler, stuck)
                else:
                    async with container.session() as session:
                        await _give_up_on(session, handler, stuck)
                    assert stuck.inside == 1  # the session closed; its thread is still stuck
        # The container closed while the provider's thread is still blocked.
        assert stuck.inside == 1
        assert log == []
    finally:
        await stuck.let_go()
    if kind == "generator":
        # When it returns at last, what it opened is closed, by its own thread.
        assert await anyio.to_thread.run_sync(closed.wait, 10)
        assert log == ["opened late", "closed late"]
    # The next opening starts afresh.
    async with container, container.session() as session:
        assert await session.run(handler) == "late"
