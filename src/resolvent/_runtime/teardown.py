"""Teardown: a call's exits, and closing resources in reverse order, shielded, each to
completion, interpreted (`Exits.close`, `close_now`) and as the lines of generated code
that do the same (`emit_open`, `emit_close`, with the names that code calls,
`GENERATED_NAMES`): one module owns how a CALL resource is torn down. Which resources close
before a call's answer leaves, and a web route's kept past it, are `kept.py`'s. Never sets
a resource up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread

from .._reading.kinds import Kind
from .._vocabulary.markers import is_settling
from .context import InContext, Restore
from .shield import NO_SCOPE, begin, insert, outer_cancelled, resume

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.abc import TaskGroup

    from .._graph.plan import Step

__all__ = (
    "GENERATED_NAMES",
    "PLAIN_NAMES",
    "Exits",
    "Held",
    "close_guarded",
    "close_now",
    "close_resources",
    "close_rest",
    "emit_close",
    "emit_open",
    "finalize",
    "finalize_sync",
    "plain_close",
    "settle",
)


class Exits(list[tuple["Step", Any]]):
    """A call scope's open resources, closed in reverse order.

    Entered with `open` (``async with call``), the call holds a cancel scope below every
    resource it sets up, so teardown is shielded by flipping that scope's ``shield``
    rather than by entering a new scope: a provider's own cancel scope (a task group
    spanning its ``yield``) is then left at the depth it was entered. On asyncio it holds
    only the mark where that scope goes once a finalizer needs it (`resolvent._runtime.shield`).
    A call that runs branches concurrently or under a deadline (which open scopes of their
    own around resolvers) holds each resource in a task of its own in a task *group*
    instead, so a resource's setup and teardown always share one task and one scope depth.
    Otherwise an async resource that may hold a cancel scope across its ``yield`` gets a
    task of its own all the same (`hold`), wherever it is resolved from.
    """

    # Slots, set by whoever makes one (`resolvent._container.call.open_call`), not an
    # ``__init__``: a call makes one of these each time, and a Python ``__init__`` (with
    # ``super().__init__()``) cost as much as the rest of it; defaults on the class (an
    # instance dictionary) cost twice what the slots do.
    __slots__ = ("closed", "deadline", "group", "guard")
    deadline: float  # the call's `call_timeout` deadline, once resolving (math.inf until)
    group: TaskGroup | None
    guard: Any  # from `begin`: a mark (asyncio) or an entered cancel scope; None until
    closed: bool  # set when the call's block ends; see `enter`

    async def open(self, *, holders: bool) -> None:
        """Enter the call's scope (with a task group if *holders*), in the caller's task."""
        if holders:
            group = anyio.create_task_group()
            await group.__aenter__()
            self.group = group
        else:
            self.guard = begin()

    async def close(self, exc: BaseException | None) -> None:
        """Close every resource (see `close_resources`), report errors, leave the scope."""
        self.closed = True
        guard = self.guard
        if guard.__class__ is tuple:  # shielded once needed (see `resolvent._runtime.shield`)
            self.guard = None
            left = close_now(self, exc, guard)
            if left is not None:
                settle(exc, await left)
            return
        if guard is not None:
            guard.shield = True
        try:
            settle(exc, await close_resources(self, exc, shield=guard is None))
        except BaseException as error:
            await self._leave(error)
            raise
        await self._leave(exc)

    async def _leave(self, failing: BaseException | None) -> None:
        guard, self.guard = self.guard, None
        if guard is not None:
            guard.__exit__(None, None, None)
        group, self.group = self.group, None
        if group is None:
            return
        # Every holder task has finished by now, so this only leaves the group. Its exit
        # is a checkpoint: a pending cancellation must not replace the exception already
        # on its way out (cancellation is re-delivered at the next checkpoint anyway).
        try:
            await group.__aexit__(None, None, None)
        except anyio.get_cancelled_exc_class():
            if failing is None:
                raise


class Held:
    """A resource held open by a task of its own (`resolvent._runtime.resources.hold`): it
    closes itself, in that task."""

    __slots__ = ()

    async def close(self, exc: BaseException | None) -> None:
        raise NotImplementedError


async def close_resources(
    exits: list[tuple[Step, Any]], exc: BaseException | None, *, shield: bool = True
) -> list[BaseException]:
    """Run every finalizer in reverse order, each to completion even under cancellation.

    With *shield* false the caller has already shielded the scope the resources were
    set up in.
    """
    errors: list[BaseException] = []
    # No new scope unless asked: a provider's own scopes must be left where entered.
    with anyio.CancelScope(shield=True) if shield else contextlib.nullcontext():
        while exits:
            step, obj = exits.pop()
            try:
                await finalize(step, obj, exc)
            except BaseException as error:
                if exc is not None or not is_settling(step.fn):  # else the call's error
                    from .._vocabulary.log import logger  # only when something failed

                    logger.failed("resolvent: teardown of %s failed", step.name, error=error)
                errors.append(error)
    return errors


async def close_guarded(
    exits: list[tuple[Step, Any]], exc: BaseException | None, guard: Any
) -> list[BaseException]:
    """`close_resources` under *guard*, a cancel scope entered below every resource when
    the lazy shield is not available (`resolvent._runtime.shield.eager`): shielded, then left."""
    guard.shield = True
    try:
        return await close_resources(exits, exc, shield=False)
    finally:
        guard.__exit__(None, None, None)


def close_now(
    exits: list[tuple[Step, Any]], exc: BaseException | None, guard: Any
) -> Coroutine[Any, Any, list[BaseException]] | None:
    """Close what closes without suspending, for generated code; None if that was all.

    Otherwise returns what closes the rest, which returns the errors. *guard* comes from
    `resolvent._runtime.shield.begin` before the first setup: on asyncio a mark where the teardown
    shield goes once a finalizer needs it (see `resolvent._runtime.shield`); else a cancel scope
    entered below every resource (as a call scope's `Exits` does), for `close_guarded`.
    """
    if guard.__class__ is not tuple:
        return close_guarded(exits, exc, guard)
    mark = guard[0]
    while exits:
        step, obj = exits[-1]
        if step.kind is not Kind.ASYNC_GENERATOR or (mark is not None and outer_cancelled(mark)):
            return close_rest(exits, exc, mark, None)
        del exits[-1]
        finalizer = obj.__anext__() if exc is None else obj.athrow(exc)
        try:
            pending = finalizer.send(None)
        except StopAsyncIteration:  # closed; it cannot have been cancelled: it never suspended
            continue
        except BaseException as error:
            return close_rest(exits, exc, mark, (step, obj, None, error))
        return close_rest(exits, exc, mark, (step, obj, finalizer, pending))
    return None


async def close_rest(
    exits: list[tuple[Step, Any]],
    exc: BaseException | None,
    mark: Any,
    started: tuple[Step, Any, Any, Any] | None,
) -> list[BaseException]:
    """The rest of `close_now`: the shield goes in at *mark* once a finalizer needs it.

    *started* is a generator finalizer that `close_now` began: ``(step, generator,
    finalizer, pending)`` if it suspended on *pending*, ``(step, generator, None, error)``
    if it raised *error* (StopIteration: it yielded again).
    """
    errors: list[BaseException] = []
    shield: Any = None
    try:
        while started is not None or exits:
            if started is not None:
                (step, obj, finalizer, pending), started = started, None
            else:
                (step, obj), finalizer, pending = exits.pop(), None, _UNSTARTED
            generator = step.kind is Kind.ASYNC_GENERATOR
            try:
                if pending is _UNSTARTED:
                    if generator:
                        finalizer = obj.__anext__() if exc is None else obj.athrow(exc)
                    else:
                        finalizer = finalize(step, obj, exc)
                    if shield is None and outer_cancelled(mark):
                        shield = insert(mark)
                    if shield is not None:
                        await finalizer
                        finalizer = None  # done (a generator: it yielded again)
                    else:
                        try:
                            pending = finalizer.send(None)
                        except StopIteration:  # done without suspending (or yielded)
                            finalizer = None
                elif finalizer is None and pending.__class__ is not StopIteration:
                    raise pending  # `close_now` saw its first step raise this
                if finalizer is not None:
                    # It suspends: shield it before the loop can deliver a cancellation,
                    # unless it has itself just cancelled a scope around the call.
                    if shield is None and not outer_cancelled(mark):
                        shield = insert(mark)
                    await resume(finalizer, pending)
                if generator:  # it yielded again
                    await obj.aclose()
                    raise RuntimeError(_YIELDED_TWICE.format(step.name))
            except BaseException as error:
                _failed(step, error, exc, errors)
    finally:
        if shield is not None:
            shield.__exit__(None, None, None)
    return errors


def _failed(
    step: Step, error: BaseException, exc: BaseException | None, errors: list[BaseException]
) -> None:
    """Record a generator finalizer's outcome: closed (StopAsyncIteration), the call's
    own *exc* coming back, or an error of its own (logged and collected)."""
    if error.__class__ is StopAsyncIteration and step.kind is Kind.ASYNC_GENERATOR:
        return
    if exc is not None and _only(error, exc):
        return
    if exc is not None or not is_settling(step.fn):  # else a refused write: the call's error
        from .._vocabulary.log import logger  # only when something failed

        logger.failed("resolvent: teardown of %s failed", step.name, error=error)
    errors.append(error)


_YIELDED_TWICE = "{} yielded more than once; a provider yields exactly one value"
_UNSTARTED: Any = object()  # a finalizer `close_rest` has yet to make and start


async def finalize(step: Step, obj: Any, exc: BaseException | None) -> None:
    """Tear one resource down; the scope's own exception *exc* coming back is no error."""
    if isinstance(obj, Held):
        await obj.close(exc)
        return
    if obj.__class__ is Restore:
        obj.undo()
        return
    try:
        kind = step.kind
        if kind is Kind.ASYNC_GENERATOR:
            await _finalize_async_generator(step, obj, exc)
        elif kind is Kind.ASYNC_CONTEXT_MANAGER:
            await obj.__aexit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        elif step.inline:
            finalize_sync(step, obj, exc)
        else:
            await anyio.to_thread.run_sync(finalize_sync, step, obj, exc)
    except BaseException as error:
        if exc is not None and _only(error, exc):
            return
        raise


def _only(error: BaseException, exc: BaseException) -> bool:
    """True if *error* is *exc* itself, or a group (a task group's) holding only *exc*."""
    if error is exc:
        return True
    if isinstance(error, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", error)
        return all(_only(inner, exc) for inner in group.exceptions)
    return False


async def _finalize_async_generator(step: Step, obj: Any, exc: BaseException | None) -> None:
    try:
        if exc is None:
            await obj.__anext__()
        else:
            await obj.athrow(exc)
    except StopAsyncIteration:
        return
    await obj.aclose()
    raise RuntimeError(_YIELDED_TWICE.format(step.name))


def finalize_sync(step: Step, obj: Any, exc: BaseException | None) -> None:
    if obj.__class__ is InContext:
        obj.context.run(finalize_sync, step, obj.obj, exc)
        return
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
    obj.close()
    raise RuntimeError(_YIELDED_TWICE.format(step.name))


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


# -- the same teardown, as generated code ----------------------------------------------------


def emit_open(emit: Callable[[str], None], *, kept: bool, holds: bool) -> None:
    """The first lines of a generated ``direct`` (or ``kept``) function, which sets up its
    CALL resources itself: mark where the teardown shield goes, as a call scope does (see
    `Exits`), so a provider's own cancel scopes are left in order; ``direct`` then opens
    the ``try`` whose end is `emit_close`'s. *holds*: a resource may go to a holder task
    (`resolvent._runtime.resources.hold`), which lists itself in ``exits``. ``kept`` takes its
    exits (a `Kept`) as *call* and leaves the closing to whoever holds them."""
    if kept:
        emit("    exits, call = call, None")
        emit("    exits.guard = begin()")
        return
    if holds:
        emit("    exits = ()")
    emit("    guard = begin()")
    emit("    try:")


def emit_close(
    emit: Callable[[str], None],
    const: Callable[[str, Any], str],
    resources: list[Step],
    *,
    holds: bool,
) -> None:
    """The end of a generated ``direct`` function: close *resources* (its CALL resources,
    in set-up order; ``r{index}`` holds each) as `close_now` and `close_rest` do, on the
    failure path and the success path, with the async-generator success path unrolled.
    *const* names an object for the code (a step)."""
    # The call's exception (a resolver's, mapped, or the handler's) is thrown into
    # each finalizer, as `async with call` would; their own errors become notes.
    pairs = [f"({const('S', t)}, r{t.index})" for t in resources]
    emit("    except BaseException as exc:")
    # The resources open: each one whose value was set (its set-up finished), in
    # order, before what `hold` listed (a holder cancelled while it opened).
    emit("        here = locals()")
    emit("        opened = []")
    for t, pair in zip(resources, pairs, strict=True):
        emit(f"        if 'v{t.index}' in here: opened.append({pair})")
    emit("        exits = [*opened, *exits]" if holds else "        exits = opened")
    emit("        left = close_now(exits, exc, guard)")
    emit("        if left is not None: settle(exc, await left)")
    emit("        raise")
    everything = f"[{', '.join(pairs)}]"
    if all(
        t.kind is Kind.ASYNC_GENERATOR or t.kind is Kind.ASYNC_CONTEXT_MANAGER for t in resources
    ):
        # The success path in line: `close_now`'s loop, unrolled (an async context
        # manager's finalizer is its ``__aexit__``, done at StopIteration). Each finalizer's
        # first step runs here; the call returns as soon as the last one is done,
        # and anything else (a finalizer that suspends or fails, a cancellation from
        # outside) goes on in `close_rest`.
        # The head tests the first finalizer's case: no scope at the mark (the
        # common case, no tuple to open), or a mark where no cancellation from
        # outside is in effect. Anything else (a cancellation in effect, or the eager
        # scope of a backend without the lazy shield) goes to `close_now`.
        emit("    if guard is NO_SCOPE or guard.__class__ is tuple and not cancelled(guard[0]):")
        many = len(resources) > 1
        mark = "mark" if many else "guard[0]"
        if many:
            emit("        mark = guard[0]")
            emit("        left = None")
        for n, t in enumerate(reversed(resources)):
            r, st = f"r{t.index}", const("S", t)
            before = pairs[: len(resources) - n - 1]  # the resources set up before t
            rest, left_open = (
                f"[{', '.join(before)}]",
                f"[{', '.join([*before, pairs[-n - 1]])}]",
            )
            pad = "    " * 2
            if n:  # a finalizer before it may have cancelled the caller: test again
                emit("        if left is None:")
                emit(f"            if {mark} is not None and cancelled({mark}):")
                emit(f"                left = close_rest({left_open}, None, {mark}, None)")
                emit("            else:")
                pad = "    " * 4
            last = n == len(resources) - 1
            if t.kind is Kind.ASYNC_GENERATOR:
                emit(f"{pad}finalizer = {r}.__anext__()")
                done = "StopAsyncIteration"
            else:
                emit(f"{pad}finalizer = {r}.__aexit__(None, None, None)")
                done = "StopIteration"
            emit(f"{pad}try: pending = finalizer.send(None)")
            emit(f"{pad}except {done}: {'return ret' if last else 'pass'}")
            emit(f"{pad}except BaseException as error:")
            started = f"({st}, {r}, None, error)"
            emit(f"{pad}    left = close_rest({rest}, None, {mark}, {started})")
            emit(f"{pad}else:")
            emit(
                f"{pad}    left = close_rest({rest}, None, {mark}, ({st}, {r}, finalizer, pending))"
            )
        emit("    else:")
        emit(f"        left = close_now({everything}, None, guard)")
        # Every path that gets here has a teardown under way in *left*.
        emit("    errors = await left")
        emit("    if errors: settle(None, errors)")
        return
    emit(f"    left = close_now({everything}, None, guard)")
    emit("    if left is not None:")
    emit("        errors = await left")
    emit("        if errors: settle(None, errors)")


GENERATED_NAMES: dict[str, Any] = {
    "begin": begin,
    "close_now": close_now,
    "close_rest": close_rest,
    "cancelled": outer_cancelled,
    "NO_SCOPE": NO_SCOPE,
    "settle": settle,
}
"""What the code `emit_open` and `emit_close` write calls, by the names it uses."""


def plain_close(step: Step, r: str) -> str:
    """The line that closes *step*'s resource, held in the variable *r*, after a success,
    as a person writes it by hand: no shield, no error gathered, no check that a generator
    yielded once (`resolvent bench`'s floor, the same calls with no container). Its code
    calls `PLAIN_NAMES`; the rest of this module is what resolvent adds to it."""
    kind = step.kind
    if kind is Kind.ASYNC_GENERATOR:
        return f"await afinish({r})"
    if kind is Kind.ASYNC_CONTEXT_MANAGER:
        return f"await {r}.__aexit__(None, None, None)"
    if kind is Kind.GENERATOR:
        return f"finish({r})" if step.inline else f"await to_thread(finish, {r})"
    if step.inline:
        return f"{r}.__exit__(None, None, None)"
    return f"await to_thread({r}.__exit__, None, None, None)"


def _finish(gen: Any) -> None:
    """A sync generator's teardown by hand: run it past its ``yield``."""
    try:  # noqa: SIM105 - a hand-written teardown; suppress() costs more
        next(gen)
    except StopIteration:
        pass


async def _afinish(gen: Any) -> None:
    """An async generator's teardown by hand."""
    try:  # noqa: SIM105 - a hand-written teardown; suppress() costs more
        await gen.__anext__()
    except StopAsyncIteration:
        pass


PLAIN_NAMES: dict[str, Any] = {
    "finish": _finish,
    "afinish": _afinish,
    "to_thread": anyio.to_thread.run_sync,
}
"""What `plain_close`'s lines call, by the names they use."""
