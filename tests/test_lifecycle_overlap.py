"""Concurrent mode on a plan whose steps cannot overlap (a chain, one resolver, plain
functions around one that waits): it runs the sequential code, so it costs what a call
that is not concurrent costs, and it keeps every promise of a concurrent call: the same
values, every resource closed in reverse order of its set-up, on success, on error and on
cancellation. A plan whose steps can overlap still overlaps (events, never sleeps)."""

import contextvars
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resolvent import Container, Resolve, Scope, inline
from resolvent._graph.overlap import overlaps
from resolvent._graph.plan import Input, Step
from resolvent._reading.kinds import Kind

# A concurrent container's `run`, and a call scope opened with concurrent=True.
WAYS = ["run", "call.run", "call.resolve"]


async def run_in(way: str, container: Container, handler: Callable[..., Awaitable[str]]) -> str:
    if way == "run":
        return await container.run(handler)
    async with container.call(concurrent=True) as call:
        if way == "call.run":
            return await call.run(handler)
        return await handler(**await call.resolve(handler))


# ---------------------------------------------------------------- deciding it


def brute_force(deps: list[tuple[int, ...]], waits: list[bool]) -> bool:
    """Two steps that wait, of which neither is an ancestor of the other."""
    ancestors: list[set[int]] = []
    for feeds in deps:
        ancestors.append(set(feeds).union(*(ancestors[j] for j in feeds)))
    waiting = [i for i, w in enumerate(waits) if w]
    return any(
        a not in ancestors[b] and b not in ancestors[a]
        for n, a in enumerate(waiting)
        for b in waiting[n + 1 :]
    )


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[tuple[int, ...]], list[bool]]:
    n = draw(st.integers(1, 12))
    deps = [
        tuple(sorted(draw(st.sets(st.integers(0, i - 1), max_size=3)))) if i else ()
        for i in range(n)
    ]
    return deps, [draw(st.booleans()) for _ in range(n)]


@settings(max_examples=300, deadline=None)
@given(dags())
def test_overlap_is_two_waiting_steps_neither_feeding_the_other(
    dag: tuple[list[tuple[int, ...]], list[bool]],
) -> None:
    deps, waits = dag

    def fn() -> None: ...

    # Indices are slots, not positions: give the steps scattered ones.
    slot = [7 * i + 3 for i in range(len(deps))]
    steps = tuple(
        Step(
            slot[i],
            fn,
            f"s{i}",
            f"s{i}",
            Scope.CALL,
            Kind.ASYNC if waits[i] else Kind.SYNC,
            not waits[i],
            False,
            tuple(Input(f"d{j}", "step", step=slot[j]) for j in feeds),
            "",
        )
        for i, feeds in enumerate(deps)
    )
    assert overlaps(steps) == brute_force(deps, waits)


def test_a_chain_a_single_resolver_and_plain_functions_do_not_overlap() -> None:
    container = Container()

    async def a() -> int:
        return 1

    async def b(v: Annotated[int, Resolve(a)]) -> int:
        return v

    @inline
    def side() -> int:
        return 1

    @inline
    def other() -> int:
        return 2

    async def c(v: Annotated[int, Resolve(b)], s: Annotated[int, Resolve(side)]) -> int:
        return v + s

    async def chain(v: Annotated[int, Resolve(c)], o: Annotated[int, Resolve(other)]) -> int:
        return v + o

    async def two(x: Annotated[int, Resolve(a)], y: Annotated[int, Resolve(side)]) -> int:
        return x + y

    async def diamond(x: Annotated[int, Resolve(b)], y: Annotated[int, Resolve(a)]) -> int:
        return x + y  # a feeds b: still a chain

    async def fork(x: Annotated[int, Resolve(b)], y: Annotated[int, Resolve(c)]) -> int:
        return x + y  # b feeds c: a chain too

    async def other_a() -> int:
        return 2

    async def branches(x: Annotated[int, Resolve(a)], y: Annotated[int, Resolve(other_a)]) -> int:
        return x + y

    for handler in (chain, two, diamond, fork):
        assert not container.compile(handler).overlaps, handler.__name__
    assert container.compile(branches).overlaps


# ---------------------------------------------------------------- running it


