"""What a function is: its `Kind`, what calling it gives, and what entering that gives.

Reads code objects and return annotations only; never reads parameters or markers.
"""

from __future__ import annotations

import contextlib
import dis
import enum
import functools
import inspect
import sys
import threading
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin

from .._vocabulary.errors import InvalidSignature
from .._vocabulary.markers import INLINE
from .annotations import NO_DEFAULT, describe_fn, strict_hints, with_article, wrapped_of

__all__ = ("Kind", "call_kind", "kind_and_provides", "refuse_model")

# `class Kind(enum.Enum)` costs about 100 us of every import: EnumType checks the body and
# makes each member through descriptors. The standard library builds its own enums this
# way (`http.HTTPStatus`, `re.RegexFlag`): `enum._simple_enum` turns a plain class body into
# the same Enum class, at a fraction of the cost. Where it is missing, the class statement
# makes the enum as usual; type checkers see a plain Enum either way.
if TYPE_CHECKING:
    _C = TypeVar("_C")
    _EnumBody = enum.Enum

    def _built(cls: _C) -> _C: ...

elif hasattr(enum, "_simple_enum"):
    _EnumBody = object
    _built = enum._simple_enum(enum.Enum)
else:
    _EnumBody = enum.Enum

    def _built(cls: Any) -> Any:
        return cls


@_built
class Kind(_EnumBody):
    """How a provider produces its value; decided once per function."""

    ASYNC = "async function"
    SYNC = "function"
    ASYNC_GENERATOR = "async generator"
    GENERATOR = "generator"
    ASYNC_CONTEXT_MANAGER = "async context manager"
    CONTEXT_MANAGER = "context manager"

    # Each member's traits, set on it once below: read per step wherever a plan is built
    # or interpreted, a plain attribute is read where a property would be a call.
    is_resource: bool
    """Entered and torn down (a generator or a context manager), not only called."""
    is_async: bool
    """Calling it gives a coroutine, or its resource is entered with ``async with``."""


# `_simple_enum` leaves each member behind a descriptor (`enum.property`) in the class,
# so every `Kind.ASYNC_GENERATOR` in code that runs per call (a teardown, a resource's
# set-up) would be a Python call; the class statement stores the members themselves.
# Stored so here too (past EnumType's guard against reassigning a member).
def _store_members(cls: type[Kind]) -> None:
    for member in tuple(cls):
        if vars(cls).get(member.name) is not member:
            type.__setattr__(cls, member.name, member)


_store_members(Kind)


def _set_traits(cls: type[Kind]) -> None:
    for member in cls:
        member.is_resource = member not in (cls.ASYNC, cls.SYNC)
        member.is_async = member in (cls.ASYNC, cls.ASYNC_GENERATOR, cls.ASYNC_CONTEXT_MANAGER)


_set_traits(Kind)


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return (
        not inspect.isroutine(fn) and not inspect.isclass(fn) and inspect.iscoroutinefunction(call)
    )


