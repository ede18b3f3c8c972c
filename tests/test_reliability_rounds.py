"""Hostile input to the multi-round flow: state and answers come from an untrusted client.

Whatever a client sends back, resolution ends in one of three ways: a value the
resolver produced or the user answered (validated against the schema), a re-ask
(`InputRequired`), or a clear `InvalidAnswer`. Never another exception, never an answer
used for a question it was not given to.
"""

import json
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from resolvent import Container, Elicit, ElicitationResult, InputRequired, InvalidAnswer, Resolve


class Pick(BaseModel):
    n: int


def make_tool() -> tuple[Container, Any]:
    async def first(topic: str) -> Elicit[Pick]:
        return Elicit(f"first about {topic}?", Pick)

    async def second(a: Annotated[Pick, Resolve(first)]) -> Elicit[Pick]:
        return Elicit(f"second after {a.n}?", Pick)

    async def tool(
        topic: str,
        a: Annotated[Pick, Resolve(first)],
        b: Annotated[ElicitationResult[Pick], Resolve(second)],
    ) -> tuple[int, Any]:
        return a.n, b

    return Container(), tool


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
answer_values = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"action": st.sampled_from(["accept", "decline", "cancel", "maybe"])},
        optional={"content": json_values | st.fixed_dictionaries({"n": json_values})},
    ),
)


async def _round(container: Container, tool: Any, answers: Any, state: Any) -> Any:
    async with container.call(rounds=True, answers=answers, state=state) as call:
        return await call.run(tool, topic="x")


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    state=st.one_of(st.none(), st.text(max_size=200), json_values.map(json.dumps)),
    answers=st.dictionaries(
        st.sampled_from(["first", "second", "other", ""]) | st.text(max_size=10),
        answer_values,
        max_size=3,
    ),
)
async def test_garbage_never_escapes(state: Any, answers: dict[str, Any]) -> None:
    container, tool = make_tool()
    try:
        n, outcome = await _round(container, tool, answers, state)
    except InputRequired as required:
        # Re-asking: the questions are real ones and the state is valid JSON.
        assert set(required.questions) <= {_key(tool, "first"), _key(tool, "second")}
        json.loads(required.state)
    except InvalidAnswer as error:
        # A clear error that never repeats the client's content.
        for value in answers.values():
            content = value.get("content") if isinstance(value, dict) else None
            if (
                isinstance(content, dict)
                and isinstance(content.get("n"), str)
                and len(content["n"]) > 3
            ):
                assert content["n"] not in str(error)
    else:  # pragma: no cover - a forged state cannot complete the call
        pytest.fail(f"completed from unsolicited input: {n}, {outcome}")


def _key(tool: Any, name: str) -> str:
    return f"{tool.__module__}:make_tool.<locals>.{name}"


async def test_answers_only_count_for_the_question_asked() -> None:
    container, tool = make_tool()
    with pytest.raises(InputRequired) as first_round:
        await _round(container, tool, None, None)
    (key,) = first_round.value.questions
    accept = {"action": "accept", "content": {"n": 7}}

    # The same answer without the state that pinned the question is not used.
    with pytest.raises(InputRequired) as again:
        await _round(container, tool, {key: accept}, None)
    assert list(again.value.questions) == [key]

    # With the state, it is; the next question follows and the first is not re-asked.
    with pytest.raises(InputRequired) as second_round:
        await _round(container, tool, {key: accept}, first_round.value.state)
    (second_key,) = second_round.value.questions
    assert second_key != key

    # Replaying round 1's state for round 2's answer: the answer is not accepted.
    with pytest.raises(InputRequired):
        await _round(container, tool, {second_key: accept}, first_round.value.state)

    n, outcome = await _round(
        container, tool, {second_key: {"action": "decline"}}, second_round.value.state
    )
    assert n == 7
    assert outcome.action == "decline"


async def test_a_changed_question_is_asked_again() -> None:
    container, tool = make_tool()
    with pytest.raises(InputRequired) as first_round:
        await _round(container, tool, None, None)
    (key,) = first_round.value.questions
    state = json.loads(first_round.value.state)
    state["asked"][key] = "a-different-digest"
    with pytest.raises(InputRequired) as again:
        await _round(
            container, tool, {key: {"action": "accept", "content": {"n": 1}}}, json.dumps(state)
        )
    assert list(again.value.questions) == [key]


async def test_schema_violating_content_is_rejected_without_echo() -> None:
    container, tool = make_tool()
    with pytest.raises(InputRequired) as first_round:
        await _round(container, tool, None, None)
    (key,) = first_round.value.questions
    secret = "do-not-echo-this-value"
    with pytest.raises(InvalidAnswer) as error:
        await _round(
            container,
            tool,
            {key: {"action": "accept", "content": {"n": secret}}},
            first_round.value.state,
        )
    assert secret not in str(error.value)
    assert "Pick" in str(error.value)


async def test_oversized_state_counts_as_no_progress() -> None:
    container, tool = make_tool()
    with pytest.raises(InputRequired) as required:
        await _round(container, tool, None, "x" * (2 << 20))
    assert len(required.value.questions) == 1