@pytest.mark.parametrize("way", WAYS)
async def test_a_plan_that_cannot_overlap_runs_in_the_callers_task(way: str) -> None:
    """No step of a chain gets a task of its own, on the first calls (interpreted) or
    once the plan's code is generated."""
    tasks: dict[str, int] = {}

    def here(name: str) -> None:
        tasks[name] = anyio.get_current_task().id

    async def first() -> str:
        here("first")
        return "a"

    async def second(v: Annotated[str, Resolve(first)]) -> str:
        here("second")
        return v + "b"

    async def handler(v: Annotated[str, Resolve(second)]) -> str:
        here("handler")
        return v

    container = Container(concurrent=True)
    for _ in range(4):
        tasks.clear()
        assert await run_in(way, container, handler) == "ab"
        assert tasks["first"] == tasks["second"] == tasks["handler"] == anyio.get_current_task().id


def chain_of_resources(events: list[str]) -> tuple[Any, Any, Any]:
    """a -> b -> c, each a resource whose teardown suspends (so it must be shielded to
    finish under cancellation) and records its closing, whatever the call's outcome."""

    async def a() -> AsyncIterator[str]:
        events.append("open a")
        try:
            yield "a"
        finally:
            await anyio.lowlevel.checkpoint()
            events.append("close a")

    async def b(v: Annotated[str, Resolve(a)]) -> AsyncIterator[str]:
        events.append("open b")
        try:
            yield v + "b"
        finally:
            await anyio.lowlevel.checkpoint()
            events.append("close b")

    async def c(v: Annotated[str, Resolve(b)]) -> AsyncIterator[str]:
        events.append("open c")
        try:
            yield v + "c"
        finally:
            await anyio.lowlevel.checkpoint()
            events.append("close c")

    return a, b, c


class Failed(Exception):
    pass


@pytest.mark.parametrize("way", WAYS)
async def test_no_overlap_closes_in_reverse_order_on_success_and_on_error(way: str) -> None:
    events: list[str] = []
    _, _, c = chain_of_resources(events)
    error = Failed("in the handler")

    async def ok(v: Annotated[str, Resolve(c)]) -> str:
        return v

    async def fails(v: Annotated[str, Resolve(c)]) -> str:
        raise error

    container = Container(concurrent=True)
    assert not container.compile(ok).overlaps
    opened = ["open a", "open b", "open c"]
    closed = ["close c", "close b", "close a"]
    for _ in range(3):  # interpreted first, then generated
        events.clear()
        assert await run_in(way, container, ok) == "abc"
        assert events == opened + closed
        events.clear()
        with pytest.raises(Failed) as caught:
            await run_in(way, container, fails)
        assert caught.value is error  # the same object, not a group
        assert events == opened + closed


@pytest.mark.parametrize("way", WAYS)
async def test_no_overlap_closes_in_reverse_order_when_cancelled(way: str) -> None:
    events: list[str] = []
    _, _, c = chain_of_resources(events)
    inside = anyio.Event()

    async def waits(v: Annotated[str, Resolve(c)]) -> str:
        inside.set()
        await anyio.sleep_forever()
        raise AssertionError("not reached")

    container = Container(concurrent=True)
    for _ in range(3):
        events.clear()
        inside = anyio.Event()
        with anyio.fail_after(5):  # only catches a hang
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    await run_in(way, container, waits)

                group.start_soon(call)
                await inside.wait()
                group.cancel_scope.cancel()
        # Each teardown suspends, and each ran to its end under the cancellation.
        assert events == ["open a", "open b", "open c", "close c", "close b", "close a"]


