"""An expired call_timeout is a TimeoutError that says what ran out of time, in every mode;
the wait for a person's answer is not counted, and answer_timeout bounds it."""

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from resolvent import Accepted, Container, Elicit, Resolve, Scope

MODES = ["generated", "interpreter", "concurrent", "call.run", "call.resolve"]


async def run(container: Container, handler: Any, mode: str) -> Any:
    if mode in ("generated", "concurrent"):
        return await container.run(handler)
    async with container.call(rounds=mode == "interpreter") as call:
        if mode == "call.resolve":
            return await call.resolve(handler)
        return await call.run(handler)


async def fast() -> int:
    return 1


async def stuck(f: Annotated[int, Resolve(fast)]) -> list[str]:
    await anyio.Event().wait()  # only the deadline ends it
    return []


async def stuck_resource(f: Annotated[int, Resolve(fast)]) -> AsyncIterator[list[str]]:
    await anyio.Event().wait()
    yield []  # pragma: no cover


def stuck_in_a_thread(f: Annotated[int, Resolve(fast)]) -> list[str]:
    import time

    time.sleep(0.3)
    return []


async def stuck_app() -> list[str]:
    await anyio.Event().wait()
    return []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "slow", [stuck, stuck_resource, stuck_in_a_thread, stuck_app], ids=lambda f: f.__name__
)
async def test_the_timeout_names_the_parameter_the_resolver_and_the_bound(
    mode: str, slow: Any
) -> None:
    container = Container(call_timeout=0.05, concurrent=mode == "concurrent")
    if slow is stuck_app:
        container.provide(slow, scope=Scope.APP)

    async def load(rows: Annotated[list[str], Resolve(slow)]) -> list[str]:
        return rows

    async def handler(
        first: Annotated[int, Resolve(fast)], rows: Annotated[list[str], Resolve(load)]
    ) -> None:
        raise AssertionError("not reached")

    async with container:
        with anyio.fail_after(10), pytest.raises(TimeoutError) as caught:
            await run(container, handler, mode)
    message = str(caught.value)
    first = message.splitlines()[0]
    assert first.startswith("resolving `rows` took longer than call_timeout=0.05 s"), message
    assert f"{slow.__qualname__} was still running" in first
    assert f"{handler.__qualname__}(rows=...) -> " in message
    assert "fix:" in message and "Container(call_timeout=...)" in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize("mode", MODES)
async def test_a_resolvers_own_timeout_error_passes_unchanged(mode: str) -> None:
    raised = TimeoutError("the upstream API timed out")

    async def upstream() -> str:
        raise raised

    async def handler(value: Annotated[str, Resolve(upstream)]) -> None:
        raise AssertionError("not reached")

    container = Container(call_timeout=30, concurrent=mode == "concurrent")
    with pytest.raises(TimeoutError) as caught:
        await run(container, handler, mode)
    assert caught.value is raised


class Name(BaseModel):
    name: str


async def ask_name() -> Elicit[Name]:
    return Elicit("Your name?", Name)


async def greet(n: Annotated[Name, Resolve(ask_name)], f: Annotated[int, Resolve(fast)]) -> str:
    return f"hello {n.name}"


def slow_asker(seconds: float) -> Any:
    async def asker(message: str, schema: type[BaseModel]) -> Accepted[Any]:
        await anyio.sleep(seconds)
        return Accepted(data=schema.model_validate({"name": "Ada"}))

    return asker


ASKING_MODES = ["generated", "concurrent", "call.run", "call.resolve"]


async def run_asking(container: Container, mode: str, asker: Any) -> Any:
    async with container.call(asker=asker) as call:
        if mode == "call.resolve":
            return (await call.resolve(greet))["n"].name
        return await call.run(greet)


@pytest.mark.parametrize("mode", ASKING_MODES)
async def test_the_wait_for_an_answer_is_not_resolver_time(mode: str) -> None:
    container = Container(call_timeout=0.1, concurrent=mode == "concurrent")
    assert "Ada" in await run_asking(container, mode, slow_asker(0.4))


@pytest.mark.parametrize("mode", ASKING_MODES)
async def test_answer_timeout_bounds_the_wait(mode: str) -> None:
    container = Container(answer_timeout=0.05, concurrent=mode == "concurrent")
    with anyio.fail_after(10), pytest.raises(TimeoutError) as caught:
        await run_asking(container, mode, slow_asker(5))
    message = str(caught.value)
    assert message.startswith(
        "the question asked for `n` (test_lifecycle_timeouts.ask_name) was not answered "
        "within answer_timeout=0.05 s"
    ), message
    assert "Container(answer_timeout=...)" in message
