"""A multi-round call resolves with the plan's generated code up to its first question with
no answer yet, and the interpreter goes on from there: what comes after that question runs
once, is skipped while its inputs wait for an answer, and fails or misses an argument as it
would have anywhere else."""

from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel

from resolvent import Container, Elicit, InputRequired, Resolve, ResolventError

RUNS: list[str] = []


class Text(BaseModel):
    text: str


async def base() -> int:
    RUNS.append("base")
    return 1


async def name_question(b: Annotated[int, Resolve(base)]) -> Elicit[Text] | Text:
    RUNS.append("question")
    return Elicit("your name?", Text)


async def greeting(name: Annotated[Text, Resolve(name_question)]) -> str:
    RUNS.append("greeting")
    return f"hi {name.text}"


async def signature(b: Annotated[int, Resolve(base)], user_id: str, mark: str = "!") -> str:
    RUNS.append("signature")
    return f"{user_id}{mark}"


async def handler(
    user_id: str, g: Annotated[str, Resolve(greeting)], s: Annotated[str, Resolve(signature)]
) -> str:
    return f"{g} {s}"


async def broken(b: Annotated[int, Resolve(base)]) -> str:
    RUNS.append("broken")
    raise ValueError("the store is down")


async def failing(g: Annotated[str, Resolve(greeting)], x: Annotated[str, Resolve(broken)]) -> str:
    return g + x


def answer(text: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"text": text}}


KEY = f"{name_question.__module__}:{name_question.__qualname__}"


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()


async def test_what_follows_an_open_question_runs_once_and_its_dependents_wait() -> None:
    container = Container()
    # The question comes before the resolver that does not need it (the order the
    # handler's parameters give), so the interpreter, not the generated code, runs it.
    order = [step.name.rpartition(".")[2] for step in container.compile(handler).steps]
    assert order.index("name_question") < order.index("signature")
    with pytest.raises(InputRequired) as first:
        async with container.call(rounds=True) as call:
            await call.run(handler, user_id="ann")
    assert set(first.value.questions) == {KEY}
    assert RUNS == ["base", "question", "signature"]  # greeting waits for the answer

    RUNS.clear()
    async with container.call(
        rounds=True, answers={KEY: answer("Ann")}, state=first.value.state
    ) as call:
        assert await call.run(handler, user_id="ann") == "hi Ann ann!"
    assert RUNS == ["base", "question", "greeting", "signature"]


async def test_a_failure_after_an_open_question_is_the_calls_error() -> None:
    container = Container()
    with pytest.raises(ValueError, match="the store is down") as info:
        async with container.call(rounds=True) as call:
            await call.run(failing)
    assert any("broken" in note for note in getattr(info.value, "__notes__", ()))
    assert RUNS.count("question") == 1
    assert RUNS.count("broken") == 1


async def test_a_missing_argument_after_an_open_question_says_which() -> None:
    container = Container()
    with pytest.raises(ResolventError, match=r"'user_id' needed by .*signature was not given"):
        async with container.call(rounds=True) as call:
            await call.run(handler)
    assert RUNS == ["base", "question"]


async def test_a_question_two_resolutions_share_is_asked_once_in_a_round() -> None:
    # Two resolutions of one multi-round call need the same question; the second reaches
    # it while the first asks. The question waits for this round's answers: it is not
    # asked again, and the round ends with it once.
    asked: list[str] = []

    async def slow_question() -> Elicit[Text] | Text:
        asked.append("question")
        await anyio.sleep(0)  # the other resolution arrives meanwhile
        return Elicit("your name?", Text)

    async def one(name: Annotated[Text, Resolve(slow_question)]) -> str:
        return name.text

    async def two(name: Annotated[Text, Resolve(slow_question)]) -> str:
        return name.text

    raised: list[InputRequired] = []

    async def run(call: Any, fn: Any) -> None:
        with pytest.raises(InputRequired) as info:
            await call.run(fn)
        raised.append(info.value)

    async with Container().call(rounds=True) as call, anyio.create_task_group() as group:
        group.start_soon(run, call, one)
        group.start_soon(run, call, two)
    assert asked == ["question"]
    assert [len(error.questions) for error in raised] == [1, 1]
