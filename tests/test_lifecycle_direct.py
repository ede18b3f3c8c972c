"""`container.run` sets up and tears down async resources in the plan's generated code
(no call scope object): the call-scope guarantees hold there too. Every finalizer runs
to completion, in reverse order, when the call is cancelled, also for a provider that
holds a task group across its ``yield``; the call's exception is thrown into each."""

from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import pytest

from modes import MODES, make_container, run
from resolvent import Container, Resolve


def closer(
    name: str, events: list[str], *, group: bool = False
) -> Callable[[], AsyncIterator[str]]:
    async def resource() -> AsyncIterator[str]:
        events.append(f"open {name}")
        try:
            if group:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(anyio.lowlevel.checkpoint)
                    yield name
            else:
                yield name
        finally:
            for _ in range(3):  # each would raise at once if teardown were not shielded
                await anyio.lowlevel.checkpoint()
            events.append(f"closed {name}")

    return resource


async def test_cancelled_run_closes_every_resource_in_full_in_reverse_order() -> None:
    events: list[str] = []
    a, b = closer("a", events), closer("b", events)
    c = closer("c", events, group=True)
    in_body = anyio.Event()

    async def handler(
        x: Annotated[str, Resolve(a)],
        y: Annotated[str, Resolve(b)],
        z: Annotated[str, Resolve(c)],
    ) -> None:
        in_body.set()
        await anyio.sleep_forever()

    container = Container()
    assert container.compile(handler).direct_fn is not None  # the generated teardown
    async with anyio.create_task_group() as group:
        group.start_soon(container.run, handler)
        await in_body.wait()
        group.cancel_scope.cancel()
    assert events == ["open a", "open b", "open c", "closed c", "closed b", "closed a"]


async def test_the_handlers_exception_is_thrown_into_every_resource() -> None:
    seen: list[BaseException] = []

    async def resource() -> AsyncIterator[int]:
        try:
            yield 1
        except LookupError as exc:
            seen.append(exc)
            raise

    async def handler(x: Annotated[int, Resolve(resource)]) -> None:
        raise LookupError("body")

    with pytest.raises(LookupError) as caught:
        await Container().run(handler)
    assert seen == [caught.value]
    assert not getattr(caught.value, "__notes__", None)


async def test_a_setup_that_finishes_despite_the_cancellation_is_closed_with_the_others() -> None:
    # The second resource is set up in a task of its own (its first call), and opens
    # although the call was cancelled while it did: the call closes it, then the first.
    events: list[str] = []
    a = closer("a", events)
    b_started = anyio.Event()

    async def b() -> AsyncIterator[str]:
        events.append("open b")
        b_started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            pass  # a setup that finishes regardless of the cancellation
        try:
            yield "b"
        finally:
            events.append("closed b")

    async def handler(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> None:
        events.append("body")  # never: the call was cancelled

    container = Container()
    with anyio.fail_after(30):  # a resource left open would be waited for forever
        async with anyio.create_task_group() as group:
            group.start_soon(container.run, handler)
            await b_started.wait()
            group.cancel_scope.cancel()
    assert events == ["open a", "open b", "closed b", "closed a"]


def ending(name: str, events: list[str], how: str) -> Callable[[], AsyncIterator[str]]:
    """An async-generator resource whose teardown ends at once (``"now"``), first
    suspends (``"suspends"``), or fails at once (``"fails"``)."""

    async def resource() -> AsyncIterator[str]:
        events.append(f"open {name}")
        yield name
        if how == "suspends":
            await anyio.lowlevel.checkpoint()
        if how == "fails":
            raise OSError(f"close {name}")
        events.append(f"closed {name}")

    return resource


def ending_class(name: str, events: list[str], how: str) -> Callable[..., Any]:
    """`ending`'s resource as a class-based async context manager: its ``__aexit__`` is
    its teardown, and must run once (a second exit would be noted twice)."""

    class Resource:
        async def __aenter__(self) -> str:
            events.append(f"open {name}")
            return name

        async def __aexit__(self, *exc_info: object) -> None:
            if how == "suspends":
                await anyio.lowlevel.checkpoint()
            if how == "fails":
                raise OSError(f"close {name}")
            events.append(f"closed {name}")

    return Resource


def joining(resources: list[Callable[..., Any]]) -> Callable[..., Any]:
    """A handler that takes the value of each of *resources* (one to three)."""
    if len(resources) == 1:
        (a,) = resources

        async def one(x: Annotated[str, Resolve(a)]) -> str:
            return x

        return one
    if len(resources) == 2:
        a, b = resources

        async def two(x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)]) -> str:
            return x + y

        return two
    a, b, c = resources

    async def three(
        x: Annotated[str, Resolve(a)], y: Annotated[str, Resolve(b)], z: Annotated[str, Resolve(c)]
    ) -> str:
        return x + y + z

    return three


