"""Scopes: the ordered lifetimes, and the live scope object (value cache + teardown)."""

from __future__ import annotations

import contextlib
import contextvars
import enum
import math
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.lowlevel
import anyio.to_thread

from ._errors import ResolventError
from ._kinds import Kind
from ._questions import QUESTION_KINDS
from ._shield import begin, here, insert, outer_cancelled, resume

if TYPE_CHECKING:
    import asyncio

    from anyio.abc import TaskGroup

    from ._plan import Step

__all__ = (
    "Exits",
    "InContext",
    "LiveScope",
    "Scope",
    "abandonable",
    "adopt",
    "hold",
    "in_thread",
    "plain_cell",
)


class _Logger:
    """The ``resolvent`` logger, looked up when something fails.

    Only failures nobody else receives are logged, so ``import resolvent`` does not pay
    for importing :mod:`logging`. Records name the caller, as a plain logger's would.
    """

    __slots__ = ()

    def error(self, msg: str, *args: object, exc_info: BaseException | None = None) -> None:
        import logging

        logging.getLogger("resolvent").error(msg, *args, exc_info=exc_info, stacklevel=2)

    def failed(self, msg: str, *args: object, error: BaseException) -> None:
        """Log *error* at ERROR in one line, ``msg: Type: text``; its traceback rides along
        only when the ``resolvent`` logger is enabled for DEBUG (a user asked for detail).

        The caller receives the error itself (raised, grouped, or as a note), so by default
        the log says what failed where, once, without a traceback per finalizer.
        """
        import logging

        log = logging.getLogger("resolvent")
        text = str(error).partition("\n")[0]
        summary = f"{type(error).__name__}: {text}" if text else type(error).__name__
        detail = error if log.isEnabledFor(logging.DEBUG) else None
        log.error(msg + ": %s", *args, summary, exc_info=detail, stacklevel=2)


logger = _Logger()

# Resources whose setup and teardown must share one task (they may hold cancel scopes).
_HELD = frozenset({Kind.ASYNC_GENERATOR, Kind.ASYNC_CONTEXT_MANAGER})
_UNSET: Any = object()


# --- context variables ------------------------------------------------------------------
# The rule (docs/concepts.md, "Context variables"): a CALL resolver or resource runs as if
# called in the caller's task, so what it sets in context variables is seen by the
# resolvers after it and by the handler. Where it really runs elsewhere (a worker thread,
# a branch or holder task), it runs in a copy of the caller's context and what it set is
# copied back (`adopt`). A sync resource's set-up and teardown run in one context of its
# own (`InContext`), so `token = var.set(x); yield; var.reset(token)` works wherever its
# teardown is called from. APP and SESSION values start in their home task: what their
# set-up sets stays there.


def adopt(base: contextvars.Context, changed: contextvars.Context) -> list[contextvars.Token[Any]]:
    """Set in the current context what *changed* set since it was copied from *base*.

    Returns the tokens, to undo it (see `_Restore`). Costs one comparison when nothing
    was set.
    """
    if changed == base:
        return []
    return [var.set(value) for var, value in changed.items() if base.get(var, _UNSET) is not value]


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread, abandoned on cancel; keep what it set in context."""
    base = contextvars.copy_context()
    context = base.copy()
    value = await abandonable(context.run, fn, *args)
    adopt(base, context)
    return value


async def abandonable(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread that a cancelled caller abandons (stops waiting
    for); the thread keeps its worker-thread slot until it really ends.

    So threads stuck in a call that timed out are bounded by the default thread limiter
    (``anyio.to_thread.current_default_thread_limiter()``, 40 tokens unless raised), on
    both backends: trio keeps an abandoned thread's token itself; anyio's asyncio backend
    gives it back at once, so on asyncio the slot is taken here on the thread's behalf and
    given back by the thread when it ends.
    """
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # trio: an abandoned thread holds its token until it ends
        return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
    limiter = anyio.to_thread.current_default_thread_limiter()
    slot = _Slot(loop, limiter)
    try:  # the thread hop checkpoints anyway: no second one here when a slot is free
        limiter.acquire_on_behalf_of_nowait(slot)
    except anyio.WouldBlock:
        await limiter.acquire_on_behalf_of(slot)
    try:
        return await anyio.to_thread.run_sync(
            slot.run, fn, args, abandon_on_cancel=True, limiter=_unbounded(loop)
        )
    finally:
        slot.leave()


