"""Opening resources: a provider's set-up, in the caller's task, a holder task or a worker
thread. Never closes a scope: what it opens is appended to the exits that close it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from .._reading.kinds import Kind
from .._vocabulary.errors import ResolventError
from .context import InContext, adopt, keep
from .home import spawn_home
from .shield import here
from .teardown import Exits, Held, close_resources, finalize, finalize_sync, settle

if TYPE_CHECKING:
    from .._graph.plan import Step
    from .threads import abandonable
else:

    async def abandonable(*args: Any) -> Any:
        """The first resource set up in a worker thread loads `_runtime.threads` and puts its
        `abandonable` in this name, so later set-ups call it through a plain global."""
        global abandonable
        from .threads import abandonable

        return await abandonable(*args)


__all__ = ("Holder", "enter", "hold", "open_resource", "opened_too_late", "plain_cell")


_EMPTY_CONTEXT = contextvars.Context()


class Holder(Held):
    """A task that sets one resource up, holds it open, and tears it down on release."""

    __slots__ = (
        "abort",
        "base",
        "context",
        "error",
        "exc",
        "expired",
        "finished",
        "hold_shielded",
        "holds",
        "listed",
        "obj",
        "on_open",
        "opened",
        "release",
        "scope",
        "settled",
        "step",
        "tokens",
        "value",
    )

    def __init__(self, step: Step, obj: Any, *, hold_shielded: bool = True) -> None:
        self.step = step
        self.obj = obj
        self.hold_shielded = hold_shielded
        self.on_open: Callable[[], None] | None = None
        self.abort = anyio.CancelScope()
        self.scope = anyio.CancelScope()
        self.settled = anyio.Event()
        self.release = anyio.Event()
        self.finished = anyio.Event()
        self.opened = False
        self.listed = False  # in its call's exits, which close it (see `_listed`)
        self.expired = False
        self.holds = True  # whether the setup left a cancel scope open (see `hold`)
        self.tokens: list[contextvars.Token[Any]] = []  # what `hold` adopted; undone at close
        self.value: Any = None
        self.error: BaseException | None = None
        self.exc: BaseException | None = None
        self.base = self.context = _EMPTY_CONTEXT  # this task's context around setup

    async def run(self) -> None:
        # One scope (`scope`) around setup, hold and teardown: the provider's own cancel
        # scopes (a task group spanning its yield) nest inside it and are left at the
        # depth they were entered. It is shielded once the resource is open. Setup is
        # aborted through `abort`, outside it, so an abort that comes too late (a setup
        # that finished regardless, a thread) cannot cut the hold or the teardown short.
        try:
            # A home task (APP, SESSION) holds unshielded: the only cancellation that can
            # reach it is the event loop's shutdown, which must not hang on the hold.
            with self.abort, self.scope:
                self.base = contextvars.copy_context()
                before = here()
                self.value = await _open(self.step, self.obj, self)
                self.holds = here() is not before
                self.context = contextvars.copy_context()
                self.opened = True
                self.scope.shield = self.hold_shielded
                if self.on_open is not None:
                    self.on_open()
                self.settled.set()
                stopped: BaseException | None = None
                try:
                    await self.release.wait()
                except BaseException as error:  # the event loop's shutdown (a home task)
                    stopped = error
                self.scope.shield = True
                # Closed here even then: leaving without it would leave the provider's
                # own scopes open (trio: "cancel scope stack corrupted").
                try:
                    await finalize(self.step, self.obj, self.exc)
                except BaseException as error:
                    self.error = error
                if stopped is not None:
                    raise stopped
        except BaseException as error:
            self.error = error
        self.settled.set()
        self.finished.set()

    async def close(self, exc: BaseException | None) -> None:
        self.exc = exc
        self.release.set()
        await self.finished.wait()
        tokens, self.tokens = self.tokens, []
        for token in reversed(tokens):  # in the closing task: the caller's, as set up
            with contextlib.suppress(ValueError):  # made in another context
                token.var.reset(token)
        if self.error is not None:
            raise self.error

    # A held async generator closes like the generator itself (`close_now`, `close_rest`
    # and generated code finalize one with ``__anext__``/``athrow``): the teardown runs
    # in the holder task, and the end is StopAsyncIteration, as a generator's.

    def __anext__(self) -> Coroutine[Any, Any, None]:
        return self.athrow(None)

    async def athrow(self, exc: BaseException | None) -> None:
        await self.close(exc)
        raise StopAsyncIteration

    # A held async context manager closes like one (generated code finalizes it with
    # ``__aexit__``), the teardown in the holder task.

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        await self.close(exc)


# Whether an async CALL resource is known to leave no cancel scope open across its
# `yield`, by its function's code (shared by closures and bound methods): a one-item list,
# read by generated code as a constant. A known one is set up and torn down in the
# caller's task; every other one is held by a task of its own (`hold`), which finds out,
# the first time, whether it needs to be.
_plain: dict[Any, list[bool]] = {}


def plain_cell(step: Step) -> list[bool]:
    """The cell saying whether *step*'s resource is known to hold no cancel scope."""
    fn = getattr(step.fn, "__func__", step.fn)
    key = getattr(fn, "__code__", fn)
    cell = _plain.get(key)
    if cell is None:
        if len(_plain) >= 4096:
            _plain.clear()  # bounded: a forgotten one is found out again
        cell = _plain[key] = [False]
    return cell