def under_partials(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def is_inline(fn: Any) -> bool:
    """Whether *fn* (or the function a `functools.partial` wraps) is marked `inline`: a
    sync resolver that runs on the event loop, not in a worker thread."""
    return getattr(under_partials(fn), INLINE, False) is True


def _first_arg(annotation: Any) -> Any:
    args = get_args(annotation)
    return args[0] if args else NO_DEFAULT


def _yielded(returns: Any) -> Any:
    """What a generator (or a contextlib factory's generator) annotated *returns* yields:
    ``T`` of ``AsyncIterator[T]``, ``Iterator[T]``, ``Generator[T, ...]``; and a plain
    class, ``async def db() -> Db: yield ...``, can only mean what it yields (type
    checkers want ``AsyncIterator[Db]``, but the intent is plain)."""
    if isinstance(returns, type) and returns.__module__ not in _ITERATOR_MODULES:
        return returns
    return _first_arg(returns)


# Where the bare iterator ABCs live (`-> AsyncIterator`, `-> typing.Generator` without
# arguments yield something unknown).
_ITERATOR_MODULES = ("collections.abc", "typing", "_collections_abc", "types")


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


def call_kind(fn: Any) -> Kind:
    """What calling *fn* gives, read from its code through any ``functools.wraps`` layers.

    The outermost layer that tells wins: contextlib's context-manager factories, async
    generator, generator and async functions tell; a plain sync wrapper passes its inner
    function's result through (that is what ``functools.wraps`` promises).
    """
    if type(fn) is types.FunctionType and fn.__code__.co_flags & inspect.CO_COROUTINE:
        return Kind.ASYNC  # an `async def`, told by its own code: what the loop finds first
    layer = fn
    for _ in range(64):  # as deep as real decorator stacks go; a loop of wrappers ends too
        layer = under_partials(layer)
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
        inner = wrapped_of(layer)
        if inner is None:
            if inspect.isroutine(layer) or not callable(layer):
                break
            # A callable object (no `functools.update_wrapper`): what calling it gives is
            # what its class's __call__ gives, a generator for `def __call__(...): yield`.
            inner = getattr(type(layer), "__call__", None)  # noqa: B004 - the method itself
            if not inspect.isfunction(inner):
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


def enters_unknown(kind: Kind, provides: Any) -> bool:
    """A context-manager class whose ``__aenter__``/``__enter__`` has no return annotation
    (sqlite3.Connection's, say): what it enters is taken to be itself, a guess.

    *kind* and *provides* are a provider's, as `read_function` found them.
    """
    if kind is Kind.ASYNC_CONTEXT_MANAGER:  # identity tests: hashing a member costs a call
        method = "__aenter__"
    elif kind is Kind.CONTEXT_MANAGER:
        method = "__enter__"
    else:
        return False
    cls = get_origin(provides) or provides
    return hasattr(cls, method) and _enter_annotation(cls, method) is NO_DEFAULT


def entered_class(fn: Any, kind: Kind) -> Any:
    """The context-manager class *fn*'s return annotation names, when what it injects is
    what entering that class gives and not the class itself (an error message's hint);
    else None. *kind* is *fn*'s, as `read_function` found it. Reads annotations: for
    compile-time errors only."""
    if kind not in _ENTER or call_kind(fn).is_resource:
        return None
    returns = fn if inspect.isclass(fn) else strict_hints(fn).get("return", NO_DEFAULT)
    origin = get_origin(returns) or returns
    if origin in _CM_ABCS or _entered(returns) in (None, (kind, returns)):
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


def kind_and_provides(fn: Any, returns: Any) -> tuple[Kind, Any, bool]:
    """The kind, the provided type, and whether calling *fn* returns an awaitable."""
    kind = call_kind(fn)
    if kind.is_resource:  # generators and contextlib factories: annotations are the generator's
        return kind, _yielded(returns), False
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


def refuse_bare_wrapper(fn: Any, returns: Any) -> None:
    """Refuse a plain function that hides what it calls (no ``functools.wraps``).

    A decorator's sync wrapper taking ``*args``/``**kwargs``, or a lambda, with no
    ``__wrapped__`` and no return annotation, that calls an async function or a generator
    function would otherwise be run as a plain function and its coroutine or generator
    object injected. An ``async def`` (or generator) wrapper says what it is itself.
    """
    if not isinstance(fn, types.FunctionType) or wrapped_of(fn) is not None:
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
        kind = call_kind(inner)
        if kind is Kind.SYNC:
            continue
        name, inner_name = describe_fn(fn), getattr(inner, "__name__", "fn")
        made = "coroutine" if kind is Kind.ASYNC else kind.value
        if lam:
            raise InvalidSignature(
                f"{name} calls {describe_fn(inner)} ({with_article(kind.value)}), so it returns "
                f"{with_article(made)} object and resolvent would inject that object itself.\n"
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
            f"{name} wraps {describe_fn(inner)} ({with_article(kind.value)}) but has no "
            "__wrapped__, "
            "so resolvent cannot tell what calling it returns: it would inject the "
            f"{made} object itself.\n"
            f"  fix: decorate the wrapper with @functools.wraps({inner_name})"
            f" inside the decorator{annotate}"
        )


def refuse_model(fn: Any, name: str) -> None:
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
