"""What a function may ask and what a parameter wants of an answer: whether a resolver's
return annotation has a question arm (and the answer's type it names), and the outcome
family (`ElicitationResult`, the SDK's) a parameter asks for instead of the bare value.
One annotation at a time, for `signature`.
"""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin

from .._vocabulary.errors import InvalidSignature
from .._vocabulary.questions import OUTCOME_FAMILIES, QUESTION_KINDS, OutcomeFamily
from .annotations import NO_DEFAULT, describe_fn, type_name

__all__ = ("may_ask_of", "outcome_family")


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def _is_question_type(tp: Any) -> bool:
    cls = get_origin(tp) or tp
    return isinstance(cls, type) and any(issubclass(cls, q) for q in QUESTION_KINDS)


def may_ask_of(fn: Any, provides: Any) -> tuple[bool, Any, Any]:
    """Whether a resolver may return a question, the type it provides otherwise, and the
    type of an accepted answer (`NO_DEFAULT` when not declared)."""
    if provides is NO_DEFAULT or provides is Any or provides is object:
        return True, provides, NO_DEFAULT
    if isinstance(provides, typing.TypeVar):
        return True, provides, NO_DEFAULT
    if isinstance(provides, type) and not _is_question_type(provides):
        return False, provides, NO_DEFAULT  # a class (not a union) that is no question
    members = _union_members(provides)
    arms = [m for m in members if _is_question_type(m)]
    if len(arms) > 1:
        raise InvalidSignature(
            f"{describe_fn(fn)} returns {type_name(provides)}, "
            f"which has {len(arms)} question arms.\n"
            "  a resolver asks at most one question: split it into one resolver per question"
        )
    if not arms:
        return False, provides, NO_DEFAULT
    question_args = get_args(arms[0])
    asks = question_args[0] if question_args else NO_DEFAULT
    rest = [m for m in members if not _is_question_type(m)]
    if len(rest) == 1:
        return True, rest[0], asks
    if not rest:
        return True, asks, asks
    return True, typing.Union[tuple(rest)], asks  # noqa: UP007


def outcome_family(type_arg: Any) -> OutcomeFamily | None:
    """The outcome family a consumer asks for, or None when it wants the bare value."""
    # Asked for every marked parameter of every function read, mostly of a few types:
    # kept per type, and read again once another family is registered.
    try:
        kept = _families.get(type_arg)
    except TypeError:  # an unhashable annotation
        return _outcome_family(type_arg)
    count = len(OUTCOME_FAMILIES)
    if kept is not None and kept[0] == count:
        return kept[1]
    family = _outcome_family(type_arg)
    if len(_families) >= _MAX_FAMILIES:
        _families.clear()
    _families[type_arg] = (count, family)
    return family


_families: dict[Any, tuple[int, OutcomeFamily | None]] = {}
_MAX_FAMILIES = 4096


def _outcome_family(type_arg: Any) -> OutcomeFamily | None:
    value = getattr(type_arg, "__value__", None) or getattr(get_origin(type_arg), "__value__", None)
    if value is not None:  # PEP 695 aliases, such as the SDK's ElicitationResult
        type_arg = value
    for member in _union_members(type_arg):
        cls = get_origin(member) or member
        if not isinstance(cls, type):
            continue
        for family in OUTCOME_FAMILIES:
            if issubclass(cls, family.members):
                return family
    return None