_unbounded_limiters: weakref.WeakKeyDictionary[Any, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _unbounded(loop: asyncio.AbstractEventLoop) -> anyio.CapacityLimiter:
    """*loop*'s limiter that bounds nothing (the slot is held by `_Slot`)."""
    limiter = _unbounded_limiters.get(loop)
    if limiter is None:
        limiter = _unbounded_limiters[loop] = anyio.CapacityLimiter(math.inf)
    return limiter


_WAITING, _RUNNING, _LEFT = "waiting", "running", "left"  # a `_Slot`'s life, by identity


class _Slot:
    """The default limiter's token that one worker thread holds until it ends (asyncio).

    Given back by the caller (`leave`) when the thread has finished or never started, else
    by the thread itself when it ends: a thread abandoned before it started never runs.
    """

    __slots__ = ("limiter", "lock", "loop", "state")

    def __init__(self, loop: asyncio.AbstractEventLoop, limiter: anyio.CapacityLimiter) -> None:
        self.loop = loop
        self.limiter = limiter
        self.lock = threading.Lock()
        self.state = _WAITING

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        with self.lock:
            if self.state is _LEFT:  # abandoned before it started
                return None
            self.state = _RUNNING
        try:
            return fn(*args)
        finally:
            self._ended()

    def _ended(self) -> None:
        with self.lock:
            left, self.state = self.state is _LEFT, _LEFT
        if left:  # abandoned: the caller is gone, give the token back from here
            with contextlib.suppress(RuntimeError):  # the event loop has closed
                self.loop.call_soon_threadsafe(self.limiter.release_on_behalf_of, self)

    def leave(self) -> None:
        """The caller is done (the thread finished) or gone (cancelled)."""
        with self.lock:
            running, self.state = self.state is _RUNNING, _LEFT
        if not running:
            self.limiter.release_on_behalf_of(self)


class InContext:
    """A sync resource with a context of its own: set-up and teardown both run there.

    Its teardown may run in another task or thread than its set-up did (a worker
    thread per hop; a scope closed from another task), and a context variable token is
    valid only in the context that made it.
    """

    __slots__ = ("base", "context", "obj")

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.base = contextvars.copy_context()
        self.context = self.base.copy()


class _Restore:
    """At a call's close, undo what `adopt` set in the caller's context for a resource.

    So a variable a resource sets around its ``yield`` is back to the caller's value
    after the call, as after a ``with`` block. A token made in another task's context
    (a branch that has finished) has nothing to undo here.
    """

    __slots__ = ("tokens",)

    def __init__(self, tokens: list[contextvars.Token[Any]]) -> None:
        self.tokens = tokens

    def undo(self) -> None:
        for token in reversed(self.tokens):
            with contextlib.suppress(ValueError):  # made in another context
                token.var.reset(token)


def keep(
    exits: list[tuple[Step, Any]],
    step: Step,
    base: contextvars.Context,
    changed: contextvars.Context,
) -> None:
    """Adopt what resource *step*'s set-up set; undo it when *exits* close."""
    tokens = adopt(base, changed)
    if tokens:
        exits.append((step, _Restore(tokens)))


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

    Values are created lazily on first use, once. Each is created in a *home task* of its
    own, not in the task of the call that first needed it: a caller that is cancelled (a
    deadline, a disconnect) only stops waiting, the creation goes on, and the next caller
    gets the value. An async resource stays in its home task from setup to teardown, so a
    provider that holds a task group or cancel scope across its ``yield`` works whichever
    call opened it and whichever task closes the scope. Resources are closed by `close`
    in reverse order of setup.
    """

    __slots__ = ("cache", "closed", "exits", "keepalive", "scope", "starting")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.cache: dict[Hashable, Any] = {}
        self.exits: list[tuple[Step, Any]] = []
        self.starting: dict[Hashable, _Start] = {}
        self.keepalive: list[Any] = []
        self.closed = False

    async def create(self, step: Step, key: Hashable, make: Callable[[], Any]) -> Any:
        """Create the value of *step* once, in its home task; concurrent users share it."""
        start = self.starting.get(key)
        if start is None:
            if key in self.cache:
                return self.cache[key]
            if self.closed:
                raise RuntimeError(
                    f"the {self.scope.name} scope is closed; {step.name} cannot start"
                )
            start = self.starting[key] = _Start(step.name)
            chain = (*_creating.get(), start)
            _spawn(lambda: self._home(step, key, make, start, chain))
        elif start in _creating.get():  # a run made while it starts needs it again
            raise _reentrant(_creating.get(), start, self.scope)
        start.waiters += 1
        try:
            await start.done.wait()
        except BaseException:  # this caller stops waiting (cancelled); the start goes on
            start.waiters -= 1
            if start.done.is_set() and not start.waiters:
                start.report(step, self.scope)  # it failed, but nobody is left to see it
            raise
        start.waiters -= 1
        if start.error is not None:
            start.reported = True
            raise start.error
        return start.value

    async def _home(
        self,
        step: Step,
        key: Hashable,
        make: Callable[[], Any],
        start: _Start,
        chain: tuple[_Start, ...],
    ) -> None:
        """The home task of one value: create it; for an async resource, hold and close it.

        *chain* is the values being created in the first caller's logical chain, this one
        last: what runs here (and the home tasks and worker threads it starts) sees it.
        """
        _creating.set(chain)
        try:
            if step.kind in _HELD:
                obj = make()
                if step.awaits:  # an async factory of the context manager: await, then enter
                    with start.abort:
                        obj = await obj
                    if start.abort.cancelled_caught:
                        self._settle(key, step, start, None, self._closed_while_starting(step))
                        return
                holder = _Holder(step, obj, hold_shielded=False)
                start.abort = holder.abort
                holder.on_open = lambda: self._settle(key, step, start, holder.value, None)
                self.exits.append((step, holder))  # closed in setup order with the rest
                await holder.run()  # returns once the resource is closed (or failed to open)
                if not holder.opened:
                    self.exits.remove((step, holder))
                    self._settle(key, step, start, None, holder.error)
                return
            value: Any = None
            with start.abort:  # cancelled only by `close`; the scope swallows that
                value = await produce(self, step, make)
        except BaseException as error:  # a home task has nobody to raise to
            self._settle(key, step, start, None, error)
            return
        if start.abort.cancelled_caught:
            self._settle(key, step, start, None, self._closed_while_starting(step))
            return
        self._settle(key, step, start, value, None)

    def _closed_while_starting(self, step: Step) -> RuntimeError:
        return RuntimeError(f"the {self.scope.name} scope closed while {step.name} was starting")

    def _settle(
        self, key: Hashable, step: Step, start: _Start, value: Any, error: BaseException | None
    ) -> None:
        del self.starting[key]
        if error is None:
            self.keepalive.append(step.fn)
            self.cache[key] = value
            start.value = value
        elif isinstance(error, anyio.get_cancelled_exc_class()):
            start.error = self._closed_while_starting(step)
        else:
            start.error = error
            if not start.waiters:
                start.report(step, self.scope)
        start.done.set()

    async def close(self, exc: BaseException | None) -> list[BaseException]:
        """Close every resource in reverse order, shielded; return the errors raised.

        Values still being created are stopped first; a resource that opened anyway is
        closed with the rest.
        """
        self.closed = True
        with anyio.CancelScope(shield=True):
            while self.starting:
                start = next(iter(self.starting.values()))
                start.abort.cancel()
                await start.done.wait()
        errors = await close_resources(self.exits, exc)
        self.cache.clear()
        self.keepalive.clear()
        return errors


class _Start:
    """A shared value under creation in its home task: what its waiters wait for."""

    __slots__ = ("abort", "done", "error", "name", "reported", "value", "waiters")

    def __init__(self, name: str) -> None:
        self.name = name
        self.abort = anyio.CancelScope()
        self.done = anyio.Event()
        self.waiters = 0
        self.value: Any = None
        self.error: BaseException | None = None
        self.reported = False

    def report(self, step: Step, scope: Scope) -> None:
        """Log a failure that no caller received (every caller stopped waiting)."""
        if self.error is None or self.reported:
            return
        self.reported = True
        logger.error(
            "resolvent: %s (%r) failed to start; the next call will try again",
            step.name,
            scope,
            exc_info=self.error,
        )


_creating: contextvars.ContextVar[tuple[_Start, ...]] = contextvars.ContextVar(
    "resolvent_creating", default=()
)
"""The shared values whose creation this logical chain of calls is part of, outermost first."""


def _reentrant(chain: tuple[_Start, ...], start: _Start, scope: Scope) -> ResolventError:
    """The error for a run, made while *start* is being created, that needs it again."""
    names = [s.name for s in chain[chain.index(start) :]]
    value, runner = start.name, names[-1]
    return ResolventError(
        f"re-entrant run forms a cycle: {' -> '.join([*names, value])}.\n"
        f"  {value} ({scope!r}) is still being created, and a container.run or session.run "
        f"made by {runner} while it is created needs {value}: it would wait for itself forever.\n"
        f"  fix: do not run, from inside {runner}, a function that needs {value}; declare what "
        f"{runner} needs as Resolve(...) parameters (a real cycle is then reported at compile "
        f"time), or make that run later, from a consumer of {value}"
    )


_home_tasks: set[asyncio.Task[None]] = set()


async def _await(fn: Callable[[], Awaitable[None]]) -> None:
    await fn()


_interruptible_home: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]] | None = None


def _interruptible() -> Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]:
    """What runs a home task on trio: a system task that Ctrl-C interrupts.

    trio shields system tasks from KeyboardInterrupt, so a set-up that blocks (no
    checkpoint) would ignore Ctrl-C until it returns; in the caller's task it would be
    interrupted at once. The interrupt reaches the callers waiting for the value.
    """
    global _interruptible_home
    if _interruptible_home is None:
        import trio

        @trio.lowlevel.disable_ki_protection
        async def home(fn: Callable[[], Awaitable[None]]) -> None:
            await fn()

        _interruptible_home = home
    return _interruptible_home


def _spawn(fn: Callable[[], Awaitable[None]]) -> None:
    """Start *fn* in a task of its own that no caller's cancellation reaches.

    Its only outer cancellation is the event loop's shutdown. The task inherits a copy
    of the caller's context variables on both backends.
    """
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: anyio's other backend
        import trio

        trio.lowlevel.spawn_system_task(_interruptible(), fn, context=contextvars.copy_context())
        return
    task: asyncio.Task[None] = loop.create_task(_await(fn))
    _home_tasks.add(task)  # the loop keeps only a weak reference
    task.add_done_callback(_home_tasks.discard)


async def produce(scope: LiveScope, step: Step, make: Callable[[], Any]) -> Any:
    """Run *step*'s function (via *make*) and, for a resource, enter it in *scope*."""
    kind = step.kind
    if kind is Kind.ASYNC:
        value = await make()
    elif kind is Kind.SYNC:
        # Abandoned if its scope closes while it blocks: closing does not wait for it.
        value = make() if step.inline else await abandonable(make)
    else:
        obj = make()
        if step.awaits:  # an async factory of a context manager
            obj = await obj
        return await enter(scope.exits, step, obj)
    if value.__class__ in QUESTION_KINDS:
        raise ResolventError(
            f"{step.name} ({step.scope!r}) returned a question; "
            "only CALL-scoped resolvers may ask.\n"
            f"  fix: move the question into a CALL-scoped resolver that depends on {step.name}"
        )
    return value


class Exits(list[tuple["Step", Any]]):
    """A call scope's open resources, closed in reverse order.

    Entered with `open` (``async with call``), the call holds a cancel scope below every
    resource it sets up, so teardown is shielded by flipping that scope's ``shield``
    rather than by entering a new scope: a provider's own cancel scope (a task group
    spanning its ``yield``) is then left at the depth it was entered. On asyncio it holds
    only the mark where that scope goes once a finalizer needs it (`resolvent._shield`).
    A call that runs branches concurrently or under a deadline (which open scopes of their
    own around resolvers) holds each resource in a task of its own in a task *group*
    instead, so a resource's setup and teardown always share one task and one scope depth.
    Otherwise an async resource that may hold a cancel scope across its ``yield`` gets a
    task of its own all the same (`hold`), wherever it is resolved from.
    """

    __slots__ = ("closed", "deadline", "group", "guard")

    def __init__(self) -> None:
        super().__init__()
        self.deadline = math.inf  # the call's `call_timeout` deadline, once resolving
        self.group: TaskGroup | None = None
        self.guard: Any = None  # from `begin`: a mark (asyncio) or an entered cancel scope
        self.closed = False  # set when the call's block ends; see `enter`

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
        if guard.__class__ is tuple:  # shielded once needed (see `resolvent._shield`)
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


_EMPTY_CONTEXT = contextvars.Context()


class _Holder:
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
                    await _finalize(self.step, self.obj, self.exc)
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
) -> _Holder:
    """Set resource *obj* up in a task of its own, which holds it until it is closed.

    An async resource that keeps a cancel scope or task group open across its ``yield``
    must be torn down in the task, and at the depth, where it was set up. A holder task
    is that home, whatever task resolves the call and under whatever deadline of its
    own; and the call's cancellation does not reach into the resource while it is held
    (a task group's background task keeps running until the teardown). A resource found
    to hold no scope is marked in its *plain* cell (`plain_cell`), and later calls set it
    up in their own task (cheaper). Returns the open holder; the caller appends it to
    *exits* (it closes like the generator: see `_Holder.athrow`). If the caller is
    cancelled once the resource opened, it is appended here, to be closed with the call.
    """
    holder = _Holder(step, obj)
    group = exits.group if isinstance(exits, Exits) else None
    if group is not None:
        group.start_soon(holder.run)
    else:
        _spawn(holder.run)
    try:
        await holder.settled.wait()
    except BaseException:
        # Cancelled (a deadline, a failed sibling branch): stop the setup too. If it
        # finished anyway, the resource is open and is closed with the call.
        if not holder.opened:
            deadline = exits.deadline if isinstance(exits, Exits) else math.inf
            holder.expired = anyio.current_time() >= deadline
            holder.abort.cancel()
        with anyio.CancelScope(shield=True):
            await holder.settled.wait()
        if holder.opened:
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
        await _opened_too_late(step, holder)
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
                holder = await hold(exits, step, obj, plain)
                exits.append((step, holder))
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
    holder = await hold(exits, step, obj)
    exits.append((step, holder))
    return holder.value


