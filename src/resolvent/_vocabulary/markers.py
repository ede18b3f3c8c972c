"""The markers users write: `Resolve` on parameters, `Elicit` as a resolver's return."""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

    F = TypeVar("F", bound=Callable[..., Any])
    ModelT = TypeVar("ModelT", bound=BaseModel)
else:
    # `Elicit[Schema]` needs the variable at run time, but only type checkers read its
    # bound (a string bound compiles a ForwardRef at import).
    ModelT = TypeVar("ModelT")

__all__ = ("INLINE", "Elicit", "ReadingEpoch", "Resolve", "inline", "is_settling", "settles")

INLINE = "__resolvent_inline__"
"""The attribute `inline` sets; `resolvent._reading.kinds.is_inline` reads it."""
_SETTLES = "__resolvent_settles__"
HANDLER = "__resolvent_handler__"
"""The attribute an integration's wrapper (``resolvent.starlette.inject``) keeps the
function it wraps in, for the command line to compile the handler, not the wrapper."""
INJECTED = "__resolvent_injected__"
"""The attribute ``resolvent.mcp.inject`` sets on the functions it returns, which the MCP
start-up guard reads."""


class Resolve:
    """Fill a parameter by running a resolver: ``Annotated[T, Resolve(fn)]``.

    Args:
        fn: the resolver. Omit it (``Resolve()``) to look the provider up by the
            annotated type ``T`` in the container's registry.

    The resolver's own parameters are filled the same way, so resolvers form a graph
    that the container compiles once into a `Plan`.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        if self.fn is None:
            return "Resolve()"
        return f"Resolve({getattr(self.fn, '__qualname__', self.fn)!r})"


class Elicit(Generic[ModelT]):
    """A resolver's request to ask the user a question.

    Return ``Elicit(message, Schema)`` from a resolver; the call scope's asker answers it
    and the consumer receives the validated model (or, with an `ElicitationResult`
    annotation, the whole outcome).

    Args:
        message: the text shown to the user.
        schema: a pydantic model describing the answer's fields.
    """

    __slots__ = ("message", "schema")

    def __init__(self, message: str, schema: type[ModelT]) -> None:
        self.message = message
        self.schema = schema

    def __repr__(self) -> str:
        return f"Elicit({self.message!r}, {self.schema.__name__})"


def inline(fn: F, /) -> F:
    """Run a sync (``def``) handler or resolver on the event loop, not in a worker thread.

    A sync handler run by `Container.run`, `Session.run`, `Call.run` or an ``@inject``
    MCP tool runs in a worker thread, so a blocking body never stalls the event loop.
    Mark a cheap one ``@inline`` to run it on the loop and save the thread hop. On a
    resolver, ``@inline`` is the same as registering it with ``inline=True``, and works
    for a resolver used through ``Resolve(fn)`` without registering it. Returns *fn*
    itself. Under ``@inject(container)``, put it below ``@inject``, on the ``def``.
    Marked after plans that use it were compiled, it holds from their next call: every
    container compiles its plans again.

    ```python
    @inline
    def health(settings: Annotated[Settings, Resolve(get_settings)]) -> str:
        return settings.name
    ```

    Raises:
        TypeError: *fn* is an ``async def`` (it always runs on the loop: the mark would
            do nothing), or takes no attributes (a builtin); wrap it in a ``def``.
    """
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        name = getattr(fn, "__qualname__", repr(fn))
        raise TypeError(
            f"@inline on {name}: it is an async function, which always runs on the event "
            "loop, so the mark would do nothing.\n"
            "  fix: remove @inline; on an @inject(container) tool, put @inline below "
            "@inject, on the def itself"
        )
    _mark(fn, INLINE, "@inline", "a def")
    ReadingEpoch.move()
    return fn


def _mark(fn: Any, attribute: str, marker: str, wrapper: str) -> None:
    """Set a marker's *attribute* on *fn*, or say that *fn* takes none."""
    try:
        setattr(fn, attribute, True)
    except (AttributeError, TypeError):
        raise TypeError(
            f"{marker} cannot mark {fn!r}: it takes no attributes.\n"
            f"  fix: wrap it in {wrapper} and mark that"
        ) from None


class ReadingEpoch:
    """Moves on whenever what a function's reading means changes: a marker class is
    honoured (`register_resolve_marker`) or a function is marked `inline`. A registry
    drops the readings and expansions it made under an earlier one. Read as a class
    attribute, so a compile asks it without a call."""

    now = 0
    # The live plan caches (each container's), emptied when it moves: a plan compiled
    # before would otherwise go on running a resolver as it was read then.
    caches: ClassVar[weakref.WeakSet[Any]] = weakref.WeakSet()

    @classmethod
    def move(cls) -> None:
        """Move on, and empty every live plan cache (its `invalidate`)."""
        cls.now += 1
        for cache in list(cls.caches):
            cache.invalidate()


def settles(fn: F, /) -> F:
    """Mark a CALL resource whose teardown settles the call's writes before the answer.

    A resource marked ``@settles`` (a transaction, a unit of work, an outbox) is closed
    as soon as the handler's outcome is known, before its result leaves the integration:
    before a web response is sent, before an MCP tool's result is returned, before
    `Container.run` returns. Its teardown receives the outcome as any resource's does:
    no exception when the handler succeeded (commit), the handler's exception otherwise
    (roll back), and `InputRequired` when a multi-round call's round ends by asking (a
    round is not a success: roll back). An error its teardown raises after a success is
    the call's error: the web answers with an error response, an MCP tool with a tool
    error. Other resources close as ever (a web route's after its response is sent).
    Returns *fn* itself.

    ```python
    @settles
    async def transaction(db: Annotated[Db, Resolve(database)]) -> AsyncIterator[Tx]:
        tx = await db.begin()
        try:
            yield tx
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()
    ```

    The mark matters on a CALL-scoped resource (a generator, or a function returning a
    context manager); `State`'s ``new`` and ``edit`` carry it.

    Raises:
        TypeError: *fn* takes no attributes (a builtin); wrap it in a function.
    """
    _mark(fn, _SETTLES, "@settles", "a generator function")
    return fn


def is_settling(fn: Any) -> bool:
    """Whether *fn* (or the function a `functools.partial` wraps) is marked `settles`."""
    while isinstance(fn, functools.partial):
        fn = fn.func  # pyright: ignore[reportUnknownMemberType]
    return getattr(fn, _SETTLES, False) is True
