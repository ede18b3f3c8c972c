"""Asking during a resolution: a question goes to the call's answerer or asker, or to
multi-round asking (`Rounds`), whose answers ride an opaque state. It never runs a resolver.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, cast

from .._vocabulary.errors import (
    AnswerPending,
    AnswerTimeout,
    InputRequired,
    InvalidAnswer,
    ResolventError,
)
from .._vocabulary.questions import QUESTION_KINDS, Answered, Asker, Outcome, QuestionKind

if TYPE_CHECKING:
    from .._graph.plan import Step

__all__ = ("AnswerPending", "Asking", "Rounds", "ask", "open_rounds", "question_kind")


if TYPE_CHECKING:

    class Asking(Protocol):
        """What `ask` needs of a call scope (implemented by `resolvent.Call`)."""

        rounds: Rounds | None
        asker: Asker | None
        answerer: Callable[[Any, Any], Awaitable[Any]] | None

        async def answered(self, step: Step, answer: Awaitable[Any]) -> Any:
            """Await a person's *answer* to *step*'s question (outside ``call_timeout``)."""
            ...


def question_kind(question: Any) -> QuestionKind:
    cls_: type[object] = type(cast(object, question))
    kind = QUESTION_KINDS.get(cls_)
    if kind is None:
        for cls in cls_.__mro__:
            if cls in QUESTION_KINDS:
                return QUESTION_KINDS[cls]
        raise ResolventError(f"{type(question).__name__} is not a known question type")
    return kind


async def ask(call: Asking | None, step: Step, question: Any) -> Answered:
    """Answer *step*'s question through the call's round state, answerer or asker.

    *call* is None when `Container.run` started the plan without a call scope: nobody
    can answer there, so a plan whose resolvers only *may* ask needs no scope.
    """
    kind = question_kind(question)
    if call is not None:
        if call.rounds is not None:
            return Answered(call.rounds.answer(step, question, kind))
        # A person answers: the wait is theirs, not the resolvers' (see `Call.answered`).
        if call.answerer is not None:
            return Answered(await call.answered(step, call.answerer(step, question)))
        if call.asker is not None and kind.ask is not None:
            try:
                return Answered(await call.answered(step, kind.ask(call.asker, question)))
            except InvalidAnswer as exc:
                raise InvalidAnswer.at(step.name, step.wire_key, exc, step.param) from None
    raise ResolventError(
        f"{step.name} asked a question ({question!r}) but this call has nobody to ask.\n"
        "  fix: open the call with an asker, `container.call(asker=...)`, or use rounds=True"
    )


_NOTHING: Mapping[str, Any] = MappingProxyType({})
"""No answers, no state: what a first round reads (never written)."""


class Rounds:
    """Multi-round asking: questions are batched per round, answers ride an opaque state.

    Nothing is kept between rounds but the state string the caller carries, so a later
    round may run in another process. An answer is accepted only for the exact question
    (by digest) it was given to; each question is asked once.
    """

    # Made by `open_rounds`, with no ``__init__``: a multi-round call makes one each time,
    # and a Python ``__init__`` run through the class costs as much as the rest of it.
    __slots__ = (
        "answer_timeout",
        "answers",
        "asked",
        "asked_at",
        "asking",
        "pending",
        "persist",
        "recorded",
    )  # fmt: skip

    MAX_STATE = 1 << 20

    answers: Mapping[str, Any]
    recorded: Mapping[str, dict[str, Any]]
    asked: Mapping[str, str]
    pending: dict[str, Any]
    asking: dict[str, str]
    persist: dict[str, dict[str, Any]]
    answer_timeout: float | None
    asked_at: dict[str, float]  # with an answer bound only: see `open_rounds`

    @classmethod
    def decode_times(cls, state: Any) -> dict[str, float]:
        """When each question in *state* (well-formed: `decode` read it) was first asked."""
        import json

        data = _as_dict(json.loads(state))
        times = _as_dict(data.get("at")) if data is not None else None
        if times is None:
            return {}
        return {k: float(t) for k, t in times.items() if isinstance(t, int | float)}

    @classmethod
    def decode(cls, state: Any) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """Decode untrusted state; anything malformed counts as no progress."""
        if not state or not isinstance(state, str) or len(state) > cls.MAX_STATE:
            return {}, {}
        import json  # only a round that carries state; not paid by `import resolvent`

        try:
            data = _as_dict(json.loads(state))
        except ValueError:
            return {}, {}
        if data is None or data.get("v") != 1:
            return {}, {}
        recorded, asked = _as_dict(data.get("answers")), _as_dict(data.get("asked"))
        if recorded is None or asked is None:
            return {}, {}
        good: dict[str, dict[str, Any]] = {}
        for key, value in recorded.items():
            entry = _as_dict(value)
            if entry is not None and isinstance(entry.get("q"), str) and "r" in entry:
                good[key] = entry
        pinned = {key: digest for key, digest in asked.items() if isinstance(digest, str)}
        return good, pinned

    def answer(self, step: Step, question: Any, kind: QuestionKind) -> Outcome:
        key = step.wire_key
        digest = kind.digest(question)
        record = self.recorded.get(key)
        if record is not None and record["q"] == digest:
            try:
                outcome = kind.parse(question, record["r"])
            except InvalidAnswer:
                pass
            else:
                self.persist[key] = record
                return outcome
        raw = self.answers.get(key)
        asked_before = self.asked.get(key) == digest
        if raw is not None and asked_before:
            bound = self.answer_timeout
            if bound is not None and key in self.asked_at:
                import time

                if time.time() - self.asked_at[key] > bound:
                    raise AnswerTimeout(bound, step.name, step.param)
            try:
                outcome = kind.parse(question, raw)
            except InvalidAnswer as exc:
                raise InvalidAnswer.at(step.name, step.wire_key, exc, step.param) from None
            self.persist[key] = {"q": digest, "r": raw}
            return outcome
        self.pending[key] = question
        self.asking[key] = digest
        if self.answer_timeout is not None and not (asked_before and key in self.asked_at):
            import time

            self.asked_at[key] = time.time()
        raise AnswerPending

    def state(self) -> str:
        """The state to carry into the next round."""
        import json

        state: dict[str, Any] = {"v": 1, "answers": self.persist, "asked": self.asking}
        if self.answer_timeout is not None:
            state["at"] = {key: self.asked_at[key] for key in self.asking if key in self.asked_at}
        return json.dumps(state, sort_keys=True, separators=(",", ":"))

    def raise_if_pending(self) -> None:
        if self.pending:
            raise InputRequired(dict(self.pending), self.state())


def open_rounds(
    answers: Mapping[str, Any] | None, state: str | None, answer_timeout: float | None = None
) -> Rounds:
    """A multi-round call's `Rounds`: the *answers* and *state* its caller carried."""
    rounds = Rounds()
    rounds.answers = dict(answers) if answers else _NOTHING
    if state:
        rounds.recorded, rounds.asked = Rounds.decode(state)
    else:  # a first round: nothing to decode, nothing answered
        rounds.recorded = rounds.asked = _NOTHING
    rounds.pending = {}
    rounds.asking = {}
    rounds.persist = {}
    # With an answer bound: when each question was first asked (wall clock, since the
    # next round may run in another process), carried in the state. Without, never read.
    rounds.answer_timeout = answer_timeout
    if answer_timeout is None:
        rounds.asked_at = _NO_TIMES
    else:
        rounds.asked_at = Rounds.decode_times(state) if rounds.asked else {}
    return rounds


_NO_TIMES: dict[str, float] = {}
"""`Rounds.asked_at` without an answer bound: read and written only with one."""


def _as_dict(value: object) -> dict[str, Any] | None:
    """*value* as a JSON object with string keys, or None."""
    if not isinstance(value, dict):
        return None
    items = cast("dict[object, Any]", value)
    if not all(isinstance(key, str) for key in items):
        return None
    return cast("dict[str, Any]", items)
