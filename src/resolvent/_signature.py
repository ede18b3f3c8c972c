"""Reading one function: its parameters, what it returns, and how it must be called.

Everything here looks at a single function. Decisions that need the whole graph (which
provider a type means, scopes, cycles) belong to the compiler.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import enum
import functools
import inspect
import re
import sys
import threading
import types
import typing
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
    Mapping,
)
from typing import Annotated, Any, get_args, get_origin

from ._errors import InvalidSignature
from ._markers import Resolve
from ._questions import OUTCOME_FAMILIES, QUESTION_KINDS, OutcomeFamily
from ._record import record

__all__ = ("FunctionInfo", "Kind", "Param", "read_function")

NO_DEFAULT: Any = inspect.Parameter.empty

RESOLVE_MARKERS: dict[type, Callable[[Any], Resolve]] = {Resolve: lambda marker: marker}
"""Marker classes honoured in ``Annotated`` metadata, with a converter to `Resolve`."""


def register_resolve_marker(cls: type, convert: Callable[[Any], Resolve]) -> None:
    """Honour another library's ``Resolve``-like marker (the MCP SDK's, for one)."""
    global _markers_epoch
    RESOLVE_MARKERS[cls] = convert
    _markers_epoch += 1


_markers_epoch = 0


def markers_epoch() -> int:
    """Changes when a marker class is registered: a reading cached before is read again."""
    return _markers_epoch


class Kind(enum.Enum):
    """How a provider produces its value; decided once per function."""

    ASYNC = "async function"
    SYNC = "function"
    ASYNC_GENERATOR = "async generator"
    GENERATOR = "generator"
    ASYNC_CONTEXT_MANAGER = "async context manager"
    CONTEXT_MANAGER = "context manager"

    @property
    def is_resource(self) -> bool:
        return self not in (Kind.ASYNC, Kind.SYNC)

    @property
    def is_async(self) -> bool:
        return self in (Kind.ASYNC, Kind.ASYNC_GENERATOR, Kind.ASYNC_CONTEXT_MANAGER)


@record
class Param:
    """One parameter as written.

    Attributes:
        name: the parameter's name.
        bare: the annotation without ``Annotated`` metadata (``inspect.Parameter.empty``
            when unannotated).
        marker: the `Resolve` marker, if the parameter has one.
        outcome: for a marked parameter that wants the whole outcome, its family.
        default: the default value, or ``inspect.Parameter.empty``.
    """

    name: str
    bare: Any
    marker: Resolve | None
    outcome: OutcomeFamily | None
    default: Any


@record
class FunctionInfo:
    """What one function shows: parameters, kind, provided type, whether it may ask."""

    fn: Callable[..., Any]
    name: str
    params: tuple[Param, ...]
    kind: Kind
    provides: Any
    may_ask: bool
    varkw: bool
    awaits: bool = False
    """Calling it returns an awaitable: an async function, or an async factory of a
    context manager (awaited first, then entered)."""
    asks: Any = NO_DEFAULT
    """The answer's type when its return annotation has a question arm that names one
    (``S`` in ``Elicit[S]``); `NO_DEFAULT` otherwise."""
    unresolved_return: str | None = None
    """A name its return annotation uses that does not exist at run time (the return
    type is then unknown): an error once the function is used as a resolver (`needs_return`)."""

    def needs_return(self) -> None:
        """Raise if the return annotation could not be read: a resolver's is needed."""
        if self.unresolved_return is not None:
            raise unresolved_error(
                self.fn, "return", self.unresolved_return, "a resolver's return type"
            )


def describe_fn(fn: Any) -> str:
    """A readable, qualified name for messages: ``module.Class.method``."""
    if isinstance(fn, functools.partial):
        return f"partial({describe_fn(fn.func)})"
    target = getattr(fn, "__func__", fn)
    qualname = getattr(target, "__qualname__", None) or type(fn).__qualname__
    module = getattr(target, "__module__", None) or type(fn).__module__
    return qualname if module in (None, "__main__", "builtins") else f"{module}.{qualname}"


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


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    if inspect.isclass(fn):
        target: Any = fn.__init__
    elif inspect.isroutine(fn) or isinstance(fn, functools.partial):
        target = fn.func if isinstance(fn, functools.partial) else fn
    elif _wrapped_of(fn) is not None:  # a class-based decorator: update_wrapper's copy
        target = fn
    else:
        target = type(fn).__call__
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
        return _hints(fn), {}
    except InvalidSignature:
        if inspect.isclass(fn) or not (
            inspect.isroutine(fn) or isinstance(fn, functools.partial) or _wrapped_of(fn)
        ):
            raise
    target: Any = fn.func if isinstance(fn, functools.partial) else fn
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


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return (
        not inspect.isroutine(fn) and not inspect.isclass(fn) and inspect.iscoroutinefunction(call)
    )


