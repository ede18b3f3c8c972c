"""Whether a consumer's declared type can hold what its resolver declares it provides.

The check is deliberately one-sided: it only says "no" when both types are plain,
concrete classes (or unions of them) and no class on one side is related to any class
on the other, following the promotions type checkers allow (PEP 484's numeric tower:
a ``float`` may hold a ``bool`` or an ``IntEnum``). Parametrized pydantic models are
compared by their generic origin (``Page[Any]`` holds a ``Page[User]``). Anything it
cannot judge safely (``Any`` and classes derived from it, ``object``, type variables,
protocols, literals, ``NewType``, typed dicts, awaitables, unannotated) is unknown, and
unknown never fails: refusing valid code would be worse than not checking at all.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Annotated, Any, get_args, get_origin

from .annotations import NO_DEFAULT

__all__ = ("accepted_data", "classes_of", "may_hold")

# Implicit promotions the type system allows (PEP 484's numeric tower, bytes-likes).
_PROMOTIONS: dict[type, tuple[type, ...]] = {
    float: (int,),
    complex: (int, float),
    bytes: (bytearray, memoryview),
}


def classes_of(tp: Any) -> tuple[type, ...] | None:
    """The classes *tp* admits (generics by their origin), or None when unknown."""
    if tp is NO_DEFAULT or tp is Any or tp is object:
        return None
    if tp is None or tp is type(None):
        return (type(None),)
    origin = get_origin(tp)
    if origin is Annotated:
        return classes_of(get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        found: list[type] = []
        for arg in get_args(tp):
            sub = classes_of(arg)
            if sub is None:
                return None
            found.extend(sub)
        return tuple(found)
    cls: Any = tp if origin is None else origin
    if not isinstance(cls, type) or cls is object:
        return None
    if Any in cls.__mro__:  # `class Proxy(Any)`: type checkers let it stand for anything
        return None
    # A parametrized pydantic model (`Page[User]`) is a class of its own: compare by origin.
    metadata = getattr(cls, "__pydantic_generic_metadata__", None)
    if isinstance(metadata, dict):
        generic: Any = typing.cast(dict[str, Any], metadata).get("origin")
        if isinstance(generic, type):
            cls = generic
    if getattr(cls, "_is_protocol", False) or typing.is_typeddict(cls):
        return None
    try:
        if issubclass(cls, collections.abc.Awaitable):
            return None
    except TypeError:
        return None
    return (cls,)  # pyright: ignore[reportUnknownVariableType]


def _related(provided: type, wanted: type) -> bool:
    try:
        promoted = _PROMOTIONS.get(wanted, ())
        # `bool` and an `IntEnum` are ints too, so a float may hold them.
        if promoted and issubclass(provided, promoted):
            return True
        return issubclass(provided, wanted) or issubclass(wanted, provided)
    except TypeError:  # classes that refuse issubclass: unknown, so allowed
        return True


_HOLDS: dict[tuple[Any, Any], bool] = {}
"""Pairs known to be compatible. Only yes is remembered: a later ``ABC.register`` can
turn a no into a yes, never the reverse. Bounded by the program's annotations."""


def may_hold(wanted: Any, provided: Any) -> bool:
    """False only when *provided* certainly cannot be a *wanted*."""
    try:
        if (wanted, provided) in _HOLDS:
            return True
    except TypeError:  # an unhashable annotation: not remembered
        return _may_hold(wanted, provided)
    held = _may_hold(wanted, provided)
    if held and len(_HOLDS) < 8192:
        _HOLDS[wanted, provided] = True
    return held


def _may_hold(wanted: Any, provided: Any) -> bool:
    wanted_classes, provided_classes = classes_of(wanted), classes_of(provided)
    if wanted_classes is None or provided_classes is None:
        return True
    return any(_related(p, w) for p in provided_classes for w in wanted_classes)


def accepted_data(outcome: Any) -> Any:
    """The ``T`` an outcome annotation's accepted member carries, or `NO_DEFAULT`.

    Reads ``ElicitationResult[T]`` (a subscripted alias), ``Accepted[T]`` and unions of
    members, in any family (the SDK's ``AcceptedElicitation[T]`` too); a bare alias or a
    union without a parametrized member is unknown.
    """
    origin = get_origin(outcome)
    if origin is Annotated:
        return accepted_data(get_args(outcome)[0])
    if getattr(origin, "__value__", None) is not None:  # ElicitationResult[T]
        return next(iter(get_args(outcome)), NO_DEFAULT)
    members = get_args(outcome) if origin in (typing.Union, types.UnionType) else (outcome,)
    for member in members:
        # A parametrized pydantic model keeps its arguments in its generic metadata.
        metadata = getattr(member, "__pydantic_generic_metadata__", None)
        args: tuple[Any, ...] = (
            typing.cast(dict[str, Any], metadata).get("args", ())
            if isinstance(metadata, dict)
            else get_args(member)
        )
        if args:
            return args[0]
    return NO_DEFAULT