async def _opened_too_late(step: Step, obj: Any) -> None:
    """A resolution still running when its call's block ended opened *step*: close it now
    (nobody else would) and fail that resolution."""
    errors = await close_resources([(step, obj)], None)
    error = ResolventError(
        f"{step.name} opened after its call scope had closed (the `async with` block of the "
        "call ended while a task was still resolving in it); it was closed again at once.\n"
        "  fix: finish every use of a call inside its block, e.g. with a task group opened "
        "inside `async with container.call() as call:`"
    )
    settle(error, errors)
    raise error


async def _open(
    step: Step, obj: Any, holder: _Holder | None = None, *, shared: bool = False
) -> Any:
    """Run a resource's setup and return its value.

    A *shared* (APP or SESSION) sync resource's setup is abandoned when its scope closes
    while the setup blocks; a CALL one only at the call's deadline.
    """
    kind = step.kind
    if kind is Kind.ASYNC_GENERATOR:
        try:
            return await obj.__anext__()
        except StopAsyncIteration:
            raise RuntimeError(f"{step.name} finished without yielding a value") from None
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
            _finalize_sync(self.step, self.obj, None)
        except BaseException as error:
            logger.failed(
                "resolvent: teardown of %s (abandoned setup) failed", self.step.name, error=error
            )


