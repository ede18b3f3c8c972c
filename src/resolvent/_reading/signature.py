"""Reading one function: its parameters, the markers on them, and what it provides.

Everything here looks at a single function. Decisions that need the whole graph (which
provider a type means, scopes, cycles) belong to the compiler.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin

from .._vocabulary.errors import InvalidSignature
from .._vocabulary.frozen import Frozen, making
from .._vocabulary.markers import Resolve
from .annotations import (
    ANNOTATED,
    NO_DEFAULT,
    Unresolved,
    describe_fn,
    lenient_hints,
    may_ask_of,
    outcome_family,
    plain_async,
    remember_plain_async,
    type_name,
    unresolved_error,
)
from .kinds import Kind, kind_and_provides, refuse_bare_wrapper, refuse_model, under_partials
from .params import (
    RESOLVE_MARKERS,
    OutcomeParam,
    Param,
    plain_annotations,
    plain_params,
    plain_reading,
)

__all__ = ("FunctionInfo", "Param", "read_function")


class FunctionInfo(Frozen, compare=True):
    """What one function shows: parameters, kind, provided type, whether it may ask."""

    __slots__ = (
        "asks",
        "awaits",
        "fn",
        "kind",
        "may_ask",
        "name",
        "params",
        "provides",
        "unresolved_return",
    )  # fmt: skip
    fn: Callable[..., Any]
    name: str
    params: tuple[Param, ...]
    kind: Kind
    provides: Any
    may_ask: bool
    awaits: bool
    """Calling it returns an awaitable: an async function, or an async factory of a
    context manager (awaited first, then entered)."""
    asks: Any
    """The answer's type when its return annotation has a question arm that names one
    (``S`` in ``Elicit[S]``); `NO_DEFAULT` otherwise."""
    unresolved_return: str | None
    """A name its return annotation uses that does not exist at run time (the return
    type is then unknown): an error once the function is used as a resolver (`needs_return`)."""

    def needs_return(self) -> None:
        """Raise if the return annotation could not be read: a resolver's is needed."""
        if self.unresolved_return is not None:
            raise unresolved_error(
                self.fn, "return", self.unresolved_return, "a resolver's return type"
            )


def _reading(
    fn: Callable[..., Any],
    name: str,
    params: tuple[Param, ...],
    kind: Kind,
    provides: Any,
    may_ask: bool,
    awaits: bool = False,
    asks: Any = NO_DEFAULT,
    unresolved_return: str | None = None,
) -> FunctionInfo:
    """A `FunctionInfo`, made by plain assignment in its `making` twin (a class called
    costs about three times a plain call), then one."""
    self = _new(_Reading)
    self.fn = fn
    self.name = name
    self.params = params
    self.kind = kind
    self.provides = provides
    self.may_ask = may_ask
    self.awaits = awaits
    self.asks = asks
    self.unresolved_return = unresolved_return
    self.__class__ = FunctionInfo
    return self


_Reading = making(FunctionInfo)
_new = object.__new__


def _is_marker_class(obj: Any) -> bool:
    return isinstance(obj, type) and obj in RESOLVE_MARKERS


def _is_marker(obj: Any) -> bool:
    return type(obj) in RESOLVE_MARKERS


def _written_type(annotation: Any) -> str:
    return "T" if annotation is NO_DEFAULT else type_name(annotation)


def _written_marker(marker: Any) -> str:
    fn = getattr(marker, "fn", None)
    return "Resolve(fn)" if fn is None else f"Resolve({getattr(fn, '__name__', 'fn')})"


def _misplaced_marker(fn: Callable[..., Any], name: str) -> None:
    """Refuse markers written where they are never read: ``x: Resolve(fn)``, ``x: Resolve``.

    Checked on the raw annotations, before they are evaluated (a string annotation
    ``"Resolve(fn)"`` would otherwise fail with an unrelated message).
    """
    target: Any = fn.__init__ if inspect.isclass(fn) else under_partials(fn)
    raw = getattr(target, "__annotations__", None)
    if not isinstance(raw, dict):
        return
    for param, annotation in typing.cast(dict[str, Any], raw).items():
        if param == "return" or isinstance(annotation, ANNOTATED):
            continue  # an Annotated alias is neither a marker, nor its class, nor text
        written = isinstance(annotation, str) and _written_marker_pattern().fullmatch(annotation)
        if written or _is_marker(annotation) or _is_marker_class(annotation):
            raise InvalidSignature(
                f"parameter {param!r} of {name} is annotated with the marker itself "
                f"({annotation if isinstance(annotation, str) else repr(annotation)}); "
                "a marker is read only inside Annotated.\n"
                f"  fix: `{param}: Annotated[T, Resolve(fn)]`, with T the type it receives"
            )