async def hold(
    exits: list[tuple[Step, Any]], step: Step, obj: Any, plain: list[bool] | None = None
) -> Holder:
    """Set resource *obj* up in a task of its own, which holds it until it is closed.

    An async resource that keeps a cancel scope or task group open across its ``yield``
    must be torn down in the task, and at the depth, where it was set up. A holder task
    is that home, whatever task resolves the call and under whatever deadline of its
    own; and the call's cancellation does not reach into the resource while it is held
    (a task group's background task keeps running until the teardown). A resource found
    to hold no scope is marked in its *plain* cell (`plain_cell`), and later calls set it
    up in their own task (cheaper). Returns the open holder, which closes like the
    generator (see `Holder.athrow`). A call scope's *exits* (`Exits`) list it as its
    set-up ends; any other list is the caller's to append it to, except when the caller
    is cancelled once the resource opened: then it is appended here, to be closed with
    the call.
    """
    holder = Holder(step, obj)
    group = None
    listed = isinstance(exits, Exits)
    if isinstance(exits, Exits):
        # Branches, or tasks sharing the call, may open resources at once: the holder
        # lists itself the moment its set-up ends, so the call closes them in reverse
        # order of that, whichever waiting task the event loop wakes first.
        holder.on_open = functools.partial(_listed, exits, step, holder)
        group = exits.group
    if group is not None:
        group.start_soon(holder.run)
    else:
        spawn_home(holder.run)
    try:
        await holder.settled.wait()
    except BaseException as stopped:
        # Cancelled (a deadline, a failed sibling branch): stop the setup too. If it
        # finished anyway, the resource is open and is closed with the call, or here if
        # the call's block had ended by then (nobody else would close it).
        if not holder.opened:
            deadline = exits.deadline if isinstance(exits, Exits) else math.inf
            holder.expired = anyio.current_time() >= deadline
            holder.abort.cancel()
        with anyio.CancelScope(shield=True):
            await holder.settled.wait()
        if holder.opened and not holder.listed:
            if listed:
                settle(stopped, await close_resources([(step, holder)], None))
            else:
                exits.append((step, holder))
        elif holder.error is not None and not isinstance(
            holder.error, anyio.get_cancelled_exc_class()
        ):
            # The setup failed for a reason of its own: report that, not the cancellation.
            raise holder.error from holder.error.__cause__
        raise
    if not holder.opened:
        error = holder.error
        if error is None or isinstance(error, anyio.get_cancelled_exc_class()):
            # The setup was cancelled from outside; let this task see its own cancellation.
            await anyio.lowlevel.checkpoint()
            raise RuntimeError(f"the setup of {step.name} was cancelled")
        raise error
    if plain is not None and not holder.holds:
        plain[0] = True
    if isinstance(exits, Exits) and exits.closed:
        # Listed before the block ended, it is the call's to close; else this one's.
        await _opened_too_late(step, holder, closed_by_call=holder.listed)
    source = obj if isinstance(obj, InContext) else holder
    holder.tokens = adopt(source.base, source.context)  # holder tasks set up in a copy
    return holder


async def enter(exits: list[tuple[Step, Any]], step: Step, obj: Any) -> Any:
    """Enter a resource (generator or context manager) and remember how to close it."""
    if isinstance(exits, Exits):
        call, group = True, exits.group
    else:
        call, group = False, None
    kind = step.kind  # identity tests: hashing an enum member costs a Python call
    held = kind is Kind.ASYNC_GENERATOR or kind is Kind.ASYNC_CONTEXT_MANAGER
    if group is None:
        if held and call:
            plain = plain_cell(step)
            if not plain[0]:  # may hold a scope open: in a task of its own
                holder = await hold(exits, step, obj, plain)  # listed itself as it opened
                return holder.value
        if held or (step.inline and call):
            # Set up and torn down in this task (a call's), in this task's context.
            value = await _open(step, obj)
            if isinstance(exits, Exits) and exits.closed:
                await _opened_too_late(step, obj)
            exits.append((step, obj))
            return value
        # A thread per hop, or a scope closed from another task: a context of its own.
        own = InContext(obj)
        value = await _open(step, own, shared=not call)
        if isinstance(exits, Exits) and exits.closed:
            await _opened_too_late(step, own)
        exits.append((step, own))
        if call:
            keep(exits, step, own.base, own.context)
        return value
    if not held and not step.inline:
        obj = InContext(obj)  # set up and torn down in worker threads
    holder = await hold(exits, step, obj)  # listed itself in *exits* as it opened
    return holder.value


def _listed(exits: Exits, step: Step, holder: Holder) -> None:
    """List *holder*, whose set-up just ended, in its call's *exits*; once the call's
    block has ended, its resolution closes it instead (`_opened_too_late`)."""
    if not exits.closed:
        exits.append((step, holder))
        holder.listed = True


