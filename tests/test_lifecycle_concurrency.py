"""Concurrency: single creation under 1,000 simultaneous first calls, opt-in concurrent
branches (overlap proven with events, never sleeps), failure and cancellation of
branches, and call deadlines."""

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import pytest

from resolvent import Container, Resolve, Scope, inline

N = 1_000


# -- created exactly once ---------------------------------------------------------------


@pytest.mark.parametrize("scope", [Scope.APP, Scope.SESSION], ids=lambda s: s.name)
@pytest.mark.parametrize("resource", [False, True], ids=["value", "resource"])
async def test_a_thousand_concurrent_first_calls_create_the_value_once(
    scope: Scope, resource: bool
) -> None:
    container = Container()
    made: list[object] = []
    closed: list[object] = []
    all_waiting = anyio.Event()

    async def make() -> object:
        await all_waiting.wait()  # every caller asks before the first creation finishes
        value = object()
        made.append(value)
        return value

    async def plain() -> object:
        return await make()

    async def generator() -> AsyncIterator[object]:
        value = await make()
        yield value
        closed.append(value)

    provider = generator if resource else plain
    container.provide(provider, scope=scope)

    async def handler(v: Annotated[object, Resolve(provider)]) -> object:
        return v

    got: list[object] = []

    async def one(session: Any) -> None:
        got.append(await session.run(handler))

    async with container, container.session() as session:
        async with anyio.create_task_group() as group:
            for _ in range(N):
                group.start_soon(one, session)
            # Let every task start and queue on the creation lock before releasing it.
            for _ in range(10):
                await anyio.lowlevel.checkpoint()
            all_waiting.set()
        assert len(made) == 1
        assert len(got) == N and all(v is made[0] for v in got)
    assert closed == (made if resource else [])


# -- concurrent branches ----------------------------------------------------------------


def rendezvous() -> tuple[Any, Any]:
    """Two resolvers that each set their own event and wait for the other's: they can
    finish only if they run at the same time."""
    a_here, b_here = anyio.Event(), anyio.Event()

    async def a() -> str:
        a_here.set()
        await b_here.wait()
        return "a"

    async def b() -> str:
        b_here.set()
        await a_here.wait()
        return "b"

    return a, b


