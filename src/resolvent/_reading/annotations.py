"""Reading a function's annotations: one by one when need be, naming what does not resolve;
and what an annotation says of asking: whether a resolver's return annotation has a question
arm (and the answer's type it names), the outcome family (`ElicitationResult`, the SDK's) a
parameter asks for instead of the bare value, and the classes an ``async def`` was read to
return plainly. One annotation at a time, for `_reading.signature`.

Owns how functions and types are named in messages. Never decides what a function is
(that is `_reading.kinds`) nor reads parameters or markers (that is `_reading.signature`).
"""

from __future__ import annotations

import abc
import builtins
import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, get_args, get_origin

from .._vocabulary.errors import InvalidSignature
from .._vocabulary.questions import OUTCOME_FAMILIES, QUESTION_KINDS, OutcomeFamily

__all__ = (
    "NO_DEFAULT",
    "argument_converter",
    "lenient_hints",
    "may_ask_of",
    "outcome_family",
    "plain_async",
    "remember_plain_async",
    "type_name",
)

NO_DEFAULT: Any = inspect.Parameter.empty
"""An annotation or a default that was not written."""


def describe_fn(fn: Any) -> str:
    """A readable, qualified name for messages: ``module.Class.method``."""
    if isinstance(fn, functools.partial):
        return f"partial({describe_fn(fn.func)})"
    target = getattr(fn, "__func__", fn)
    qualname = getattr(target, "__qualname__", None) or type(fn).__qualname__
    module = getattr(target, "__module__", None) or type(fn).__module__
    return qualname if module in (None, "__main__", "builtins") else f"{module}.{qualname}"


def with_article(noun: str) -> str:
    """*noun* after "a" or "an", for messages: ``with_article("int")`` is ``"an int"``."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def type_name(tp: Any) -> str:
    """A short readable name for a type in messages."""
    if tp is NO_DEFAULT:
        return "<unannotated>"
    if tp is type(None):
        return "None"
    origin, args = get_origin(tp), get_args(tp)
    if origin is None:
        return tp.__qualname__ if isinstance(tp, type) else repr(tp).replace("typing.", "")
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is Annotated:
        metadata = ", ".join(repr(m) for m in tp.__metadata__)
        return f"Annotated[{type_name(tp.__origin__)}, {metadata}]"
    alias = getattr(origin, "__value__", None) is not None  # ElicitationResult[T]
    if (isinstance(origin, type) or alias) and args and not any(isinstance(a, list) for a in args):
        name = getattr(origin, "__qualname__", None) or origin.__name__
        return f"{name}[{', '.join(type_name(arg) for arg in args)}]"
    return repr(tp).replace("typing.", "")


def wrapped_of(fn: Any) -> Any:
    """The callable *fn* wraps (``functools.wraps`` sets ``__wrapped__``), or None."""
    try:
        inner = getattr(fn, "__wrapped__", None)
    except Exception:  # an object whose attribute access fails: it wraps nothing we can read
        return None
    return inner if callable(inner) and inner is not fn else None


def _partial_target(fn: Any) -> Any:
    """Whose annotations the partial *fn* shows: its function's, or for a callable object
    (``partial(Client(), ...)``) its class's ``__call__``'s."""
    inner: Any = fn.func
    if inspect.isroutine(inner) or inspect.isclass(inner) or wrapped_of(inner) is not None:
        return inner
    return type(inner).__call__


def strict_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """*fn*'s annotations read all at once (a class's ``__init__``'s, a callable object's
    ``__call__``'s); one that does not resolve is an `InvalidSignature`."""
    if inspect.isclass(fn):
        target: Any = fn.__init__
    elif isinstance(fn, functools.partial):
        target = _partial_target(fn)
    elif inspect.isroutine(fn) or wrapped_of(fn) is not None:  # or update_wrapper's copy
        target = fn
    else:
        target = type(fn).__call__
    plain = plain_hints(target)
    if plain is not None:
        return plain
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:
        hints = _class_hints(fn, target) if isinstance(fn, type) else None
        if hints is not None:
            return hints
        raise InvalidSignature(
            f"cannot read the annotations of {describe_fn(fn)}: {exc}.\n"
            "  fix: make every name used in its annotations importable at module level "
            "(not only under TYPE_CHECKING)"
        ) from exc


ANNOTATED: Any = type(Annotated[int, 0])
"""What ``get_origin`` finds to be `Annotated` (read once, not per parameter)."""