def _enter_sync(step: Step, obj: Any) -> Any:
    return _next_or_fail(step, obj) if step.kind is Kind.GENERATOR else obj.__enter__()


def _next_or_fail(step: Step, gen: Any) -> Any:
    try:
        return next(gen)
    except StopIteration:
        raise RuntimeError(f"{step.name} finished without yielding a value") from None


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
                await _finalize(step, obj, exc)
            except BaseException as error:
                logger.failed("resolvent: teardown of %s failed", step.name, error=error)
                errors.append(error)
    return errors


async def close_guarded(
    exits: list[tuple[Step, Any]], exc: BaseException | None, guard: Any
) -> list[BaseException]:
    """`close_resources` under *guard*, a cancel scope entered below every resource when
    the lazy shield is not available (`resolvent._shield.eager`): shielded, then left."""
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
    `resolvent._shield.begin` before the first setup: on asyncio a mark where the teardown
    shield goes once a finalizer needs it (see `resolvent._shield`); else a cancel scope
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
                        finalizer = _finalize(step, obj, exc)
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
    logger.failed("resolvent: teardown of %s failed", step.name, error=error)
    errors.append(error)


_YIELDED_TWICE = "{} yielded more than once; a provider yields exactly one value"
_UNSTARTED: Any = object()  # a finalizer `close_rest` has yet to make and start


async def _finalize(step: Step, obj: Any, exc: BaseException | None) -> None:
    """Tear one resource down; the scope's own exception *exc* coming back is no error."""
    if isinstance(obj, _Holder):
        await obj.close(exc)
        return
    if obj.__class__ is _Restore:
        obj.undo()
        return
    try:
        kind = step.kind
        if kind is Kind.ASYNC_GENERATOR:
            await _finalize_async_generator(step, obj, exc)
        elif kind is Kind.ASYNC_CONTEXT_MANAGER:
            await obj.__aexit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        elif step.inline:
            _finalize_sync(step, obj, exc)
        else:
            await anyio.to_thread.run_sync(_finalize_sync, step, obj, exc)
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


def _finalize_sync(step: Step, obj: Any, exc: BaseException | None) -> None:
    if obj.__class__ is InContext:
        obj.context.run(_finalize_sync, step, obj.obj, exc)
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
