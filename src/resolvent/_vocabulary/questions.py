"""Questions a resolver can return, how they are answered, and how consumers see outcomes.

The core knows one kind of question, `Elicit`. Integrations register more (the MCP
adapter adds the SDK's `Elicit`, `Sample` and `ListRoots`) with `register_question`, and
more outcome families (the SDK's `AcceptedElicitation` and friends) with
`register_outcome_family`. The compiler and executor only consult these tables.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast
from weakref import WeakKeyDictionary

from .errors import InvalidAnswer, NotAccepted
from .frozen import Frozen, put
from .markers import Elicit

# pydantic (and the outcome models) load on first use, not at `import resolvent`: a
# container that never asks a question never pays for them.
if TYPE_CHECKING:
    from pydantic import BaseModel

    from .outcomes import Accepted, Cancelled, Declined

    Outcome: TypeAlias = Accepted[Any] | Declined | Cancelled
else:
    Outcome = Any

Asker: TypeAlias = "Callable[[str, type[BaseModel]], Awaitable[Any]]"
"""``async def asker(message, schema) -> ElicitationResult``: answers `Elicit` questions."""


class QuestionKind(Frozen, compare=True):
    """How one type of question is pinned, parsed and answered.

    Attributes:
        digest: a short string that changes whenever the question as shown changes; an
            answer is only accepted for the exact question it was given to.
        parse: turns a JSON-shaped answer into an outcome, raising `InvalidAnswer`.
        ask: answers the question with a plain ``(message, schema)`` asker, or None if
            such an asker cannot answer this kind.
    """

    __slots__ = ("ask", "digest", "parse")
    digest: Callable[[Any], str]
    parse: Callable[[Any, Any], Outcome]
    ask: Callable[[Asker, Any], Awaitable[Outcome]] | None

    def __init__(
        self,
        digest: Callable[[Any], str],
        parse: Callable[[Any, Any], Outcome],
        ask: Callable[[Asker, Any], Awaitable[Outcome]] | None,
    ) -> None:
        put(self, "digest", digest)
        put(self, "parse", parse)
        put(self, "ask", ask)


QUESTION_KINDS: dict[type, QuestionKind] = {}


def register_question(cls: type, kind: QuestionKind) -> None:
    """Teach the executor that a resolver returning a *cls* instance asks a question."""
    QUESTION_KINDS[cls] = kind


class OutcomeFamily(Frozen, compare=True):
    """A set of outcome classes a consumer may annotate, and how to build them."""

    __slots__ = ("convert", "members")
    members: tuple[type, ...]
    convert: Callable[[Outcome], Any]

    def __init__(self, members: tuple[type, ...], convert: Callable[[Outcome], Any]) -> None:
        put(self, "members", members)
        put(self, "convert", convert)


OUTCOME_FAMILIES: list[OutcomeFamily] = []
"""Families register when their module loads (resolvent's own through `load_outcomes`)."""


def register_outcome_family(members: tuple[type, ...], convert: Callable[[Outcome], Any]) -> None:
    """Let consumers annotate *members* (a family of outcome classes) and receive them."""
    OUTCOME_FAMILIES.append(OutcomeFamily(members, convert))


def load_outcomes() -> None:
    """Import resolvent's own outcome models (`Accepted`, ...; pydantic, so on first use
    only, not at `import resolvent`) and register them as a family, once."""
    from .outcomes import OUTCOME_TYPES

    if not any(family.members is OUTCOME_TYPES for family in OUTCOME_FAMILIES):
        register_outcome_family(OUTCOME_TYPES, _same)


def _same(outcome: Outcome) -> Any:
    return outcome


class Answered:
    """The value slot of a resolver that asked a question: holds the outcome."""

    __slots__ = ("outcome",)

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def unwrap(self, parameter: str, consumer: str) -> Any:
        outcome = self.outcome
        if outcome.action == "accept":
            return outcome.data
        raise NotAccepted(parameter, consumer, outcome.action)


def as_outcome(value: Any) -> Outcome:
    """The outcome a union consumer sees: a plain value counts as accepted."""
    from .outcomes import accepted

    if value.__class__ is Answered:
        outcome: Outcome = value.outcome
        return outcome
    return accepted(value)


def digest_json(payload: Any) -> str:
    """A short stable digest of a JSON-shaped value (ASCII-canonical)."""
    import hashlib  # only elicitation digests; not paid by `import resolvent`
    import json

    text = json.dumps(payload, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def parse_elicit_answer(schema: type[BaseModel], raw: Any, where: str) -> Outcome:
    """Parse an answer shaped like MCP's ``ElicitResult`` (``action`` plus ``content``)."""
    from .outcomes import Cancelled, Declined, accepted

    if not isinstance(raw, Mapping):
        raise InvalidAnswer(f"{where} received an answer that is not an elicitation result")
    raw = cast("Mapping[str, Any]", raw)
    action = raw.get("action")
    if action == "decline":
        return Declined()
    if action == "cancel":
        return Cancelled()
    if action != "accept":
        raise InvalidAnswer(f"{where} received an answer with an unknown action")
    content = raw.get("content")
    if content is None:
        raise InvalidAnswer(f"{where} received an accepted answer with no content")
    return accepted(validate_content(schema, content, where))


def validate_content(schema: type[BaseModel], content: Any, where: str) -> BaseModel:
    """Validate answered content against *schema* without echoing the content back."""
    from pydantic import ValidationError

    if isinstance(content, schema):
        return content
    try:
        return schema.model_validate(content)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in err["loc"]) or "<root>" for err in exc.errors()})
        raise InvalidAnswer(
            f"{where} received an answer that does not match {schema.__name__} "
            f"(fields: {', '.join(fields)})"
        ) from None


def normalize_outcome(outcome: Any, schema: type[BaseModel], where: str) -> Outcome:
    """Accept any outcome-shaped object from an asker and validate accepted data."""
    from .outcomes import Cancelled, Declined, accepted

    action = getattr(outcome, "action", None)
    if action == "decline":
        return Declined()
    if action == "cancel":
        return Cancelled()
    if action == "accept":
        return accepted(validate_content(schema, outcome.data, where))
    raise InvalidAnswer(f"{where}: the asker returned {type(outcome).__name__}, not an outcome")


def _elicit_digest(question: Elicit[Any]) -> str:
    schema = question.schema
    shown = _SCHEMAS.get(schema)
    if shown is None:
        shown = _SCHEMAS[schema] = schema.model_json_schema()
    return digest_json({"message": question.message, "schema": shown})


_SCHEMAS: WeakKeyDictionary[type[BaseModel], dict[str, Any]] = WeakKeyDictionary()
"""Each question schema's JSON schema, made once per class: pydantic builds it anew on
every call (about 870,000 instructions for a one-field model), and every round of a
multi-round call digests each question it meets. Only digests read it; a class that is
gone takes its entry with it."""


async def _elicit_ask(asker: Asker, question: Elicit[Any]) -> Outcome:
    outcome = await asker(question.message, question.schema)
    return normalize_outcome(outcome, question.schema, "the asker")


register_question(
    Elicit,
    QuestionKind(
        digest=_elicit_digest,
        parse=lambda question, raw: parse_elicit_answer(question.schema, raw, "the question"),
        ask=_elicit_ask,
    ),
)
