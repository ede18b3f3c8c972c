"""A parameter as written (`Param`), and the readings of an ordinary function that take
one pass: what `signature.read_function` tries first, before the reading that checks each
parameter and says what is wrong. Parameters written alike are one shared `Param`.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from .._vocabulary.frozen import Frozen, put
from .._vocabulary.markers import ReadingEpoch, Resolve
from .._vocabulary.questions import OUTCOME_FAMILIES, OutcomeFamily
from .annotations import ANNOTATED, NO_DEFAULT, Unresolved, outcome_family

__all__ = (
    "RESOLVE_MARKERS",
    "OutcomeParam",
    "Param",
    "plain_annotations",
    "plain_params",
    "plain_reading",
    "register_resolve_marker",
)

RESOLVE_MARKERS: dict[type, Callable[[Any], Resolve]] = {Resolve: lambda marker: marker}
"""Marker classes honoured in ``Annotated`` metadata, with a converter to `Resolve`."""


def register_resolve_marker(cls: type, convert: Callable[[Any], Resolve]) -> None:
    """Honour another library's ``Resolve``-like marker (the MCP SDK's, for one)."""
    RESOLVE_MARKERS[cls] = convert
    ReadingEpoch.move()


class Param(Frozen, compare=True):
    """One parameter as written.

    Attributes:
        name: the parameter's name.
        bare: the annotation without ``Annotated`` metadata (``inspect.Parameter.empty``
            when unannotated).
        marker: the `Resolve` marker, if the parameter has one.
        outcome: for a marked parameter that wants the whole outcome, its family.
        default: the default value, or ``inspect.Parameter.empty``.
    """

    __slots__ = ("bare", "default", "marker", "name")
    name: str
    bare: Any
    marker: Resolve | None
    default: Any

    def __init__(self, name: str, bare: Any, marker: Resolve | None, default: Any) -> None:
        put(self, "name", name)
        put(self, "bare", bare)
        put(self, "marker", marker)
        put(self, "default", default)

    if typing.TYPE_CHECKING:  # a field of `OutcomeParam` only (see below)

        @property
        def outcome(self) -> OutcomeFamily | None: ...


# Few parameters want a whole outcome: the others keep no field for it. Their *outcome*
# is the class's None; one that wants it is an `OutcomeParam`, whose slot shadows it.
type.__setattr__(Param, "outcome", None)


class OutcomeParam(Param):
    """A marked parameter that wants the whole outcome: its family beside the fields."""

    __slots__ = ("outcome",)  # pyright: ignore[reportIncompatibleMethodOverride]

    def __init__(
        self, name: str, bare: Any, marker: Resolve, default: Any, outcome: OutcomeFamily
    ) -> None:
        super().__init__(name, bare, marker, default)
        put(self, "outcome", outcome)


def plain_annotations(fn: Any) -> dict[str, Any] | None:
    """*fn*'s ``__annotations__``, read as they are (not copied), where the reading's check
    of misplaced markers would find nothing: no annotation is a marker class (most handlers
    and resolvers). None for anything else, which the general path reads."""
    if type(fn) is not types.FunctionType:
        return None
    hints: dict[str, Any] = fn.__annotations__  # read, never changed
    for value in hints.values():
        if isinstance(value, type):
            if value in RESOLVE_MARKERS:
                return None
        elif not (isinstance(value, ANNOTATED) and isinstance(value.__origin__, type)):
            return None
    return hints


def plain_params(fn: Any, hints: dict[str, Any]) -> list[Param] | None:
    """What `_read_params` gives, in one pass over the code object, when every parameter
    is ordinary: a class, or ``Annotated[C, Resolve(...)]`` holding that one marker of
    something callable; no default, no ``*args``, not positional-only (``**kwargs`` is
    skipped, given nothing). None for anything else: `_read_params` says what is wrong."""
    code = _ordinary_code(fn)
    if code is None:
        return None
    _fresh()
    params: list[Param] = []
    for p_name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
        annotation = hints.get(p_name, NO_DEFAULT)
        if annotation.__class__ is type:  # a class (or none: `NO_DEFAULT` is one too)
            key: tuple[Any, ...] = (p_name, id(annotation))
            param = _PARAMS.get(key)
            if param is None:
                param = _PARAMS[key] = Param(p_name, annotation, None, NO_DEFAULT)
            params.append(param)
            continue
        if not isinstance(annotation, ANNOTATED):
            return None
        metadata = annotation.__metadata__
        marker = metadata[0]
        if len(metadata) != 1 or marker.__class__ is not Resolve:
            return None
        target = marker.fn
        if target is not None and (isinstance(target, Unresolved) or not callable(target)):
            return None
        bare = annotation.__origin__
        key = (p_name, id(bare), id(target))
        param = _PARAMS.get(key)
        if param is None:
            family = outcome_family(bare)
            param = _PARAMS[key] = (
                Param(p_name, bare, marker, NO_DEFAULT)
                if family is None
                else OutcomeParam(p_name, bare, marker, NO_DEFAULT, family)
            )
        params.append(param)
    return params


_PARAMS: dict[tuple[Any, ...], Param] = {}
"""Ordinary parameters read before, by name and the identities of their class and resolver
(held by each, so unique): every ``user: Annotated[User, Resolve(current_user)]`` is one
value, whose marker may be another `Resolve` of that resolver (a marker is its resolver).
Emptied when a function is read with 4,096 or more (one function's may go past it), and
when a marker class or an outcome family is registered (a parameter may be read otherwise)."""
_seen: tuple[int, int] = (0, 0)


def _fresh() -> None:
    """Empty `_PARAMS` if an outcome family or a marker class was registered since."""
    global _seen
    seen = (len(OUTCOME_FAMILIES), ReadingEpoch.now)
    if _seen != seen or len(_PARAMS) >= 4096:
        _PARAMS.clear()
        _seen = seen


def _ordinary_code(fn: Any) -> types.CodeType | None:
    """*fn*'s code object, if it is a plain function read from it alone (not a wrapper,
    no signature of its own) with no default, no ``*args``, nothing positional-only."""
    if (
        type(fn) is not types.FunctionType
        or fn.__defaults__
        or fn.__kwdefaults__
        or getattr(fn, "__wrapped__", _ABSENT) is not _ABSENT
        or getattr(fn, "__signature__", _ABSENT) is not _ABSENT
    ):
        return None
    code = fn.__code__
    if code.co_posonlyargcount or code.co_flags & inspect.CO_VARARGS:
        return None
    return code


def plain_reading(fn: Any) -> tuple[dict[str, Any], list[Param]] | None:
    """`plain_annotations` and `plain_params` in one pass: *fn*'s annotations and
    parameters when both would give them, else None (the reading tries them in turn)."""
    code = _ordinary_code(fn)
    if code is None:
        return None
    hints: dict[str, Any] = fn.__annotations__  # read, never changed
    returns = hints.get("return", NO_DEFAULT)
    count = 0  # the annotations read, to tell there is no other (of **kwargs, say)
    if returns is not NO_DEFAULT:
        count = 1
        if isinstance(returns, type):
            if returns in RESOLVE_MARKERS:
                return None
        elif not (isinstance(returns, ANNOTATED) and isinstance(returns.__origin__, type)):
            return None
    _fresh()
    params: list[Param] = []
    for p_name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
        annotation = hints.get(p_name, NO_DEFAULT)
        if annotation.__class__ is ANNOTATED:
            metadata = annotation.__metadata__
            marker = metadata[0]
            bare = annotation.__origin__
            if len(metadata) != 1 or marker.__class__ is not Resolve or bare.__class__ is not type:
                return None
            param = _PARAMS.get((p_name, id(bare), id(marker.fn)))
            if param is None:
                target = marker.fn  # held by the parameter made: its id stays its own
                if target is not None and (isinstance(target, Unresolved) or not callable(target)):
                    return None
                family = outcome_family(bare)
                param = _PARAMS[p_name, id(bare), id(target)] = (
                    Param(p_name, bare, marker, NO_DEFAULT)
                    if family is None
                    else OutcomeParam(p_name, bare, marker, NO_DEFAULT, family)
                )
            count += 1
        elif annotation.__class__ is type:  # a class (or none: `NO_DEFAULT` is one too)
            param = _PARAMS.get((p_name, id(annotation)))
            if param is None:
                if annotation in RESOLVE_MARKERS:
                    return None
                param = _PARAMS[p_name, id(annotation)] = Param(
                    p_name, annotation, None, NO_DEFAULT
                )
            if annotation is not NO_DEFAULT:
                count += 1
        else:
            return None
        params.append(param)
    return (hints, params) if count == len(hints) else None


_ABSENT: Any = object()