def plain_hints(target: Any) -> dict[str, Any] | None:
    """What ``typing.get_type_hints`` gives for a plain function whose annotations need
    no evaluating (each a class, or ``Annotated`` over a class: it would return them as
    they are), without its walk; None for anything else."""
    if type(target) is not types.FunctionType:
        return None
    hints: dict[str, Any] = target.__annotations__
    for value in hints.values():
        if not (
            isinstance(value, type)
            or (isinstance(value, ANNOTATED) and isinstance(value.__origin__, type))
        ):
            return None
    return dict(hints)


class Unresolved:
    """A name in a string annotation that does not exist at run time (one imported only
    under ``TYPE_CHECKING``, say): it stands in for the type, which stays unknown, so the
    rest of the annotation (an ``Annotated[..., Resolve(fn)]`` marker) can still be read.
    Where resolvent needs the type itself, it names *name* in its error (`unresolved_error`).
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Unresolved:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Unresolved(f"{self.name}.{attr}")

    def __getitem__(self, item: object) -> Unresolved:
        return self

    def __or__(self, other: object) -> Any:
        return typing.Union[self, other]  # noqa: UP007 - members may not be classes

    def __ror__(self, other: object) -> Any:
        return typing.Union[other, self]  # noqa: UP007

    def __call__(self, *args: object, **kwargs: object) -> Any:  # typing wants a callable
        raise TypeError(f"{self.name} is not defined at run time")

    def __repr__(self) -> str:
        return self.name


class _Lenient(dict[str, Any]):
    """Local names for evaluating an annotation: a name found nowhere becomes `Unresolved`."""

    def __init__(self, globalns: Mapping[str, Any], localns: Mapping[str, Any]) -> None:
        super().__init__(localns)
        self.globalns = globalns
        self.missing: list[str] = []

    def __missing__(self, name: str) -> Any:
        if name in self.globalns:
            return self.globalns[name]
        found: Any = getattr(builtins, name, _ABSENT)
        if found is not _ABSENT:
            return found
        self.missing.append(name)
        return Unresolved(name)


_ABSENT: Any = object()


def _namespaces(target: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The globals and locals ``typing.get_type_hints`` would evaluate *target*'s
    annotations in (a class-level method sees its class's names)."""
    inner = inspect.unwrap(target) if callable(target) else target
    globalns: dict[str, Any] = dict(getattr(inner, "__globals__", {}))
    localns: dict[str, Any] = {}
    params: Any = getattr(inner, "__type_params__", ())
    for param in params:
        localns[param.__name__] = param
    return globalns, localns


