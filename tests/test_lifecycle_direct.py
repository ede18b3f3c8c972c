"""`container.run` sets up and tears down async resources in the plan's generated code
(no call scope object): the call-scope guarantees hold there too. Every finalizer runs
to completion, in reverse order, when the call is cancelled, also for a provider that
holds a task group across its ``yield``; the call's exception is thrown into each."""

from collections.abc import AsyncIterator, Callable
from typing import Annotated

import anyio
import anyio.lowlevel
import pytest

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