@pytest.mark.parametrize("how", ["container", "call"])
async def test_independent_branches_overlap(how: str) -> None:
    a, b = rendezvous()

    async def handler(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
        return x + y

    with anyio.fail_after(2):  # a sequential run would time out here, not hang
        if how == "container":
            assert await Container(concurrent=True).run(handler) == "ab"
        else:
            async with Container().call(concurrent=True) as call:
                assert await call.run(handler) == "ab"


async def test_resource_branches_overlap_and_close() -> None:
    a_here, b_here = anyio.Event(), anyio.Event()
    closed: list[str] = []

    async def a() -> AsyncIterator[str]:
        a_here.set()
        await b_here.wait()
        yield "a"
        closed.append("a")

    async def b() -> AsyncIterator[str]:
        b_here.set()
        await a_here.wait()
        yield "b"
        closed.append("b")

    async def handler(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
        return x + y

    with anyio.fail_after(2):
        assert await Container(concurrent=True).run(handler) == "ab"
    assert sorted(closed) == ["a", "b"]


async def test_sequential_is_the_default_and_follows_plan_order() -> None:
    events: list[str] = []

    async def a() -> str:
        events.append("a start")
        await anyio.lowlevel.checkpoint()
        events.append("a end")
        return "a"

    async def b() -> str:
        events.append("b start")
        await anyio.lowlevel.checkpoint()
        events.append("b end")
        return "b"

    async def handler(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
        return x + y

    container = Container()
    order = [step.name.rsplit(".", 1)[-1] for step in container.compile(handler).steps]
    assert await container.run(handler) == "ab"
    assert events == [f"{n} {e}" for n in order for e in ("start", "end")]


async def test_a_diamond_runs_each_resolver_once() -> None:
    runs: list[str] = []
    top_a, top_b = rendezvous()

    async def root() -> str:
        runs.append("root")
        await anyio.lowlevel.checkpoint()
        return "r"

    async def left(r: Annotated[str, Resolve(root)], t: Annotated[str, Resolve(top_a)]) -> str:
        runs.append("left")
        return "l" + r

    async def right(r: Annotated[str, Resolve(root)], t: Annotated[str, Resolve(top_b)]) -> str:
        runs.append("right")
        return "r" + r

    async def handler(
        x: Annotated[str, Resolve(left)],
        y: Annotated[str, Resolve(right)],
        z: Annotated[str, Resolve(root)],
    ) -> str:
        return x + y + z

    with anyio.fail_after(2):
        assert await Container(concurrent=True).run(handler) == "lrrrr"
    assert sorted(runs) == ["left", "right", "root"]


async def test_concurrent_mode_gives_a_task_only_to_branches_that_can_overlap() -> None:
    """A chain, and plain functions run on the loop, gain nothing from a task of their own:
    they run in the calling task. Of two branches that wait at the same time, one gets a
    task and the calling task runs the other (it would only wait for them otherwise)."""
    where: dict[str, int] = {}
    a, b = rendezvous()

    def here(name: str) -> None:
        where[name] = anyio.get_current_task().id

    @inline
    def side() -> int:
        here("side")
        return 1

    async def first() -> int:
        here("first")
        return 1

    async def second(v: Annotated[int, Resolve(first)]) -> int:
        here("second")
        return v + 1

    @inline
    def plain(v: Annotated[int, Resolve(second)], s: Annotated[int, Resolve(side)]) -> int:
        here("plain")
        return v + s

    async def left(v: Annotated[int, Resolve(plain)]) -> str:
        here("left")
        return await a() + str(v)

    async def right(v: Annotated[int, Resolve(plain)]) -> str:
        here("right")
        return await b() + str(v)

    async def handler(x: Annotated[str, Resolve(left)], y: Annotated[str, Resolve(right)]) -> str:
        here("handler")
        return x + y

    with anyio.fail_after(2):  # left and right finish only if they overlap
        assert await Container(concurrent=True).run(handler) == "a3b3"
    caller = where["handler"]
    assert [where[n] == caller for n in ("side", "first", "second", "plain")] == [True] * 4
    assert where["left"] != where["right"]  # they overlap: one of them has a task
    assert len(set(where.values())) == 2  # and only one: a task where one is needed


async def test_a_failing_branch_cancels_the_others_closes_resources_and_is_raised() -> None:
    opened = anyio.Event()
    log: list[str] = []
    failure = ValueError("b failed")

    async def resource() -> AsyncIterator[str]:
        log.append("open")
        try:
            yield "res"
        finally:
            log.append("closed")

    async def waits(r: Annotated[str, Resolve(resource)]) -> str:
        opened.set()
        try:
            await anyio.Event().wait()
        finally:
            log.append("waits ended")  # cancelled, before the call returns
        return "never"

    async def fails() -> str:
        await opened.wait()
        raise failure

    async def handler(w: Annotated[str, Resolve(waits)], f: Annotated[str, Resolve(fails)]) -> str:
        raise AssertionError("not reached")

    with anyio.fail_after(2), pytest.raises(ValueError) as caught:
        await Container(concurrent=True).run(handler)
    assert caught.value is failure  # the original exception, not a group
    assert log == ["open", "waits ended", "closed"]


async def test_a_failing_resource_setup_in_a_branch_is_raised_as_itself() -> None:
    failure = KeyError("setup")
    other_closed: list[str] = []
    a_opened = anyio.Event()

    async def a() -> AsyncIterator[str]:
        a_opened.set()
        try:
            yield "a"
        finally:
            other_closed.append("a")

    async def b() -> AsyncIterator[str]:
        await a_opened.wait()
        raise failure
        yield "b"  # pragma: no cover

    async def handler(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
        raise AssertionError("not reached")

    with anyio.fail_after(2), pytest.raises(KeyError) as caught:
        await Container(concurrent=True).run(handler)
    assert caught.value is failure
    assert other_closed == ["a"]


# -- deadlines --------------------------------------------------------------------------


@pytest.mark.parametrize("concurrent", [False, True], ids=["sequential", "concurrent"])
async def test_call_timeout_fails_with_timeout_error_and_closes_every_resource(
    concurrent: bool,
) -> None:
    log: list[str] = []

    async def opened() -> AsyncIterator[str]:
        log.append("open")
        try:
            yield "r"
        except TimeoutError:
            log.append("saw timeout")
            raise
        finally:
            log.append("closed")

    async def stuck_setup(r: Annotated[str, Resolve(opened)]) -> AsyncIterator[str]:
        log.append("stuck setup")
        try:
            await anyio.Event().wait()  # never fires
        finally:
            log.append("setup cancelled")
        yield "never"  # pragma: no cover
        log.append("closed a resource that never opened")  # pragma: no cover

    async def handler(s: Annotated[str, Resolve(stuck_setup)]) -> None:
        raise AssertionError("not reached")

    container = Container(call_timeout=0.5, concurrent=concurrent)
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        await container.run(handler)
    # On a loaded machine the deadline can pass before the stuck set-up even starts; then
    # there is nothing of it to cancel, and the rest of the promise is the same.
    setup = ["stuck setup", "setup cancelled"] if "stuck setup" in log else []
    assert log == ["open", *setup, "saw timeout", "closed"]


async def test_call_timeout_bounds_a_plain_resolver_too() -> None:
    log: list[str] = []

    async def opened() -> AsyncIterator[str]:
        try:
            yield "r"
        finally:
            log.append("closed")

    async def stuck(r: Annotated[str, Resolve(opened)]) -> str:
        await anyio.Event().wait()
        return "never"

    async def handler(s: Annotated[str, Resolve(stuck)]) -> None:
        raise AssertionError("not reached")

    container = Container(call_timeout=0.2)
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        await container.run(handler)
    assert log == ["closed"]


async def test_call_timeout_leaves_fast_calls_alone() -> None:
    async def opened() -> AsyncIterator[str]:
        yield "r"

    async def handler(r: Annotated[str, Resolve(opened)]) -> str:
        return r

    container = Container(call_timeout=60)
    assert await container.run(handler) == "r"