@pytest.mark.parametrize("way", WAYS)
async def test_branches_that_can_overlap_still_do(way: str) -> None:
    """Two resolvers that each wait for the other finish only if they run at once: with
    no resource (no call scope) and beside a resource (in a call scope)."""
    a_here, b_here = anyio.Event(), anyio.Event()
    events: list[str] = []

    async def a() -> str:
        a_here.set()
        await b_here.wait()
        return "a"

    async def b() -> str:
        b_here.set()
        await a_here.wait()
        return "b"

    async def held(x: Annotated[str, Resolve(a)]) -> AsyncIterator[str]:
        yield x + "!"
        events.append("closed")

    async def plain(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
        return x + y

    async def with_resource(x: Annotated[str, Resolve(held)], y: Annotated[str, Resolve(b)]) -> str:
        return x + y

    container = Container(concurrent=True)
    for _ in range(3):
        a_here, b_here = anyio.Event(), anyio.Event()
        with anyio.fail_after(5):  # a sequential run would stop here, not hang
            assert await run_in(way, container, plain) == "ab"
        a_here, b_here = anyio.Event(), anyio.Event()
        events.clear()
        with anyio.fail_after(5):
            assert await run_in(way, container, with_resource) == "a!b"
        assert events == ["closed"]


@pytest.mark.parametrize("last", ["a", "b"])
@pytest.mark.parametrize("way", WAYS)
async def test_a_branch_goes_on_with_the_step_it_made_ready(way: str, last: str) -> None:
    """a and b run at once, and one finishes last (events, no sleeps): c, which needs
    both, runs in that one's task, not a task of its own (the caller runs one of a and b
    itself), and sees what both set in context variables; where both set one, the last
    to finish wins, for c and for the handler."""
    own: dict[str, contextvars.ContextVar[str]] = {
        n: contextvars.ContextVar(n, default="-") for n in "ab"
    }
    shared: contextvars.ContextVar[str] = contextvars.ContextVar("shared", default="-")
    tasks: dict[str, int] = {}
    seen: dict[str, str] = {}

    def resolver(name: str, other: str) -> Any:
        async def step() -> str:
            tasks[name] = anyio.get_current_task().id
            here[name].set()
            await here[other].wait()  # both are running now
            if name == last:
                await done[other].wait()  # the other one has finished
            own[name].set(name)
            shared.set(f"{name}{round_}")  # new in each round: the caller keeps the last
            done[name].set()
            return name

        step.__name__ = step.__qualname__ = name
        return step

    a, b = resolver("a", "b"), resolver("b", "a")

    async def c(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
        tasks["c"] = anyio.get_current_task().id
        seen.update(a=own["a"].get(), b=own["b"].get(), shared=shared.get())
        return x + y

    async def handler(v: Annotated[str, Resolve(c)]) -> str:
        return f"{v} {own['a'].get()}{own['b'].get()} {shared.get()}"

    container = Container(concurrent=True)
    for round_ in range(3):
        here = {n: anyio.Event() for n in "ab"}
        done = {n: anyio.Event() for n in "ab"}
        tasks.clear()
        with anyio.fail_after(5):  # only catches a hang
            assert await run_in(way, container, handler) == f"ab ab {last}{round_}"
        assert seen == {"a": "a", "b": "b", "shared": f"{last}{round_}"}
        assert tasks["a"] != tasks["b"]
        assert anyio.get_current_task().id in (tasks["a"], tasks["b"])  # a task fewer
        assert tasks["c"] == tasks[last]


@pytest.mark.parametrize("kind", ["async", "worker thread", "inline"])
async def test_branches_with_no_call_scope_call_every_kind_of_handler(kind: str) -> None:
    """A concurrent container's `run` of branches with no CALL resource opens no call
    scope: the handler is still called as its kind says (a plain ``def`` in a worker
    thread unless marked inline), with the call's arguments and the branches' values."""
    a_here, b_here = anyio.Event(), anyio.Event()
    loop_thread = threading.get_ident()

    async def a() -> str:  # the two branches wait for each other
        a_here.set()
        await b_here.wait()
        return "a"

    async def b() -> str:
        b_here.set()
        await a_here.wait()
        return "b"

    def body(x: str, y: str, z: str) -> tuple[str, bool]:
        return x + y + z, threading.get_ident() == loop_thread

    if kind == "async":

        async def handler(
            z: str, x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]
        ) -> tuple[str, bool]:
            return body(x, y, z)

    else:

        def handler(  # type: ignore[misc]
            z: str, x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]
        ) -> tuple[str, bool]:
            return body(x, y, z)

        if kind == "inline":
            handler = inline(handler)

    container = Container(concurrent=True)
    for _ in range(3):
        a_here, b_here = anyio.Event(), anyio.Event()
        with anyio.fail_after(5):  # a sequential run would stop here, not hang
            value, on_loop = await container.run(handler, z="!")
        assert value == "ab!"
        assert on_loop is (kind != "worker thread")