@pytest.mark.parametrize(
    "hows",
    [
        ("now",),
        ("now", "now"),
        ("now", "now", "now"),
        ("now", "suspends", "now"),
        ("suspends", "now", "now"),
        ("now", "now", "suspends"),
        ("now", "fails", "now"),
        ("fails", "now", "now"),
    ],
)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [ending, ending_class], ids=["generator", "class"])
async def test_a_call_that_succeeds_closes_every_resource_in_reverse_order(
    mode: str, hows: tuple[str, ...], shape: Callable[[str, list[str], str], Any]
) -> None:
    """Every async resource of a call that succeeds (an async generator, or a class
    that is an async context manager) is closed once, the last opened first, whether
    each teardown ends at once, suspends or fails; a failing one is raised once the
    others are closed."""
    events: list[str] = []
    names = "abc"[: len(hows)]
    resources = [shape(n, events, how) for n, how in zip(names, hows, strict=True)]

    handler = joining(resources)
    container = make_container(mode)
    failing = [n for n, how in zip(names, hows, strict=True) if how == "fails"]
    async with container:
        for _ in range(3):  # the first calls of a plan, and its hot code after them
            events.clear()
            if failing:
                with pytest.raises(OSError, match=f"close {failing[0]}"):
                    await run(container, handler, mode)
            else:
                assert await run(container, handler, mode) == names
            order = list(names)
            if mode == "concurrent":  # independent branches: opened in any order...
                order = [e.removeprefix("open ") for e in events[: len(names)]]
                assert sorted(order) == list(names)
            opened = [f"open {n}" for n in order]
            # ...and closed in reverse order of that, whatever it was
            closed = [f"closed {n}" for n in reversed(order) if n not in failing]
            assert events == opened + closed


async def test_code_made_once_a_resource_is_known_plain_still_holds_one_that_is_not() -> None:
    """A plan generated after a resource is known to hold no cancel scope (another plan
    found out) sets it up in the caller's task without asking again; a resource not known
    so, one that holds a task group across its ``yield``, still gets a task of its own."""
    caller = anyio.get_current_task().id
    where: list[tuple[str, bool]] = []

    async def plain() -> AsyncIterator[str]:
        where.append(("plain", anyio.get_current_task().id == caller))
        yield "p"

    async def grouped() -> AsyncIterator[str]:
        where.append(("grouped", anyio.get_current_task().id == caller))
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(anyio.lowlevel.checkpoint)
            yield "g"

    async def first(p: Annotated[str, Resolve(plain)]) -> str:
        return p

    async def second(p: Annotated[str, Resolve(plain)], g: Annotated[str, Resolve(grouped)]) -> str:
        return p + g

    # A resource is found plain only where the lazy teardown shield can tell that it left
    # no cancel scope open (two looks at the task's innermost scope agree); with an anyio
    # older than that shape (asyncio), every async resource keeps a task of its own.
    from resolvent._runtime import shield as _shield

    learns = _shield.here() is _shield.here()
    container = Container()
    for _ in range(5):  # hot, and `plain` is known plain by now (where that is learnt)
        assert await container.run(first) == "p"
    assert container.compile(second).direct_fn is not None  # the generated set-up
    for _ in range(5):
        where.clear()
        assert await container.run(second) == "pg"
    assert sorted(where) == [("grouped", False), ("plain", learns)]
