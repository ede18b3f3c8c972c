"""What a function may ask and what a parameter wants of an answer: whether a resolver's
return annotation has a question arm (and the answer's type it names), and the outcome
family (`ElicitationResult`, the SDK's) a parameter asks for instead of the bare value.
One annotation at a time, for `signature`.
"""

from __future__ import annotations

import abc
import inspect
import types
import typing
from typing import Any, get_args, get_origin

from .._vocabulary.errors import InvalidSignature
from .._vocabulary.questions import OUTCOME_FAMILIES, QUESTION_KINDS, OutcomeFamily
from .annotations import NO_DEFAULT, describe_fn, type_name

__all__ = ("may_ask_of", "outcome_family", "plain_async", "remember_plain_async")


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


_PLAIN_ASYNC: dict[type, tuple[object, int]] = {}
"""Classes an ``async def`` was read to return as a plain value (no context manager, no
question), with `_plain_epoch` then: until an ABC registers a class (which may make one a
context manager) or a question kind is added, another ``async def`` returning one is read
the same without asking again. Bounded by the program's annotations."""


def _plain_epoch() -> tuple[object, int]:
    return abc.get_cache_token(), len(QUESTION_KINDS)


def _async_def(fn: Any) -> bool:
    """An ``async def`` itself, as `call_kind` reads it first."""
    return type(fn) is types.FunctionType and bool(fn.__code__.co_flags & inspect.CO_COROUTINE)


def plain_async(fn: Any, returns: Any) -> bool:
    """Whether *fn*, an ``async def`` returning *returns*, was read before to provide it
    plainly (`remember_plain_async`): an async function that may not ask."""
    known = _PLAIN_ASYNC.get(returns) if returns.__class__ is type else None
    return known is not None and known == _plain_epoch() and _async_def(fn)


def remember_plain_async(fn: Any, returns: Any) -> None:
    """*fn* was read to be an async function providing *returns*, a class, as it is."""
    if returns.__class__ is type and _async_def(fn):
        if len(_PLAIN_ASYNC) >= 4096:
            _PLAIN_ASYNC.clear()
        _PLAIN_ASYNC[returns] = _plain_epoch()