_pattern: tuple[tuple[type, ...], re.Pattern[str]] | None = None


def _written_marker_pattern() -> re.Pattern[str]:
    """A string annotation that is a marker itself (``"Resolve(fn)"``), made once per set
    of marker classes."""
    global _pattern
    classes = tuple(RESOLVE_MARKERS)
    if _pattern is None or _pattern[0] != classes:
        names = "|".join(re.escape(cls.__name__) for cls in classes)
        _pattern = (classes, re.compile(rf"\s*(?:\w+\.)*(?:{names})\s*(?:\(.*\))?\s*", re.DOTALL))
    return _pattern[1]


def _buried_marker(annotation: Any) -> bool:
    """True when a `Resolve` marker sits anywhere below the top level of *annotation*."""
    stack = list(get_args(annotation))
    while stack:
        node = stack.pop()
        if get_origin(node) is Annotated and any(
            type(m) in RESOLVE_MARKERS for m in node.__metadata__
        ):
            return True
        stack.extend(get_args(node))
    return False


_ParameterKind = type(inspect.Parameter.POSITIONAL_ONLY)
_POSITIONAL_ONLY = inspect.Parameter.POSITIONAL_ONLY
_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD
_ABSENT: Any = object()


def _parameters(fn: Callable[..., Any], name: str) -> list[tuple[str, Any, Any]]:
    """*fn*'s parameters as ``(name, kind, default)``, in order.

    A plain function (no ``__wrapped__``, no ``__signature__``) is read from its code
    object, as `inspect.signature` reads it, at a fraction of the cost; anything else
    through `inspect.signature`.
    """
    # Looked up, not read from ``fn.__dict__``: reading it makes a function that has no
    # attributes of its own an empty dict, which it then keeps (64 bytes a resolver).
    if (
        type(fn) is types.FunctionType
        and getattr(fn, "__wrapped__", _ABSENT) is _ABSENT
        and getattr(fn, "__signature__", _ABSENT) is _ABSENT
    ):
        return _code_parameters(fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise InvalidSignature(f"cannot read the signature of {name}: {exc}") from exc
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def _code_parameters(fn: types.FunctionType) -> list[tuple[str, Any, Any]]:
    code = fn.__code__
    names, flags = code.co_varnames, code.co_flags
    positional, keyword_only = code.co_argcount, code.co_kwonlyargcount
    posonly = code.co_posonlyargcount
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    first_default = positional - len(defaults)
    params: list[tuple[str, Any, Any]] = [
        (
            names[i],
            _POSITIONAL_ONLY if i < posonly else _POSITIONAL_OR_KEYWORD,
            defaults[i - first_default] if i >= first_default else NO_DEFAULT,
        )
        for i in range(positional)
    ]
    end = positional + keyword_only
    if flags & inspect.CO_VARARGS:
        params.append((names[end], _VAR_POSITIONAL, NO_DEFAULT))
    params.extend((n, _KEYWORD_ONLY, kwdefaults.get(n, NO_DEFAULT)) for n in names[positional:end])
    if flags & inspect.CO_VARKEYWORDS:
        params.append(
            (names[end + 1 if flags & inspect.CO_VARARGS else end], _VAR_KEYWORD, NO_DEFAULT)
        )
    return params


def read_function(fn: Callable[..., Any]) -> FunctionInfo:
    """Read *fn* once: classify what can be classified without the graph.

    Raises:
        InvalidSignature: a marker hidden in a union, two markers on one parameter, more
            than one question arm, positional-only or ``*args`` parameters.
    """
    if not callable(fn):
        raise InvalidSignature(
            f"{fn!r} is not callable: resolvent runs, registers and resolves functions.\n"
            "  fix: pass the function (or class) itself, not the result of calling it"
        )
    name = describe_fn(fn)
    plain = plain_reading(fn)
    unresolved: dict[str, str] = {}  # (for a plain reading: nothing to evaluate)
    params: list[Param] | None
    if plain is not None:  # a function (no class), wrapping nothing
        hints, params = plain
        returns = hints.get("return", NO_DEFAULT)
        if returns is NO_DEFAULT or returns is object or returns.__class__ is not type:
            refuse_bare_wrapper(fn, returns)  # (it passes any other class as it is)
    else:
        params = None
        found = plain_annotations(fn)  # no marker misplaced, not a class
        if found is None:
            _misplaced_marker(fn, name)
            refuse_model(fn, name)
            found, unresolved = lenient_hints(fn)
        hints = found
        returns = fn if inspect.isclass(fn) else hints.get("return", NO_DEFAULT)
        if "return" in unresolved:
            returns = NO_DEFAULT  # unknown: needed only if fn is used as a resolver
        refuse_bare_wrapper(fn, returns)
        if not unresolved:
            params = plain_params(fn, hints)
        if params is None:
            params = _read_params(fn, name, hints, unresolved)
    if plain_async(fn, returns):  # as read before: no context manager, no question
        return _reading(fn, name, tuple(params), _ASYNC, returns, False, True)
    kind, provides, awaits = kind_and_provides(fn, returns)
    may_ask, provides, asks = (
        may_ask_of(fn, provides) if not kind.is_resource else (False, provides, NO_DEFAULT)
    )
    if kind is _ASYNC and provides is returns and not may_ask and awaits:
        remember_plain_async(fn, returns)
    return _reading(
        fn,
        name,
        tuple(params),
        kind,
        provides,
        may_ask,
        awaits,
        asks,
        unresolved.get("return"),
    )


_ASYNC = Kind.ASYNC


def _read_params(
    fn: Callable[..., Any], name: str, hints: dict[str, Any], unresolved: dict[str, str]
) -> list[Param]:
    """*fn*'s parameters, each read and checked (markers, kinds, defaults)."""
    params: list[Param] = []
    for p_name, p_kind, p_default in _parameters(fn, name):
        annotation = hints.get(p_name, NO_DEFAULT)
        if p_kind is _VAR_KEYWORD:
            continue  # given nothing: resolvent passes only the parameters it reads
        if p_default is not NO_DEFAULT and (_is_marker(p_default) or _is_marker_class(p_default)):
            raise InvalidSignature(
                f"parameter {p_name!r} of {name} has the marker {p_default!r} as its default; "
                "resolvent reads markers only from the annotation, so the marker object "
                "itself would be passed.\n"
                f"  fix: `{p_name}: Annotated[{_written_type(annotation)}, "
                f"{_written_marker(p_default)}]`, with no default"
            )
        # The markers in its Annotated metadata (one is honoured), and whether a marker
        # class is there instead, in one pass.
        annotated = isinstance(annotation, ANNOTATED)
        found: list[Any] = []
        marker_class = False
        if annotated:
            for meta in annotation.__metadata__:
                if type(meta) in RESOLVE_MARKERS:
                    found.append(meta)
                elif isinstance(meta, type) and meta in RESOLVE_MARKERS:
                    marker_class = True
        if p_kind is _POSITIONAL_ONLY and p_default is not NO_DEFAULT and len(found) != 1:
            continue  # never passed: it keeps its default
        if p_kind is _VAR_POSITIONAL or p_kind is _POSITIONAL_ONLY:
            raise InvalidSignature(
                f"parameter {p_name!r} of {name} is {p_kind.description}; resolvent passes "
                "every value by keyword.\n  fix: make it a regular or keyword-only parameter"
            )
        if len(found) > 1:
            raise InvalidSignature(
                f"parameter {p_name!r} of {name} has more than one Resolve marker; keep one"
            )
        if not found:
            marker = None
        else:
            marker = found[0]
            if marker.__class__ is not Resolve:  # another library's: converted
                marker = RESOLVE_MARKERS[type(marker)](marker)
        if marker is None and _buried_marker(annotation):
            raise InvalidSignature(
                f"parameter {p_name!r} of {name} hides Resolve(...) "
                f"inside {type_name(annotation)}.\n"
                "  a marker inside a union or Optional is never honoured.\n"
                f"  fix: annotate it directly, `{p_name}: Annotated[T, Resolve(fn)]`; to receive a "
                "declined question, use `Annotated[ElicitationResult[T], Resolve(fn)]`"
            )
        if marker_class:
            raise InvalidSignature(
                f"parameter {p_name!r} of {name} has the class Resolve in Annotated, not a "
                "marker; without parentheses it would be read as a call argument.\n"
                f"  fix: `{p_name}: Annotated[T, Resolve(fn)]`, or `Resolve()` to find the "
                "provider by T"
            )
        bare = annotation.__origin__ if annotated else annotation
        if marker is None:
            params.append(Param(p_name, bare, None, p_default))
            continue
        target = marker.fn
        if isinstance(target, Unresolved):
            raise unresolved_error(fn, p_name, target.name, "the resolver it names")
        if target is None and p_name in unresolved:
            raise unresolved_error(
                fn, p_name, unresolved[p_name], "the type to find the provider by, Resolve()"
            )
        if target is not None and not callable(target):
            raise InvalidSignature(
                f"parameter {p_name!r} of {name} has Resolve({target!r}), and "
                f"{target!r} (a {type(target).__qualname__}) is not callable.\n"
                "  fix: pass the resolver itself, `Resolve(fn)`, not the result of calling "
                "it, `Resolve(fn())`"
            )
        family = outcome_family(bare)
        params.append(
            Param(p_name, bare, marker, p_default)
            if family is None
            else OutcomeParam(p_name, bare, marker, p_default, family)
        )
    return params
