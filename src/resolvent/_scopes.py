"""Scopes: the ordered lifetimes, and the live scope object (value cache + teardown)."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ._errors import ResolventError
from ._questions import QUESTION_KINDS
from ._signature import Kind

if TYPE_CHECKING:
    from ._plan import Step

__all__ = ("LiveScope", "Scope")

logger = logging.getLogger("resolvent")


class Scope(enum.IntEnum):
    """How long a provider's value lives, ordered by lifetime.

    ``Scope.APP > Scope.SESSION > Scope.CALL``. A provider may depend only on providers
    that live at least as long as itself.
    """

    CALL = 1
    """One call: one ``container.run``, one ``tools/call``, one request."""
    SESSION = 2
    """One client session (``container.session()``; one MCP session)."""
    APP = 3
    """The open container (``async with container``; the MCP server lifespan)."""

    def __repr__(self) -> str:
        return f"Scope.{self.name}"

    __str__ = __repr__


class LiveScope:
    """One open scope instance: memoized values and the resources to close, in order.

    Values are created lazily on first use, once, under a per-key lock that works on
    asyncio and trio. Resources are closed by `close` in reverse order of setup.
    """

    __slots__ = ("cache", "closed", "exits", "keepalive", "locks", "scope")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.cache: dict[Hashable, Any] = {}
        self.exits: list[tuple[Step, Any]] = []
        self.locks: dict[Hashable, anyio.Lock] = {}
        self.keepalive: list[Any] = []
        self.closed = False

    async def create(self, step: Step, key: Hashable, make: Callable[[], Any]) -> Any:
        """Create the value of *step* once; concurrent first users wait for the winner."""
        lock = self.locks.get(key)
        if lock is None:
            lock = self.locks[key] = anyio.Lock()
        async with lock:
            if key in self.cache:
                return self.cache[key]
            if self.closed:
                raise RuntimeError(
                    f"the {self.scope.name} scope is closed; {step.name} cannot start"
                )
            value = await produce(self, step, make)
            self.keepalive.append(step.fn)
            self.cache[key] = value
        del self.locks[key]
        return value

    async def close(self, exc: BaseException | None) -> list[BaseException]:
        """Close every resource in reverse order, shielded; return the errors raised."""
        self.closed = True
        errors = await close_resources(self.exits, exc)
        self.cache.clear()
        self.keepalive.clear()
        return errors


async def produce(scope: LiveScope, step: Step, make: Callable[[], Any]) -> Any:
    """Run *step*'s function (via *make*) and, for a resource, enter it in *scope*."""
    kind = step.kind
    if kind is Kind.ASYNC:
        value = await make()
    elif kind is Kind.SYNC:
        value = make() if step.inline else await anyio.to_thread.run_sync(make)
    else:
        return await enter(scope.exits, step, make())
    if value.__class__ in QUESTION_KINDS:
        raise ResolventError(
            f"{step.name} ({step.scope!r}) returned a question; "
            "only CALL-scoped resolvers may ask.\n"
            f"  fix: move the question into a CALL-scoped resolver that depends on {step.name}"
        )
    return value


async def enter(exits: list[tuple[Step, Any]], step: Step, obj: Any) -> Any:
    """Enter a resource (generator or context manager) and remember how to close it."""
    kind = step.kind
    if kind is Kind.ASYNC_GENERATOR:
        try:
            value = await obj.__anext__()
        except StopAsyncIteration:
            raise RuntimeError(f"{step.name} finished without yielding a value") from None
    elif kind is Kind.ASYNC_CONTEXT_MANAGER:
        value = await obj.__aenter__()
    elif kind is Kind.GENERATOR:
        value = (
            _next_or_fail(step, obj)
            if step.inline
            else await anyio.to_thread.run_sync(_next_or_fail, step, obj)
        )
    else:
        value = obj.__enter__() if step.inline else await anyio.to_thread.run_sync(obj.__enter__)
    exits.append((step, obj))
    return value


def _next_or_fail(step: Step, gen: Any) -> Any:
    try:
        return next(gen)
    except StopIteration:
        raise RuntimeError(f"{step.name} finished without yielding a value") from None


async def close_resources(
    exits: list[tuple[Step, Any]], exc: BaseException | None
) -> list[BaseException]:
    """Run every finalizer in reverse order, each to completion even under cancellation."""
    errors: list[BaseException] = []
    with anyio.CancelScope(shield=True):
        while exits:
            step, obj = exits.pop()
            try:
                await _finalize(step, obj, exc)
            except BaseException as error:
                logger.error("resolvent: teardown of %s failed", step.name, exc_info=error)
                errors.append(error)
    return errors


async def _finalize(step: Step, obj: Any, exc: BaseException | None) -> None:
    kind = step.kind
    if kind is Kind.ASYNC_GENERATOR:
        try:
            if exc is None:
                await obj.__anext__()
            else:
                await obj.athrow(exc)
        except StopAsyncIteration:
            return
        except BaseException as error:
            if error is exc:
                return
            raise
        await obj.aclose()
        raise RuntimeError(
            f"{step.name} yielded more than once; a provider yields exactly one value"
        )
    if kind is Kind.ASYNC_CONTEXT_MANAGER:
        await obj.__aexit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        return
    if step.inline:
        _finalize_sync(step, obj, exc)
    else:
        await anyio.to_thread.run_sync(_finalize_sync, step, obj, exc)


def _finalize_sync(step: Step, obj: Any, exc: BaseException | None) -> None:
    if step.kind is Kind.CONTEXT_MANAGER:
        obj.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        return
    try:
        if exc is None:
            next(obj)
        else:
            obj.throw(exc)
    except StopIteration:
        return
    except BaseException as error:
        if error is exc:
            return
        raise
    obj.close()
    raise RuntimeError(f"{step.name} yielded more than once; a provider yields exactly one value")


def settle(exc: BaseException | None, errors: list[BaseException]) -> None:
    """Report finalizer *errors*: as notes on *exc* if the scope failed, else raised."""
    if exc is not None:
        for error in errors:
            exc.add_note(f"resolvent: a finalizer also failed during teardown: {error!r}")
        return
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise BaseExceptionGroup("several finalizers failed during teardown", errors)
