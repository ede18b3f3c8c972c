"""Promised behaviours of the core, each tried in every execution mode it applies to:
two failing concurrent branches, the order of `on_close` callbacks, re-registering a
provider after a function ran, and a chain of three questions answered one per round."""

from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from modes import make_container
from resolvent import Container, Elicit, InputRequired, Resolve, Scope

# ---------------------------------------------------------------- concurrent failures


class FirstFailure(Exception):
    pass


class FailedWhileCancelled(Exception):
    pass


# The ways to run a plan with concurrent branches: a concurrent container's `run` (with and
# without a call timeout), and a call scope opened with concurrent=True (`run`, `resolve`).
CONCURRENT_WAYS = ["run", "run with call_timeout", "call.run", "call.resolve"]


async def run_concurrently(way: str, handler: Any) -> Any:
    if way == "run":
        return await Container(concurrent=True).run(handler)
    if way == "run with call_timeout":
        return await Container(concurrent=True, call_timeout=30).run(handler)
    container = Container()
    async with container.call(concurrent=True) as call:
        if way == "call.run":
            return await call.run(handler)
        return await call.resolve(handler)


@pytest.mark.parametrize("way", CONCURRENT_WAYS)
async def test_two_failing_branches_raise_the_first_with_the_other_as_a_note(way: str) -> None:
    """One branch fails; the other, cancelled because of it, fails too while being
    cancelled. The caller gets the first failure itself (not a group), and the second
    attached to it as a note."""
    waiting = anyio.Event()

    async def fails_first() -> int:
        await waiting.wait()  # the other branch is inside its wait
        raise FirstFailure("the first failure")

    async def fails_while_cancelled() -> int:
        try:
            waiting.set()
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise FailedWhileCancelled("failed in its cancellation") from None
        raise AssertionError("not reached")

    async def handler(
        a: Annotated[int, Resolve(fails_first)],
        b: Annotated[int, Resolve(fails_while_cancelled)],
    ) -> int:
        raise AssertionError("the handler must not run")

    with pytest.raises(FirstFailure) as caught:
        await run_concurrently(way, handler)
    assert str(caught.value) == "the first failure"
    notes = [n for n in getattr(caught.value, "__notes__", ()) if "another branch" in n]
    assert len(notes) == 1, getattr(caught.value, "__notes__", ())
    assert "FailedWhileCancelled" in notes[0] and "failed in its cancellation" in notes[0]


# ---------------------------------------------------------------- on_close order


async def test_on_close_callbacks_run_last_registered_first() -> None:
    """Like an exit stack: what was registered last (and may use what came before it)
    closes first; all of them before the APP resources."""
    container = Container()
    order: list[str] = []

    @container.provider(scope=Scope.APP)
    async def pool() -> Any:
        yield "pool"
        order.append("pool closed")

    async def uses_pool(p: Annotated[str, Resolve(pool)]) -> str:
        return p

    def closer(name: str) -> Any:
        async def close() -> None:
            await anyio.lowlevel.checkpoint()
            order.append(name)

        return close

    async with container:
        assert await container.run(uses_pool) == "pool"
        for name in ("first", "second", "third"):
            container.on_close(closer(name))
    assert order == ["third", "second", "first", "pool closed"]

    # The next time the container opens, it starts with no callbacks.
    order.clear()
    async with container:
        container.on_close(closer("again"))
    assert order == ["again"]


# ---------------------------------------------------------------- re-registration


RUN_MODES = ["generated", "interpreter", "concurrent", "timeout", "call.run", "call.resolve"]


async def run_in(container: Container, handler: Any, mode: str) -> Any:
    if mode == "interpreter":  # a multi-round call runs the interpreter
        async with container.call(rounds=True) as call:
            return await call.run(handler)
    if mode == "call.run":
        async with container.call() as call:
            return await call.run(handler)
    if mode == "call.resolve":
        async with container.call() as call:
            return (await call.resolve(handler))["n"]
    return await container.run(handler)


@pytest.mark.parametrize("mode", RUN_MODES)
async def test_re_registering_a_provider_after_a_run_applies_to_the_next_run(mode: str) -> None:
    """After `handler` ran (and its plan was compiled and cached), moving its provider to
    APP makes it run once for every later run; moving it back makes it run per call."""
    container = make_container(mode if mode in ("concurrent", "timeout") else "generated")
    made: list[int] = []

    async def counter() -> int:
        made.append(len(made))
        return len(made)

    async def other() -> int:  # so the concurrent plan has two branches
        return 0

    async def handler(
        n: Annotated[int, Resolve(counter)], _: Annotated[int, Resolve(other)]
    ) -> int:
        return n

    container.provide(counter, scope=Scope.CALL)
    async with container:
        assert [await run_in(container, handler, mode) for _ in range(2)] == [1, 2]

        container.provide(counter, scope=Scope.APP)
        assert [await run_in(container, handler, mode) for _ in range(3)] == [3, 3, 3]
        assert len(made) == 3

        container.provide(counter, scope=Scope.CALL)
        assert [await run_in(container, handler, mode) for _ in range(2)] == [4, 5]


# ---------------------------------------------------------------- three questions in a row


class Text(BaseModel):
    text: str


async def first() -> Elicit[Text]:
    return Elicit("first?", Text)


async def second(a: Annotated[Text, Resolve(first)]) -> Elicit[Text]:
    return Elicit(f"second, after {a.text}?", Text)


async def third(
    a: Annotated[Text, Resolve(first)], b: Annotated[Text, Resolve(second)]
) -> Elicit[Text]:
    return Elicit(f"third, after {a.text} and {b.text}?", Text)


async def chain(
    a: Annotated[Text, Resolve(first)],
    b: Annotated[Text, Resolve(second)],
    c: Annotated[Text, Resolve(third)],
) -> str:
    return f"{a.text}-{b.text}-{c.text}"


def key(fn: Any) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def accept(text: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"text": text}}


ROUND_MODES = ["sequential", "concurrent", "call_timeout"]


@pytest.mark.parametrize("mode", ROUND_MODES)
async def test_a_chain_of_three_questions_answered_one_per_round(mode: str) -> None:
    """Each round the client sends only the newest answer: the earlier ones ride the
    state through every later round, and the call finishes."""
    container = Container(call_timeout=30) if mode == "call_timeout" else Container()
    concurrent = mode == "concurrent"

    async def round_(answers: dict[str, Any] | None, state: str | None) -> Any:
        async with container.call(
            rounds=True, answers=answers, state=state, concurrent=concurrent
        ) as call:
            return await call.run(chain)

    with pytest.raises(InputRequired) as one:
        await round_(None, None)
    assert [q.message for q in one.value.questions.values()] == ["first?"]

    with pytest.raises(InputRequired) as two:
        await round_({key(first): accept("A")}, one.value.state)
    assert [q.message for q in two.value.questions.values()] == ["second, after A?"]

    with pytest.raises(InputRequired) as three:
        await round_({key(second): accept("B")}, two.value.state)
    assert [q.message for q in three.value.questions.values()] == ["third, after A and B?"]

    done = await round_({key(third): accept("C")}, three.value.state)
    assert done == "A-B-C"