def lenient_hints(fn: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """*fn*'s annotations, each read on its own: ``(hints, unresolved)``.

    An annotation that names something missing at run time does not stop the others: its
    missing names become `Unresolved` (the type is unknown, a ``Resolve`` marker in it is
    still read) and *unresolved* maps its parameter (or ``"return"``) to the first missing
    name. Whether that matters is decided where the annotation is needed.
    """
    try:
        return strict_hints(fn), {}
    except InvalidSignature:
        if inspect.isclass(fn) or not (
            inspect.isroutine(fn) or isinstance(fn, functools.partial) or wrapped_of(fn)
        ):
            raise
    target: Any = _partial_target(fn) if isinstance(fn, functools.partial) else fn
    raw: Any = getattr(inspect.unwrap(target), "__annotations__", None)
    if not isinstance(raw, dict):
        raise InvalidSignature(f"cannot read the annotations of {describe_fn(fn)}")
    globalns, localns = _namespaces(target)
    hints: dict[str, Any] = {}
    unresolved: dict[str, str] = {}
    for name, annotation in typing.cast(dict[str, Any], raw).items():
        probe = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            hints.update(typing.get_type_hints(probe, globalns, localns, include_extras=True))
            continue
        except Exception as exc:
            error = exc
        lenient = _Lenient(globalns, localns)
        try:
            if not isinstance(annotation, str):
                raise error
            hints[name] = eval(annotation, globalns, lenient)  # as typing.get_type_hints does
        except Exception:
            raise InvalidSignature(
                f"cannot read the annotation of {_where(name)} of {describe_fn(fn)} "
                f"({annotation!r}): {error}.\n"
                "  fix: make every name used in it importable at module level "
                "(not only under TYPE_CHECKING)"
            ) from error
        unresolved[name] = lenient.missing[0] if lenient.missing else str(error)
    return hints, unresolved


def _where(name: str) -> str:
    return "the return annotation" if name == "return" else f"parameter {name!r}"


def unresolved_error(fn: Any, name: str, missing: str, need: str) -> InvalidSignature:
    """The error for an annotation resolvent needs (*need* says why) that names *missing*,
    a name that does not exist at run time."""
    return InvalidSignature(
        f"{_where(name)} of {describe_fn(fn)} names {missing}, which is not defined when "
        f"resolvent reads it (imported only under TYPE_CHECKING?), and resolvent needs "
        f"{need}.\n"
        f"  fix: import {missing.partition('.')[0]} at module level, outside "
        "`if TYPE_CHECKING:`"
    )


def _class_hints(cls: type, init: Any) -> dict[str, Any] | None:
    """A class's ``__init__`` annotations read one by one, for a library class whose
    annotations name what it imports only for type checkers (``httpx.AsyncClient``'s
    ``ssl.SSLContext``). One that does not resolve is dropped when its parameter has a
    default (resolvent leaves that parameter to its default); else None."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    globalns = getattr(init, "__globals__", {})
    hints: dict[str, Any] = {}
    for name, annotation in getattr(init, "__annotations__", {}).items():
        probe = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            hints.update(typing.get_type_hints(probe, globalns, include_extras=True))
        except Exception:
            param = params.get(name)
            if param is None or param.default is param.empty or "Resolve" in str(annotation):
                return None
    return hints


def shown_hints(fn: Callable[..., Any], shown: Iterable[str]) -> dict[str, Any]:
    """*fn*'s annotations as a framework is shown them, read one by one (`lenient_hints`).

    A return annotation that names something missing at run time is left out (the
    framework sees none); a *shown* (caller-facing) parameter's cannot be, since the
    framework builds its schema from it: that is an `InvalidSignature` naming the name.
    """
    hints, unresolved = lenient_hints(fn)
    for name in shown:
        if name in unresolved:
            raise unresolved_error(fn, name, unresolved[name], "its type for the input schema")
    if "return" in unresolved:
        del hints["return"]
    return hints


def argument_parameters(
    fn: Callable[..., Any], names: Iterable[str], hints: Mapping[str, Any]
) -> list[inspect.Parameter]:
    """The parameters a framework shows for *fn*: its call arguments *names*, keyword-only,
    with *fn*'s own defaults and annotations (*hints*); the injected ones are left out."""
    original = inspect.signature(fn).parameters
    return [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=original[name].default,
            annotation=hints.get(name, inspect.Parameter.empty),
        )
        for name in names
    ]


def instance_parameter(fn: Callable[..., Any], arguments: Sequence[str]) -> str | None:
    """The name of *fn*'s instance parameter (``self``, ``cls``) if *fn* is a method.

    A function defined in a class body (its ``__qualname__`` says so) whose first
    parameter is positional, is a call argument (nothing resolves it) and is not
    annotated (or is named ``self`` or ``cls``): Python binds it when the method is read
    from an instance (`HTTPEndpoint` handlers, ``Route("/", api.handler)``,
    ``app.get("/")(api.handler)``, ``server.tool()(api.handler)``). A method given already
    bound has no such parameter.
    """
    if not inspect.isfunction(fn):
        return None
    owner = fn.__qualname__.rpartition(".")[0]
    if not owner or owner.endswith("<locals>"):
        return None
    first = next(iter(inspect.signature(fn).parameters.values()), None)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if first is None or first.kind not in positional or first.name not in arguments:
        return None
    if first.annotation is not inspect.Parameter.empty and first.name not in ("self", "cls"):
        return None
    return first.name


def _as_is(value: Any) -> Any:
    return value


def argument_converter(annotation: Any) -> Callable[[Any], Any]:
    """What turns a call argument given as a string (a web path or query parameter) into
    the value *annotation* asks for: the string as it is (``str``, `resolvent.Handle`, no
    annotation, or a type pydantic cannot validate), else pydantic's lax validation
    (``"3"`` becomes ``3`` for an ``int``); a value it refuses raises ``ValueError``."""
    bare = annotation
    if get_origin(bare) is Annotated:
        bare = get_args(bare)[0]
    if bare in (str, Any, inspect.Parameter.empty):
        return _as_is
    from pydantic import TypeAdapter  # loaded by the first web argument that needs it

    try:
        return TypeAdapter(annotation).validate_python
    except Exception:  # no schema for it (a class FastAPI's `Depends` fills): as it is
        return _as_is


# -- what an annotation says of asking ------------------------------------------------


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
the same without asking again. Emptied when it reaches 4,096 classes."""


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