def _unwrapped(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _first_arg(annotation: Any) -> Any:
    args = get_args(annotation)
    return args[0] if args else NO_DEFAULT


_ASYNC_ITERATORS = (AsyncIterator, AsyncGenerator, typing.AsyncIterator, typing.AsyncGenerator)
_SYNC_ITERATORS = (Iterator, Generator, typing.Iterator, typing.Generator)
_ASYNC_CMS = (contextlib.AbstractAsyncContextManager,)
_SYNC_CMS = (contextlib.AbstractContextManager,)


def _cm_factory_code(decorator: Any, sample: Any) -> Any:
    return decorator(sample).__code__


async def _sample_agen() -> AsyncIterator[None]:
    yield None


def _sample_gen() -> Iterator[None]:
    yield None


_CM_FACTORY_CODES: dict[Any, Kind] = {
    _cm_factory_code(contextlib.asynccontextmanager, _sample_agen): Kind.ASYNC_CONTEXT_MANAGER,
    _cm_factory_code(contextlib.contextmanager, _sample_gen): Kind.CONTEXT_MANAGER,
}


def _wrapped_of(fn: Any) -> Any:
    """The callable *fn* wraps (``functools.wraps`` sets ``__wrapped__``), or None."""
    try:
        inner = getattr(fn, "__wrapped__", None)
    except Exception:  # an object whose attribute access fails: it wraps nothing we can read
        return None
    return inner if callable(inner) and inner is not fn else None


def _call_kind(fn: Any) -> Kind:
    """What calling *fn* gives, read from its code through any ``functools.wraps`` layers.

    The outermost layer that tells wins: contextlib's context-manager factories, async
    generator, generator and async functions tell; a plain sync wrapper passes its inner
    function's result through (that is what ``functools.wraps`` promises).
    """
    layer = fn
    for _ in range(64):  # as deep as real decorator stacks go; a loop of wrappers ends too
        layer = _unwrapped(layer)
        code = getattr(layer, "__code__", None)
        if code is not None and code in _CM_FACTORY_CODES:
            # @asynccontextmanager / @contextmanager: identified by contextlib's own
            # wrapper code, not by its __wrapped__ (the generator inside).
            return _CM_FACTORY_CODES[code]
        if inspect.isasyncgenfunction(layer):
            return Kind.ASYNC_GENERATOR
        if inspect.isgeneratorfunction(layer):
            return Kind.GENERATOR
        if _is_async_callable(layer):
            return Kind.ASYNC
        if inspect.isclass(layer):
            return Kind.SYNC
        inner = _wrapped_of(layer)
        if inner is None:
            break
        layer = inner
    return Kind.SYNC


_AWAITABLES = (Awaitable, Coroutine)


def _awaited_type(returns: Any) -> Any:
    """``T`` for a return annotation ``Awaitable[T]`` or ``Coroutine[Any, Any, T]``."""
    origin = get_origin(returns)
    if origin not in _AWAITABLES:
        return None
    args = get_args(returns)
    return args[-1] if args else NO_DEFAULT


_SELF: Any = typing.Self
_CM_ABCS = (contextlib.AbstractAsyncContextManager, contextlib.AbstractContextManager)


_ENTER = {Kind.ASYNC_CONTEXT_MANAGER: "__aenter__", Kind.CONTEXT_MANAGER: "__enter__"}

# Standard-library locks whose enter methods carry no annotation: what they give is known.
# asyncio's locks (Lock, Semaphore, BoundedSemaphore, Condition) enter to None; they are added
# once asyncio is imported, which any code using them has done (importing it here would double
# the time `import resolvent` takes).
_KNOWN_ENTERS: dict[Any, Any] = {
    threading.Semaphore.__enter__: bool,  # acquire()
    threading.Condition.__enter__: bool,
    type(threading.Lock()).__enter__: bool,  # a class of its own from Python 3.13
    type(threading.RLock()).__enter__: bool,
}


def _enter_annotation(cls: Any, method: str) -> Any:
    """What ``cls.<method>`` says it returns, or NO_DEFAULT when it does not say."""
    enter = getattr(cls, method, None)
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None:
        _KNOWN_ENTERS.setdefault(asyncio.Lock.__aenter__, type(None))
    try:
        known = _KNOWN_ENTERS.get(enter, NO_DEFAULT)
    except TypeError:  # an unhashable attribute: nothing known about it
        known = NO_DEFAULT
    if known is not NO_DEFAULT or enter is None:
        return known
    try:
        return typing.get_type_hints(enter).get("return", NO_DEFAULT)
    except Exception:  # a C method, or a name that does not resolve: unknown
        return NO_DEFAULT


def enters_unknown(info: FunctionInfo) -> bool:
    """A context-manager class whose ``__aenter__``/``__enter__`` has no return annotation
    (sqlite3.Connection's, say): what it enters is taken to be itself, a guess."""
    method = _ENTER.get(info.kind)
    if method is None:
        return False
    cls = get_origin(info.provides) or info.provides
    return hasattr(cls, method) and _enter_annotation(cls, method) is NO_DEFAULT


def entered_class(info: FunctionInfo) -> Any:
    """The context-manager class *info*'s return annotation names, when what it injects is
    what entering that class gives and not the class itself (an error message's hint);
    else None. Reads annotations: for compile-time errors only."""
    if info.kind not in _ENTER or _call_kind(info.fn).is_resource:
        return None
    fn = info.fn
    returns = fn if inspect.isclass(fn) else _hints(fn).get("return", NO_DEFAULT)
    origin = get_origin(returns) or returns
    if origin in _CM_ABCS or _entered(returns) in (None, (info.kind, returns)):
        return None
    return returns


def _entered(returns: Any) -> tuple[Kind, Any] | None:
    """For a return annotation that is a context-manager type: its kind and what entering
    it gives (``AbstractAsyncContextManager[T]`` gives T; a class such as
    ``httpx.AsyncClient`` gives what its ``__aenter__`` says, itself when unannotated)."""
    origin: Any = get_origin(returns) or returns
    if not isinstance(origin, type):
        return None
    if issubclass(origin, _ASYNC_CMS):  # pyright: ignore[reportGeneralTypeIssues]
        kind = Kind.ASYNC_CONTEXT_MANAGER
    elif issubclass(origin, _SYNC_CMS):  # pyright: ignore[reportGeneralTypeIssues]
        kind = Kind.CONTEXT_MANAGER
    else:
        return None
    if origin in _CM_ABCS:
        return kind, _first_arg(returns)
    entered = _enter_annotation(origin, _ENTER[kind])
    if isinstance(entered, typing.TypeVar):
        # `class Pool(Generic[T])` entering a T: `-> Pool[Connection]` enters a Connection.
        # Any other TypeVar is the `self: U -> U` of httpx: the instance itself.
        params: tuple[Any, ...] = getattr(typing.cast(Any, origin), "__parameters__", ())
        args = get_args(returns)
        if entered in params and len(args) == len(params):
            return kind, args[params.index(entered)]
        return kind, returns
    if entered is NO_DEFAULT or entered is _SELF or entered is origin:
        return kind, returns
    return kind, entered


def _kind_and_provides(fn: Any, returns: Any) -> tuple[Kind, Any, bool]:
    """The kind, the provided type, and whether calling *fn* returns an awaitable."""
    kind = _call_kind(fn)
    if kind.is_resource:  # generators and contextlib factories: annotations are the generator's
        return kind, _first_arg(returns), False
    entered = _entered(returns)
    if entered is not None:  # `-> Client` where Client is a context manager: a resource
        return entered[0], entered[1], kind is Kind.ASYNC
    if kind is Kind.ASYNC:
        return kind, returns, True
    if inspect.isclass(fn):
        return Kind.SYNC, fn, False
    awaited = _awaited_type(returns)
    if awaited is not None:  # a sync callable that says it returns an awaitable
        return Kind.ASYNC, awaited, True
    return Kind.SYNC, returns, False


def _article(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


_TELLS_ITSELF = (
    inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
) | inspect.CO_ITERABLE_COROUTINE


def _called_inside(fn: types.FunctionType, lam: bool) -> Iterator[Any]:
    """The callables *fn* closes over (and, for a lambda, the globals it names)."""
    for cell in fn.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # an empty cell
            continue
    if lam:
        for op in dis.get_instructions(fn):
            if op.opname == "LOAD_GLOBAL" and op.argval in fn.__globals__:
                yield fn.__globals__[op.argval]


def _bare_wrapper(fn: Any, returns: Any) -> None:
    """Refuse a plain function that hides what it calls (no ``functools.wraps``).

    A decorator's sync wrapper taking ``*args``/``**kwargs``, or a lambda, with no
    ``__wrapped__`` and no return annotation, that calls an async function or a generator
    function would otherwise be run as a plain function and its coroutine or generator
    object injected. An ``async def`` (or generator) wrapper says what it is itself.
    """
    if not isinstance(fn, types.FunctionType) or _wrapped_of(fn) is not None:
        return
    if returns is not NO_DEFAULT and returns is not Any and returns is not object:
        return
    code = fn.__code__
    lam = fn.__name__ == "<lambda>"
    if code.co_flags & _TELLS_ITSELF:
        return
    if not lam and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        return
    for inner in _called_inside(fn, lam):
        if not callable(inner) or inspect.isclass(inner):
            continue
        kind = _call_kind(inner)
        if kind is Kind.SYNC:
            continue
        name, inner_name = describe_fn(fn), getattr(inner, "__name__", "fn")
        made = "coroutine" if kind is Kind.ASYNC else kind.value
        if lam:
            raise InvalidSignature(
                f"{name} calls {describe_fn(inner)} ({_article(kind.value)}), so it returns "
                f"{_article(made)} object and resolvent would inject that object itself.\n"
                f"  fix: pass {inner_name} itself (Resolve({inner_name})); to bind arguments, "
                f"use functools.partial({inner_name}, ...), which resolvent sees through"
            )
        varargs = code.co_flags & inspect.CO_VARARGS
        annotate = (
            ""
            if varargs or kind is not Kind.ASYNC
            else ", or annotate the wrapper's return type (`-> Awaitable[T]`)"
        )
        raise InvalidSignature(
            f"{name} wraps {describe_fn(inner)} ({_article(kind.value)}) but has no __wrapped__, "
            "so resolvent cannot tell what calling it returns: it would inject the "
            f"{made} object itself.\n"
            f"  fix: decorate the wrapper with @functools.wraps({inner_name})"
            f" inside the decorator{annotate}"
        )


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def _is_question_type(tp: Any) -> bool:
    cls = get_origin(tp) or tp
    return isinstance(cls, type) and any(issubclass(cls, q) for q in QUESTION_KINDS)


def _may_ask(fn: Any, provides: Any) -> tuple[bool, Any, Any]:
    """Whether a resolver may return a question, the type it provides otherwise, and the
    type of an accepted answer (`NO_DEFAULT` when not declared)."""
    if provides is NO_DEFAULT or provides is Any or provides is object:
        return True, provides, NO_DEFAULT
    if isinstance(provides, typing.TypeVar):
        return True, provides, NO_DEFAULT
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
    target: Any = fn.__init__ if inspect.isclass(fn) else _unwrapped(fn)
    raw = getattr(target, "__annotations__", None)
    if not isinstance(raw, dict):
        return
    names = "|".join(re.escape(cls.__name__) for cls in RESOLVE_MARKERS)
    for param, annotation in typing.cast(dict[str, Any], raw).items():
        if param == "return":
            continue
        written = isinstance(annotation, str) and re.fullmatch(
            rf"\s*(?:\w+\.)*(?:{names})\s*(?:\(.*\))?\s*", annotation, re.DOTALL
        )
        if written or _is_marker(annotation) or _is_marker_class(annotation):
            raise InvalidSignature(
                f"parameter {param!r} of {name} is annotated with the marker itself "
                f"({annotation if isinstance(annotation, str) else repr(annotation)}); "
                "a marker is read only inside Annotated.\n"
                f"  fix: `{param}: Annotated[T, Resolve(fn)]`, with T the type it receives"
            )


def _marker_of(annotation: Any) -> Resolve | None:
    if get_origin(annotation) is not Annotated:
        return None
    found = [m for m in annotation.__metadata__ if type(m) in RESOLVE_MARKERS]
    if len(found) > 1:
        raise ValueError("more than one Resolve marker")
    return RESOLVE_MARKERS[type(found[0])](found[0]) if found else None


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


def outcome_family(type_arg: Any) -> OutcomeFamily | None:
    """The outcome family a consumer asks for, or None when it wants the bare value."""
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


def _marker_of_safe(annotation: Any) -> Resolve | None:
    try:
        return _marker_of(annotation)
    except ValueError:
        return None


def _pydantic_model(fn: Any, name: str) -> None:
    """Refuse a pydantic model with required fields as a provider: its fields are not
    dependencies, so resolving them would fail later with an unrelated message."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not inspect.isclass(fn) or not issubclass(fn, pydantic.BaseModel):
        return
    fields: dict[str, Any] = getattr(fn, "model_fields", {})
    required = [field for field, info in fields.items() if info.is_required()]
    if not required:
        return
    raise InvalidSignature(
        f"{name} is a pydantic model with required fields ({', '.join(required)}); "
        "resolvent does not build models field by field.\n"
        f"  fix: to ask the user, write a resolver returning `Elicit(message, {fn.__name__})`; "
        f"to build it from other values, write a function that returns a {fn.__name__}"
    )


def read_function(fn: Callable[..., Any]) -> FunctionInfo:
    """Read *fn* once: classify what can be classified without the graph.

    Raises:
        InvalidSignature: a marker hidden in a union, two markers on one parameter, more
            than one question arm, positional-only or ``*args`` parameters.
    """
    if not callable(fn):
        raise InvalidSignature(f"{fn!r} is not callable; Resolve(...) takes a function")
    name = describe_fn(fn)
    _misplaced_marker(fn, name)
    _pydantic_model(fn, name)
    hints, unresolved = lenient_hints(fn)
    returns = fn if inspect.isclass(fn) else hints.get("return", NO_DEFAULT)
    if "return" in unresolved:
        returns = NO_DEFAULT  # unknown: needed only if fn is used as a resolver
    _bare_wrapper(fn, returns)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise InvalidSignature(f"cannot read the signature of {name}: {exc}") from exc
    params: list[Param] = []
    varkw = False
    for p in signature.parameters.values():
        annotation = hints.get(p.name, NO_DEFAULT)
        if p.kind is p.VAR_KEYWORD:
            varkw = True
            continue
        if _is_marker(p.default) or _is_marker_class(p.default):
            raise InvalidSignature(
                f"parameter {p.name!r} of {name} has the marker {p.default!r} as its default; "
                "resolvent reads markers only from the annotation, so the marker object "
                "itself would be passed.\n"
                f"  fix: `{p.name}: Annotated[{_written_type(annotation)}, "
                f"{_written_marker(p.default)}]`, with no default"
            )
        if (
            p.kind is p.POSITIONAL_ONLY
            and p.default is not NO_DEFAULT
            and _marker_of_safe(annotation) is None
        ):
            continue  # never passed: it keeps its default
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            raise InvalidSignature(
                f"parameter {p.name!r} of {name} is {p.kind.description}; resolvent passes "
                "every value by keyword.\n  fix: make it a regular or keyword-only parameter"
            )
        try:
            marker = _marker_of(annotation)
        except ValueError:
            raise InvalidSignature(
                f"parameter {p.name!r} of {name} has more than one Resolve marker; keep one"
            ) from None
        if marker is None and _buried_marker(annotation):
            raise InvalidSignature(
                f"parameter {p.name!r} of {name} hides Resolve(...) "
                f"inside {type_name(annotation)}.\n"
                "  a marker inside a union or Optional is never honoured.\n"
                f"  fix: annotate it directly, `{p.name}: Annotated[T, Resolve(fn)]`; to receive a "
                "declined question, use `Annotated[ElicitationResult[T], Resolve(fn)]`"
            )
        if get_origin(annotation) is Annotated and any(
            _is_marker_class(m) for m in annotation.__metadata__
        ):
            raise InvalidSignature(
                f"parameter {p.name!r} of {name} has the class Resolve in Annotated, not a "
                "marker; without parentheses it would be read as a call argument.\n"
                f"  fix: `{p.name}: Annotated[T, Resolve(fn)]`, or `Resolve()` to find the "
                "provider by T"
            )
        if marker is not None and isinstance(marker.fn, Unresolved):
            raise unresolved_error(fn, p.name, marker.fn.name, "the resolver it names")
        if marker is not None and marker.fn is None and p.name in unresolved:
            raise unresolved_error(
                fn, p.name, unresolved[p.name], "the type to find the provider by, Resolve()"
            )
        if marker is not None and marker.fn is not None and not callable(marker.fn):
            raise InvalidSignature(
                f"parameter {p.name!r} of {name} has Resolve({marker.fn!r}), and "
                f"{marker.fn!r} (a {type(marker.fn).__qualname__}) is not callable.\n"
                "  fix: pass the resolver itself, `Resolve(fn)`, not the result of calling "
                "it, `Resolve(fn())`"
            )
        bare = annotation.__origin__ if get_origin(annotation) is Annotated else annotation
        family = outcome_family(bare) if marker is not None else None
        params.append(Param(p.name, bare, marker, family, p.default))
    kind, provides, awaits = _kind_and_provides(fn, returns)
    may_ask, provides, asks = (
        _may_ask(fn, provides) if not kind.is_resource else (False, provides, NO_DEFAULT)
    )
    return FunctionInfo(
        fn,
        name,
        tuple(params),
        kind,
        provides,
        may_ask,
        varkw,
        awaits,
        asks,
        unresolved.get("return"),
    )


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
