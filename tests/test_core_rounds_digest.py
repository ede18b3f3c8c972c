"""An answer carried between rounds is accepted only for the question it was given to: the
same message with another schema is another question, asked again, however often either
schema was asked before."""

from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from resolvent import Container, Elicit, InputRequired, Resolve


class Name(BaseModel):
    text: str


class Age(BaseModel):
    years: int


SCHEMA: list[type[BaseModel]] = [Name]


async def question() -> Elicit[Any] | Any:
    return Elicit("tell me", SCHEMA[0])


async def handler(answer: Annotated[Any, Resolve(question)]) -> Any:
    return answer


KEY = f"{question.__module__}:{question.__qualname__}"


async def first_round(container: Container) -> InputRequired:
    with pytest.raises(InputRequired) as info:
        async with container.call(rounds=True) as call:
            await call.run(handler)
    return info.value


async def test_an_answer_to_one_schema_is_not_taken_for_another() -> None:
    container = Container()
    SCHEMA[0] = Age
    await first_round(container)  # Age's schema asked once before, in another call
    SCHEMA[0] = Name
    asked = await first_round(container)
    SCHEMA[0] = Age  # the same message, another schema: another question
    try:
        with pytest.raises(InputRequired) as again:
            async with container.call(
                rounds=True,
                answers={KEY: {"action": "accept", "content": {"text": "Ann"}}},
                state=asked.state,
            ) as call:
                await call.run(handler)
        assert again.value.questions[KEY].schema is Age
    finally:
        SCHEMA[0] = Name


async def test_an_answer_to_the_same_question_is_taken() -> None:
    container = Container()
    asked = await first_round(container)
    async with container.call(
        rounds=True,
        answers={KEY: {"action": "accept", "content": {"text": "Ann"}}},
        state=asked.state,
    ) as call:
        assert await call.run(handler) == Name(text="Ann")