async def _opened_too_late(step: Step, obj: Any, *, closed_by_call: bool = False) -> None:
    """A resolution still running when its call's block ended opened *step*: fail that
    resolution, and close *obj* now (nobody else would) unless *closed_by_call*: a holder
    that listed itself just before the block ended, which the call closes (and reports
    the teardown's errors of) once, with its other resources."""
    if closed_by_call:
        when, then = "just as its call scope closed", "the call closed it with its other resources"
        errors: list[BaseException] = []
    else:
        when, then = "after its call scope had closed", "it was closed again at once"
        errors = await close_resources([(step, obj)], None)
    error = ResolventError(
        f"{step.name} opened {when} (the `async with` block of the "
        f"call ended while a task was still resolving in it); {then}.\n"
        "  fix: finish every use of a call inside its block, e.g. with a task group opened "
        "inside `async with container.call() as call:`"
    )
    settle(error, errors)
    raise error


async def _open(step: Step, obj: Any, holder: Holder | None = None, *, shared: bool = False) -> Any:
    """Run a resource's setup and return its value.

    A *shared* (APP or SESSION) sync resource's setup is abandoned when its scope closes
    while the setup blocks; a CALL one only at the call's deadline.
    """
    kind = step.kind
    if kind is Kind.ASYNC_GENERATOR:
        try:
            return await obj.__anext__()
        except StopAsyncIteration:
            raise RuntimeError(
                f"{step.name} finished without yielding a value\n  fix: make it `yield` its "
                "value exactly once on every path"
            ) from None
    if kind is Kind.ASYNC_CONTEXT_MANAGER:
        return await obj.__aenter__()
    if step.inline:
        if obj.__class__ is InContext:
            return obj.context.run(_enter_sync, step, obj.obj)
        return _enter_sync(step, obj)
    setup = _ThreadedSetup(step, obj)
    try:
        return await abandonable(setup.run)
    except anyio.get_cancelled_exc_class():
        if setup.abandon(expired=shared or (holder is not None and holder.expired)):
            raise  # abandoned: if the setup ever finishes, its own thread closes it
        # Cancelled for another reason (a failed branch, the caller), or it opened just
        # now: wait for the setup, so what it opened is closed with the call as usual
        # (the cancellation is delivered again at the call's next checkpoint).
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(setup.done.wait)
        if setup.error is not None:
            raise setup.error from None
        return setup.value


open_resource = _open  # for generated code
opened_too_late = _opened_too_late  # for generated code


class _ThreadedSetup:
    """A sync resource's setup in a worker thread that an expired call may abandon.

    The call does not wait for an abandoned thread; when the setup finishes anyway, the
    thread itself closes the resource nobody will use. A setup abandoned before its
    thread started never runs.
    """

    __slots__ = ("abandoned", "done", "error", "lock", "obj", "opened", "started", "step", "value")

    def __init__(self, step: Step, obj: InContext) -> None:
        self.step = step
        self.obj = obj
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.abandoned = False
        self.started = False
        self.opened = False
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> Any:
        if not self._start():
            return None
        own = self.obj
        try:
            value = own.context.run(_enter_sync, self.step, own.obj)
        except BaseException as error:
            with self.lock:
                self.error = error
                late = self.abandoned
            self.done.set()
            if late:  # nobody waits for it any more: report it
                from .._vocabulary.log import logger  # only when something failed

                logger.error(
                    "resolvent: %s failed to start after it was abandoned",
                    self.step.name,
                    exc_info=error,
                )
            raise
        with self.lock:
            self.value = value
            self.opened = True
            late = self.abandoned
        self.done.set()
        if late:
            self.close_late()
        return value

    def _start(self) -> bool:
        with self.lock:
            if self.abandoned:
                return False
            self.started = True
            return True

    def abandon(self, *, expired: bool) -> bool:
        """Abandon the setup if it has not started, or (on *expired*) not opened yet.

        Returns True if it was abandoned; False if the caller must wait for it.
        """
        with self.lock:
            # One that has finished (opened or failed) is not abandoned: its caller
            # gets its value or its error.
            finished = self.opened or self.error is not None
            self.abandoned = not self.started or (expired and not finished)
            return self.abandoned

    def close_late(self) -> None:
        try:
            finalize_sync(self.step, self.obj, None)
        except BaseException as error:
            from .._vocabulary.log import logger  # only when something failed

            logger.failed(
                "resolvent: teardown of %s (abandoned setup) failed", self.step.name, error=error
            )


def _enter_sync(step: Step, obj: Any) -> Any:
    return _next_or_fail(step, obj) if step.kind is Kind.GENERATOR else obj.__enter__()


def _next_or_fail(step: Step, gen: Any) -> Any:
    try:
        return next(gen)
    except StopIteration:
        raise RuntimeError(
            f"{step.name} finished without yielding a value\n  fix: make it `yield` its "
            "value exactly once on every path"
        ) from None
