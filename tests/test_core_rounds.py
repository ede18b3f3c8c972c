"""The resumable form: rounds=True batches questions into InputRequired; a fresh call
resumes with the answers and the opaque state."""

import json
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from resolvent import (
    Container,
    Elicit,
    ElicitationResult,
    InputRequired,
    InvalidAnswer,
    NotAccepted,
    Resolve,
    ResolventError,
)

MODES = pytest.mark.parametrize("concurrent", [False, True], ids=["sequential", "concurrent"])

RUNS: dict[str, int] = {}


class Text(BaseModel):
    text: str


def count(name: str) -> None:
    RUNS[name] = RUNS.get(name, 0) + 1


async def q1() -> Elicit[Text] | Text:
    count("q1")
    return Elicit("first?", Text)


async def q2(a: Annotated[Text, Resolve(q1)]) -> Elicit[Text] | Text:
    count("q2")
    return Elicit(f"second, after {a.text}?", Text)


async def q3() -> Elicit[Text] | Text:
    count("q3")
    return Elicit("third?", Text)


async def three(b: Annotated[Text, Resolve(q2)], c: Annotated[Text, Resolve(q3)]) -> str:
    return f"{b.text}+{c.text}"


def accept(text: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"text": text}}


def key(fn: Any) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


async def round_(
    container: Container,
    fn: Any,
    concurrent: bool,
    answers: dict[str, Any] | None = None,
    state: str | None = None,
    **kwargs: Any,
) -> Any:
    async with container.call(
        rounds=True, answers=answers, state=state, concurrent=concurrent
    ) as call:
        return await call.run(fn, **kwargs)


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()


@MODES
async def test_dependent_question_takes_a_second_round_and_nothing_is_asked_twice(
    concurrent: bool,
) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, three, concurrent)
    assert set(first.value.questions) == {key(q1), key(q3)}  # independent ones batched
    assert first.value.questions[key(q1)].message == "first?"
    json.loads(first.value.state)  # JSON-serializable

    answers = {key(q1): accept("A"), key(q3): accept("C")}
    with pytest.raises(InputRequired) as second:
        await round_(container, three, concurrent, answers, first.value.state)
    assert set(second.value.questions) == {key(q2)}  # q1 and q3 are not asked again
    assert second.value.questions[key(q2)].message == "second, after A?"

    # The client sends only the newest answer; earlier ones ride the state.
    done = await round_(container, three, concurrent, {key(q2): accept("B")}, second.value.state)
    assert done == "B+C"


@MODES
async def test_resending_every_answer_works_too(concurrent: bool) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, three, concurrent)
    answers = {key(q1): accept("A"), key(q3): accept("C")}
    with pytest.raises(InputRequired) as second:
        await round_(container, three, concurrent, answers, first.value.state)
    answers[key(q2)] = accept("B")
    assert await round_(container, three, concurrent, answers, second.value.state) == "B+C"


@MODES
async def test_answers_without_state_are_not_accepted(concurrent: bool) -> None:
    container = Container()
    answers = {key(q1): accept("A"), key(q3): accept("C")}
    with pytest.raises(InputRequired) as info:
        await round_(container, three, concurrent, answers, None)
    assert set(info.value.questions) == {key(q1), key(q3)}


async def topic_question(topic: str) -> Elicit[Text] | Text:
    return Elicit(f"about {topic}?", Text)


async def topical(topic: str, t: Annotated[Text, Resolve(topic_question)]) -> str:
    return t.text


@MODES
async def test_answer_to_a_changed_question_is_not_accepted(concurrent: bool) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, topical, concurrent, topic="cats")
    k = key(topic_question)
    answers = {k: accept("meow")}
    # The same answer to the question as asked is accepted ...
    assert (
        await round_(container, topical, concurrent, answers, first.value.state, topic="cats")
        == "meow"
    )
    # ... but not when the question now reads differently: it is asked again.
    with pytest.raises(InputRequired) as again:
        await round_(container, topical, concurrent, answers, first.value.state, topic="dogs")
    assert again.value.questions[k].message == "about dogs?"


async def follow_up(t: Annotated[Text, Resolve(topic_question)]) -> Elicit[Text] | Text:
    return Elicit(f"more about {t.text}?", Text)


async def two_step(topic: str, f: Annotated[Text, Resolve(follow_up)]) -> str:
    return f.text


@MODES
async def test_recorded_answer_for_a_changed_question_is_dropped(concurrent: bool) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, two_step, concurrent, topic="cats")
    answers = {key(topic_question): accept("meow")}
    with pytest.raises(InputRequired) as second:
        await round_(container, two_step, concurrent, answers, first.value.state, topic="cats")
    assert set(second.value.questions) == {key(follow_up)}
    # The state records the answer to "about cats?"; it does not answer "about dogs?".
    with pytest.raises(InputRequired) as third:
        await round_(container, two_step, concurrent, None, second.value.state, topic="dogs")
    assert set(third.value.questions) == {key(topic_question)}
    assert third.value.questions[key(topic_question)].message == "about dogs?"


