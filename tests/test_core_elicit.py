"""Elicitation: a resolver returns Elicit(...), the call's asker answers, consumers choose
between the bare value and the outcome."""

from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from resolvent import (
    Accepted,
    Cancelled,
    Container,
    Declined,
    Elicit,
    ElicitationResult,
    InvalidAnswer,
    NotAccepted,
    Resolve,
    ResolventError,
)

MODES = pytest.mark.parametrize("concurrent", [False, True], ids=["generated", "interpreted"])


class Name(BaseModel):
    name: str


class Asker:
    """Answers every question with *outcome*, recording what it was asked."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.asked: list[tuple[str, type[BaseModel]]] = []

    async def __call__(self, message: str, schema: type[BaseModel]) -> Any:
        self.asked.append((message, schema))
        return self.outcome


async def ask_name() -> Elicit[Name] | Name:
    return Elicit("What is your name?", Name)


async def greeting(n: Annotated[Name, Resolve(ask_name)]) -> str:
    return f"hello {n.name}"


async def unwrapped(
    g: Annotated[str, Resolve(greeting)], n: Annotated[Name, Resolve(ask_name)]
) -> str:
    return f"{g} ({n.name})"


async def run(container: Container, fn: Any, asker: Any, concurrent: bool) -> Any:
    async with container.call(asker=asker, concurrent=concurrent) as call:
        return await call.run(fn)


@MODES
async def test_unwrapped_consumer_gets_the_model_and_the_question_is_asked_once(
    concurrent: bool,
) -> None:
    asker = Asker(Accepted(data=Name(name="Ada")))
    assert await run(Container(), unwrapped, asker, concurrent) == "hello Ada (Ada)"
    assert asker.asked == [("What is your name?", Name)]


@MODES
@pytest.mark.parametrize("outcome", [Declined(), Cancelled()], ids=["decline", "cancel"])
async def test_decline_or_cancel_raises_not_accepted(outcome: Any, concurrent: bool) -> None:
    with pytest.raises(NotAccepted) as info:
        await run(Container(), greeting, Asker(outcome), concurrent)
    error = info.value
    assert error.parameter == "n"
    assert error.consumer.endswith("greeting")
    assert error.action == outcome.action
    word = "declined" if outcome.action == "decline" else "cancelled"
    assert str(error) == (
        f"parameter 'n' of {error.consumer} could not be resolved: the user {word} the elicitation"
    )
    assert isinstance(error, ResolventError)


async def outcome_consumer(r: Annotated[ElicitationResult[Name], Resolve(ask_name)]) -> Any:
    return r


async def member_consumer(r: Annotated[Accepted[Name] | Declined, Resolve(ask_name)]) -> Any:
    return r


@MODES
@pytest.mark.parametrize("consumer", [outcome_consumer, member_consumer], ids=["union", "member"])
@pytest.mark.parametrize(
    "outcome", [Accepted(data=Name(name="Ada")), Declined(), Cancelled()], ids=lambda o: o.action
)
async def test_outcome_consumer_gets_the_outcome(
    consumer: Any, outcome: Any, concurrent: bool
) -> None:
    result = await run(Container(), consumer, Asker(outcome), concurrent)
    expected_class = {"accept": Accepted, "decline": Declined, "cancel": Cancelled}[outcome.action]
    assert isinstance(result, expected_class)
    assert result.action == outcome.action
    if isinstance(outcome, Accepted):
        assert result.data == Name(name="Ada")


async def plain() -> int:
    return 42


async def union_of_plain(r: Annotated[ElicitationResult[int], Resolve(plain)]) -> Any:
    return r


@MODES
async def test_union_consumer_of_a_resolver_that_did_not_elicit_gets_accepted(
    concurrent: bool,
) -> None:
    result = await run(Container(), union_of_plain, None, concurrent)
    assert isinstance(result, Accepted)
    assert result.data == 42


async def maybe_ask(user_id: str) -> Elicit[Name] | Name:
    if user_id == "known":
        return Name(name="Known")
    return Elicit("Who?", Name)


async def maybe_handler(
    user_id: str, n: Annotated[ElicitationResult[Name], Resolve(maybe_ask)]
) -> Any:
    return n


@MODES
async def test_may_ask_resolver_that_did_not_ask_is_accepted(concurrent: bool) -> None:
    asker = Asker(Declined())
    async with Container().call(asker=asker, concurrent=concurrent) as call:
        result = await call.run(maybe_handler, user_id="known")
    assert isinstance(result, Accepted)
    assert result.data == Name(name="Known")
    assert asker.asked == []


@MODES
async def test_dict_answer_is_validated_against_the_schema(concurrent: bool) -> None:
    good = Asker(Accepted(data={"name": "Ada"}))
    assert await run(Container(), greeting, good, concurrent) == "hello Ada"

    secret = "s3cr3t-value-never-echoed"
    bad = Asker(Accepted(data={"name": {"nested": secret}}))
    with pytest.raises(InvalidAnswer) as info:
        await run(Container(), greeting, bad, concurrent)
    message = str(info.value)
    assert "ask_name" in message
    assert "parameter 'n'" in message  # the resolver and the parameter it was for
    assert "Name" in message
    assert "name" in message  # the field at fault
    assert secret not in message
    assert secret not in repr(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__  # the validation error (with content) is hidden


@MODES
async def test_asker_returning_something_else_is_invalid(concurrent: bool) -> None:
    with pytest.raises(InvalidAnswer, match="not an outcome"):
        await run(Container(), greeting, Asker("yes"), concurrent)


@MODES
async def test_no_asker_is_a_clear_error(concurrent: bool) -> None:
    with pytest.raises(ResolventError) as info:
        await run(Container(), greeting, None, concurrent)
    message = str(info.value)
    assert "ask_name" in message
    assert "nobody to ask" in message
    assert "container.call(asker=...)" in message


async def test_container_run_without_asker_is_a_clear_error() -> None:
    with pytest.raises(ResolventError, match="nobody to ask"):
        await Container().run(greeting)


def sync_ask() -> Elicit[Name] | Name:
    return Elicit("Sync?", Name)


def sync_consumer(n: Annotated[Name, Resolve(sync_ask)]) -> str:
    return n.name


async def sync_root(s: Annotated[str, Resolve(sync_consumer)]) -> str:
    return s


@MODES
async def test_sync_resolver_may_ask(concurrent: bool) -> None:
    asker = Asker(Accepted(data=Name(name="Sync")))
    assert await run(Container(), sync_root, asker, concurrent) == "Sync"
    assert asker.asked == [("Sync?", Name)]


async def test_session_call_takes_an_asker() -> None:
    container = Container()
    asker = Asker(Accepted(data=Name(name="S")))
    async with container, container.session() as session, session.call(asker=asker) as call:
        assert await call.run(greeting) == "hello S"
