"""Override blocks: swapping a provider for a replacement in one context, and taking out the
values built from it when the block ends. It never compiles or runs a plan."""

# A block changes its container's private state (`OverrideHost`): they are one unit.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import inspect
import itertools
import sys
import typing
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, Protocol, cast

from .._graph.compiler import NO_OVERRIDES, Overrides
from .._graph.plan import Step
from .._graph.registry import Registry, resolver_key
from .._reading.annotations import describe_fn, with_article
from .._reading.kinds import Kind
from .._runtime.cache import LiveScope
from .._runtime.context import InContext
from .._runtime.teardown import close_resources, finalize_sync, settle
from .._vocabulary.errors import InvalidSignature
from .._vocabulary.markers import inline
from .plans import callable_name

__all__ = ("OverrideBlock", "OverrideHost", "check_override")

_block_ids = itertools.count(1)
_NOTHING_READY: dict[Any, Any] = {}  # `Container._hot` while an override block is open


class OverrideHost(Protocol):
    """What an override block reads and changes of its container (`Container` is the one)."""

    _registry: Registry
    _override_var: ContextVar[Overrides | None]  # the blocks open in this context
    _overridden: list[int]  # one entry per block open in any context: a counter
    _ready: dict[Any, Any]  # checked plans `run` starts directly
    _hot: dict[Any, Any]  # what `run` looks in: `_ready`, or nothing while a block is open

    def _live_scopes(self) -> list[LiveScope]: ...


def _tainted_by(key: Hashable, block: int) -> bool:
    return type(key) is tuple and len(key) == 3 and key[0] == "override" and block in key[1]


def _closes_sync(step: Step, obj: Any) -> bool:
    if isinstance(obj, InContext):
        obj = obj.obj
    kind = step.kind
    return (kind is Kind.GENERATOR and inspect.isgenerator(obj)) or (
        kind is Kind.CONTEXT_MANAGER and hasattr(obj, "__exit__")
    )


class OverrideBlock:
    """One `Container.override` block: a sync or async context manager."""

    __slots__ = ("_container", "_id", "_plain", "_replacement", "_target")

    def __init__(
        self, container: OverrideHost, target: Any, replacement: Callable[..., Any]
    ) -> None:
        self._container = container
        self._target = target
        self._replacement = replacement
        self._id = 0
        self._plain = True

    def __repr__(self) -> str:
        target, replacement = (
            getattr(x, "__name__", None) or callable_name(x)
            for x in (self._target, self._replacement)
        )
        return f"container.override({target}, {replacement})"

    def _push(self, current: Overrides) -> Overrides:
        """*current* with this block's replacement on top."""
        entry = (self._id, self._replacement)
        by_key = dict(current.by_key)
        by_type = dict(current.by_type)
        target = self._target
        by_key[resolver_key(target)] = entry  # any function or class Resolve accepts
        if isinstance(target, type):
            offered = self._container._registry.for_type(target)
            if len(offered) == 1:
                # Replace the one provider of the type, so the replacement inherits its
                # scope (and `Resolve(provider)` consumers see the replacement too).
                by_key[resolver_key(offered[0].fn)] = entry
            else:
                by_type[target] = entry
        plain = {**current.plain, self._id: repr(self)} if self._plain else current.plain
        stamp, layers = (*current.stamp, self._id), (*current.layers, self)
        return Overrides(by_key, by_type, stamp, layers, plain)

    def __enter__(self) -> None:
        """Enter with a plain ``with``: leaving closes sync resources built from the
        replacement; an async APP/SESSION resource built from it is refused."""
        self._enter(plain=True)

    def _enter(self, *, plain: bool) -> None:
        container = self._container
        self._id = next(_block_ids)
        self._plain = plain
        container._override_var.set(self._push(container._override_var.get() or NO_OVERRIDES))
        container._overridden.append(self._id)
        container._hot = _NOTHING_READY  # `run` then checks for blocks (see `Container._run`)

    def _leave(self, *, sync: bool) -> list[tuple[Step, Any]]:
        """Drop this block from the current context; take out the values built from it.

        Returns the resources to close now (with *sync*, only those closable without
        awaiting; the others stay with their scope).
        """
        container = self._container
        block = self._id
        container._overridden.pop()  # a counter: which entry it drops does not matter
        if not container._overridden:
            container._hot = container._ready
        current = container._override_var.get()
        if current is not None and block in current.stamp:
            state = NO_OVERRIDES
            for layer in current.layers:  # the blocks still open, in their order
                if layer is not self:
                    state = cast(OverrideBlock, layer)._push(state)
            container._override_var.set(state if state.stamp else None)
        retired: list[tuple[Step, Any]] = []
        for live in container._live_scopes():
            for key in [k for k in live.cache if _tainted_by(k, block)]:
                del live.cache[key]
            kept: list[tuple[Step, Any]] = []
            for item in live.exits:
                if _tainted_by(item[0].key, block) and (not sync or _closes_sync(*item)):
                    retired.append(item)
                else:
                    kept.append(item)
            live.exits[:] = kept
        return retired

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        errors: list[BaseException] = []
        for step, obj in reversed(self._leave(sync=True)):
            try:
                finalize_sync(step, obj, None)
            except Exception as error:
                errors.append(error)
        settle(exc, errors)

    async def __aenter__(self) -> None:
        self._enter(plain=False)

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        settle(exc, await close_resources(self._leave(sync=False), None))


def check_override(target: Any, replacement: Any) -> Callable[..., Any]:
    """The replacement to use; refuse an override whose target or replacement cannot be
    one, naming the fix.

    Passing the fake object itself instead of a function that returns it is the usual
    slip: it would otherwise fail as an uncallable resolver, far from the override. A
    `unittest.mock` mock is called with no arguments (see `_called_mock`).
    """
    if not callable(target):
        raise InvalidSignature(
            f"container.override({target!r}, ...): the target is {_a_value(target)}, neither "
            "a provider function nor a type.\n"
            "  fix: pass the function (or class) to replace, or the type `Resolve()` finds "
            "it by: container.override(get_db, fake_db) or container.override(Db, fake_db)"
        )
    if not callable(replacement):
        name = describe_fn(target)
        raise InvalidSignature(
            f"container.override({name}, {replacement!r}): the replacement is "
            f"{_a_value(replacement)}, not a function; it is called to make the value.\n"
            f"  fix: pass a function that returns it: container.override({name}, "
            "lambda: fake)"
        )
    return _called_mock(replacement)


def _called_mock(replacement: Any) -> Callable[..., Any]:
    """A `unittest.mock` mock (``Mock(return_value=fake)``, ``AsyncMock(...)``) as a
    replacement: called with no arguments, awaited if it is an `AsyncMock`, so it records
    its calls. Its own signature, ``(*args, **kwargs)``, would be refused: resolvent
    passes values by keyword, and a mock has nothing to inject."""
    mock = sys.modules.get("unittest.mock")  # imported by any test that made a mock
    if mock is None or not isinstance(replacement, mock.NonCallableMock):
        return typing.cast(Callable[..., Any], replacement)
    name = type(replacement).__name__
    if isinstance(replacement, mock.AsyncMock):

        async def called_async() -> Any:
            return await replacement()

        called_async.__qualname__ = called_async.__name__ = name
        called_async.__module__ = "unittest.mock"
        return called_async

    def called_sync() -> Any:
        return replacement()

    called_sync.__qualname__ = called_sync.__name__ = name
    called_sync.__module__ = "unittest.mock"
    return inline(called_sync)  # a mock does no blocking work: no worker thread


def _a_value(obj: Any) -> str:
    return f"{with_article(type(obj).__name__)} object"