GARBAGE = [
    "not json at all",
    "[1, 2, 3]",
    '{"v": 2, "answers": {}, "asked": {}}',
    '{"v": 1, "answers": [], "asked": {}}',
    '{"v": 1, "answers": {"x": 1}, "asked": 5}',
    '{"v": 1, "answers": {"x": {"q": 1}}, "asked": {"x": null}}',
    "{" * 10_000,
    "x" * (2 << 20),
]


@MODES
@pytest.mark.parametrize("state", GARBAGE, ids=range(len(GARBAGE)))
async def test_garbage_state_is_no_progress(state: str, concurrent: bool) -> None:
    container = Container()
    answers = {key(q1): accept("A"), key(q3): accept("C")}
    with pytest.raises(InputRequired) as info:
        await round_(container, three, concurrent, answers, state)
    assert set(info.value.questions) == {key(q1), key(q3)}


@MODES
async def test_forged_state_for_another_question_is_no_progress(concurrent: bool) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, topical, concurrent, topic="cats")
    data = json.loads(first.value.state)
    k = key(topic_question)
    forged = json.dumps(
        {"v": 1, "answers": {k: {"q": "0" * 24, "r": accept("x")}}, "asked": {k: "0" * 24}}
    )
    with pytest.raises(InputRequired) as info:
        await round_(container, topical, concurrent, {k: accept("x")}, forged, topic="cats")
    assert set(info.value.questions) == {k}
    assert data["asked"][k] != "0" * 24


@MODES
async def test_answer_keys_not_asked_are_ignored(concurrent: bool) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, three, concurrent)
    answers = {
        key(q1): accept("A"),
        key(q3): accept("C"),
        key(q2): accept("too early"),  # not asked yet: ignored
        "nobody.asked.this": accept("?"),
        "": "not even an answer",
    }
    with pytest.raises(InputRequired) as second:
        await round_(container, three, concurrent, answers, first.value.state)
    assert set(second.value.questions) == {key(q2)}
    assert "nobody.asked.this" not in second.value.state


@MODES
async def test_declined_answer_raises_not_accepted(concurrent: bool) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, topical, concurrent, topic="cats")
    with pytest.raises(NotAccepted) as info:
        await round_(
            container,
            topical,
            concurrent,
            {key(topic_question): {"action": "decline"}},
            first.value.state,
            topic="cats",
        )
    assert info.value.parameter == "t"
    assert info.value.action == "decline"


async def outcome_topical(
    topic: str,
    t: Annotated[ElicitationResult[Text], Resolve(topic_question)],
) -> str:
    return t.action


@MODES
async def test_outcome_consumer_sees_cancel(concurrent: bool) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, outcome_topical, concurrent, topic="x")
    result = await round_(
        container,
        outcome_topical,
        concurrent,
        {key(topic_question): {"action": "cancel"}},
        first.value.state,
        topic="x",
    )
    assert result == "cancel"


@MODES
async def test_invalid_answer_names_the_resolver_without_echoing(concurrent: bool) -> None:
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, topical, concurrent, topic="cats")
    secret = "hunter2-do-not-echo"
    for bad in (
        {"action": "accept", "content": {"text": {"deep": secret}}},
        {"action": "accept"},
        {"action": secret},
        secret,
    ):
        with pytest.raises(InvalidAnswer) as info:
            await round_(
                container,
                topical,
                concurrent,
                {key(topic_question): bad},
                first.value.state,
                topic="cats",
            )
        assert "topic_question" in str(info.value)
        assert "parameter 't'" in str(info.value)
        assert info.value.parameter == "t"
        assert secret not in str(info.value)


async def test_input_required_is_a_resolvent_error_listing_the_keys() -> None:
    container = Container()
    with pytest.raises(ResolventError) as info:
        await round_(container, three, False)
    assert isinstance(info.value, InputRequired)
    assert key(q1) in str(info.value)


async def test_resolvers_before_a_question_run_again_each_round() -> None:
    # Nothing survives between rounds but the state: the CALL resolvers run again.
    container = Container()
    with pytest.raises(InputRequired) as first:
        await round_(container, three, False)
    answers = {key(q1): accept("A"), key(q3): accept("C")}
    with pytest.raises(InputRequired):
        await round_(container, three, False, answers, first.value.state)
    assert RUNS == {"q1": 2, "q3": 2, "q2": 1}
