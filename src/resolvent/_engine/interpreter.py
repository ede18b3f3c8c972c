"""The interpreter: resolves a plan step by step or in concurrent branches, for what the
generated code does not do (concurrency, rounds, a shared call scope). It never generates code."""

from __future__ import annotations

import contextvars
import functools
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
from anyio.lowlevel import checkpoint

from .._reading.annotations import NO_DEFAULT
from .._reading.kinds import Kind
from .._runtime.context import adopt, keep
from .._runtime.home import asyncio_loop
from .._runtime.resources import enter
from .._runtime.sharing import MAKING, MISSING, Sharing, claim, release
from .._runtime.teardown import Exits
from .._vocabulary.errors import AnswerPending
from .._vocabulary.questions import QUESTION_KINDS, Answered, as_outcome
from .._vocabulary.scopes import SLOTS, Scope

if TYPE_CHECKING:
    from .._graph.plan import Input, Plan, Step
    from .._runtime.rounds import ask
    from .._runtime.sharing import CallLike
    from .._runtime.threads import in_thread
else:

    async def ask(*args: Any) -> Any:
        """The first question loads `_runtime.rounds` (asking) and puts its `ask` in this
        name, so later questions call it through a plain global, as if imported at the top
        (an import statement run per question cost about 11,000 instructions)."""
        global ask
        from .._runtime.rounds import ask

        return await ask(*args)

    async def in_thread(*args: Any) -> Any:
        """The first worker-thread step loads `_runtime.threads`, as the first question does."""
        global in_thread
        from .._runtime.threads import in_thread

        return await in_thread(*args)


__all__ = ("interpret", "interpret_alone", "run_concurrently", "run_step")

PENDING: Any = object()


def _consume(value: Any, item: Input, consumer: str) -> Any:
    if item.outcome is not None:
        return item.outcome.convert(as_outcome(value))
    if value.__class__ is Answered:
        return value.unwrap(item.name, consumer)
    return value


def _kwargs(
    inputs: tuple[Input, ...],
    vals: dict[int, Any],
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    consumer: str,
) -> dict[str, Any] | None:
    kwargs: dict[str, Any] = {}
    for item in inputs:
        if item.source == "step":
            value = vals[item.step]
            if value is PENDING:
                return None
            if item.outcome is not None or value.__class__ is Answered:
                value = _consume(value, item, consumer)
            kwargs[item.name] = value
        elif item.source == "arg":
            kwargs[item.name] = _argument(item, args)
        else:
            kwargs[item.name] = values[item.value_type]
    return kwargs


def _argument(item: Input, args: Mapping[str, Any]) -> Any:
    """The call argument *item* reads, else its default; a KeyError names a missing one."""
    if item.arg in args:
        return args[item.arg]
    if item.default is not NO_DEFAULT:
        return item.default
    raise KeyError(item.arg)


async def run_step(
    step: Step,
    vals: dict[int, Any],
    call: CallLike,
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    scopes: tuple[Any, ...],
) -> Any:
    if step.may_ask:
        rounds = call.rounds
        if rounds is not None and step.wire_key in rounds.pending:
            # Asked in this round already (the generated code that ran before stopped
            # at it: see `Call._resolve`): its resolver does not run again.
            return PENDING
    # `_kwargs` and `_argument`, inline: a Python call per input costs more than the rest.
    kwargs: dict[str, Any] = {}
    for item in step.inputs:
        source = item.source
        if source == "step":
            value = vals[item.step]
            if value is PENDING:
                return PENDING
            if item.outcome is not None or value.__class__ is Answered:
                value = _consume(value, item, step.name)
            kwargs[item.name] = value
        elif source == "arg":
            name = item.arg
            if name in args:
                kwargs[item.name] = args[name]
            elif item.default is not NO_DEFAULT:
                kwargs[item.name] = item.default
            else:
                raise KeyError(name)  # `explain` turns it into advice
        else:
            kwargs[item.name] = values[item.value_type]
    if step.scope is not _CALL:
        live = scopes[_SLOTS[step.scope]]
        assert live is not None
        value = live.cache.get(step.key, MISSING)
        if value is MISSING:
            value = await live.create(step, step.key, functools.partial(step.fn, **kwargs))
        return value
    key = step.key
    cache = call.cache
    value = cache.get(key, MISSING)
    if value is not MISSING:
        return value
    sharing = call.sharing
    assert sharing is not None
    starting = sharing.starting
    if key in starting or call.flight is not None:
        value = await claim(call, step)  # another resolution may be making it
        if value is not MAKING:
            return value  # it did
        if step.may_ask:
            rounds = call.rounds
            if rounds is not None and step.wire_key in rounds.pending:  # it asked: not twice
                release(call, key, None)
                return PENDING
    else:  # `claim`'s answer when nobody else makes it, without its coroutine
        starting[key] = MAKING
    try:
        kind = step.kind
        if kind is _ASYNC:
            value = await step.fn(**kwargs)
        elif kind is _SYNC:
            value = (
                step.fn(**kwargs)
                if step.inline
                else await in_thread(functools.partial(step.fn, **kwargs))
            )
        else:
            obj = step.fn(**kwargs)
            if step.awaits:  # an async factory of a context manager
                obj = await obj
            value = await enter(call.exits, step, obj)
        if step.may_ask and value.__class__ in QUESTION_KINDS:
            try:
                value = await ask(call, step, value)
            except AnswerPending:
                release(call, key, None)
                return PENDING
    except BaseException as error:
        release(call, key, error)
        raise
    cache[key] = value
    creation = starting.pop(key)  # `release`, inline
    if creation is not MAKING:
        creation.done.set()
    return value


_CALL = Scope.CALL  # module globals: read per step, cheaper than an enum class attribute
_SLOTS = SLOTS
_ASYNC = Kind.ASYNC
_SYNC = Kind.SYNC


async def interpret(
    plan: Plan,
    call: CallLike,
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    scopes: tuple[Any, ...],
    *,
    concurrent: bool,
) -> dict[str, Any]:
    """Resolve *plan* step by step (or concurrently) and return the injected kwargs.

    *scopes* is the scopes tuple generated code takes (`resolvent._vocabulary.scopes.SLOTS`),
    of which the interpreter reads the live scopes but CALL's: its call scope is *call*,
    which for a plan started with none is a memo for this call only."""
    sharing = call.sharing
    if sharing is None:
        sharing = call.sharing = Sharing()
        sharing.starting = {}
    starting = sharing.starting
    # The values by step index (a slot: see `Step`); a step's inputs come before it.
    vals: dict[int, Any] = {}
    if concurrent and len(plan.steps) > 1:
        vals = dict.fromkeys(plan.branches.steps, MISSING)
        await run_concurrently(plan, vals, call, args, values, scopes)
    else:
        cache = call.cache
        for step in plan.steps:
            try:
                if step.kind is not _ASYNC or step.scope is not _CALL or step.may_ask:
                    vals[step.index] = await run_step(step, vals, call, args, values, scopes)
                    continue
                # `run_step` of an async CALL resolver that never asks, inline: its
                # coroutine cost more than the resolver's own.
                kwargs: dict[str, Any] = {}
                for item in step.inputs:
                    source = item.source
                    if source == "step":
                        value = vals[item.step]
                        if value is PENDING:
                            break
                        if item.outcome is not None or value.__class__ is Answered:
                            value = _consume(value, item, step.name)
                        kwargs[item.name] = value
                    elif source == "arg":
                        name = item.arg
                        if name in args:
                            kwargs[item.name] = args[name]
                        elif item.default is not NO_DEFAULT:
                            kwargs[item.name] = item.default
                        else:
                            raise KeyError(name)  # `explain` turns it into advice
                    else:
                        kwargs[item.name] = values[item.value_type]
                else:
                    key = step.key
                    value = cache.get(key, MISSING)
                    if value is not MISSING:
                        pass
                    elif key in starting or call.flight is not None:
                        value = await run_step(step, vals, call, args, values, scopes)
                    else:
                        starting[key] = MAKING  # claimed: see `run_step`
                        try:
                            value = await step.fn(**kwargs)
                        except BaseException as failure:
                            release(call, key, failure)
                            raise
                        cache[key] = value
                        creation = starting.pop(key)
                        if creation is not MAKING:
                            creation.done.set()
                    vals[step.index] = value
                    continue
                vals[step.index] = PENDING  # an input waits for an answer
            except BaseException as exc:
                from .._runtime.failures import explain  # only when something failed

                error = explain(exc, plan, step.index, args, values)
                if error is exc:
                    raise
                raise error from exc
    rounds = call.rounds
    if rounds is not None and rounds.pending:
        rounds.raise_if_pending()
    injected = _kwargs(plan.inputs, vals, args, values, plan.name)
    assert injected is not None
    return injected


async def interpret_alone(
    plan: Plan,
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    scopes: tuple[Any, ...],
) -> dict[str, Any]:
    """A cold plan's first calls: `interpret` with nothing shared (no call scope, no step
    that asks, CALL steps plain functions on the loop), nothing to claim or memoize."""
    vals: dict[int, Any] = {}  # by step index (a slot: see `Step`)
    call_scope, is_async, slots = Scope.CALL, Kind.ASYNC, SLOTS
    for step in plan.steps:
        try:
            order = step.positional
            if order is not None:  # an async CALL step's values passed in order
                # Spelled out by count: a call with ``*args`` cost about 1,000 instructions
                # more (first calls of 1,000 handlers: 131 M against 107 M).
                fn = step.fn
                if len(order) == 1:
                    vals[step.index] = await fn(vals[order[0]])
                elif not order:
                    vals[step.index] = await fn()
                elif len(order) == 2:
                    vals[step.index] = await fn(vals[order[0]], vals[order[1]])
                else:
                    vals[step.index] = await fn(*map(vals.__getitem__, order))
                continue
            kwargs = _kwargs(step.inputs, vals, args, values, step.name)
            assert kwargs is not None  # nothing is pending: no step asks
            if step.scope is call_scope:
                value = step.fn(**kwargs)
                if step.kind is is_async:
                    value = await value
            else:
                live = scopes[slots[step.scope]]
                assert live is not None
                value = live.cache.get(step.key, MISSING)
                if value is MISSING:
                    made = functools.partial(step.fn, **kwargs)
                    value = await live.create(step, step.key, made)
        except BaseException as exc:
            from .._runtime.failures import explain  # only when something failed

            error = explain(exc, plan, step.index, args, values)
            if error is exc:
                raise
            raise error from exc
        vals[step.index] = value
    injected: dict[str, Any] = {}
    for item in plan.inputs:  # `_kwargs`, for the usual handler's inputs, inline
        if item.source != "step" or item.outcome is not None:
            every = _kwargs(plan.inputs, vals, args, values, plan.name)
            assert every is not None  # nothing is pending: no step asks
            return every
        injected[item.name] = vals[item.step]
    return injected


async def run_concurrently(
    plan: Plan,
    vals: dict[int, Any],
    call: CallLike,
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    scopes: tuple[Any, ...],
) -> None:
    """Run independent branches at once; a step starts as soon as its inputs are ready.

    Until two steps that may wait are ready at once (a chain, the root of a diamond, a
    plain function run on the loop, which nothing could overlap), each runs in the
    calling task, as the interpreter runs it step by step, and no task group is entered.
    Then it enters one, starts a branch task for each ready step but the first and runs
    that one's branch itself: a branch that finishes a step goes on with a step it made
    ready (a plain function on the loop first) and starts a task for each other one, so
    a step never waits for another branch to start it, and a task is made only for a
    step that can overlap the one its maker goes on with.

    A call opened with ``async with`` holds each resource in a task of its own (see
    `Exits`), so resources set up in a branch are torn down in the task that set them
    up. If a step fails, the others are cancelled and the first failure is raised as
    itself (later ones are attached as notes). Every branch task runs in a copy of the
    context of the task that started it; what a step sets there is seen by every step
    that starts after it finishes, in any branch, and by the calling task once all are
    done, in the order the steps finished (the last one wins). What the calling task
    took from the others while it ran its own branch is undone first, so that what a
    resource set is undone at the call's close back to the caller's value.
    """
    shape = plan.branches  # worked out once per plan
    steps, dependents = shape.steps, shape.dependents  # by index (a slot: see `Step`)
    waiting = shape.waiting.copy()  # counted down as inputs become ready
    ready = deque(shape.first)
    exits = call.exits
    failures: list[BaseException] = []
    loop = shape.on_loop

    def failed(index: int, exc: BaseException) -> NoReturn:
        """Raise step *index*'s failure *exc* as `explain` says, kept in `failures`."""
        from .._runtime.failures import explain  # only when something failed

        error = explain(exc, plan, index, args, values)
        if not isinstance(error, anyio.get_cancelled_exc_class()):
            failures.append(error)
        if error is exc:
            raise exc
        raise error from exc

    async def run(index: int) -> None:
        try:
            vals[index] = await run_step(steps[index], vals, call, args, values, scopes)
        except BaseException as exc:
            failed(index, exc)

    def finish(index: int, made: list[int]) -> None:
        for dependent in dependents[index]:
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                made.append(dependent)

    if shape.call_resources and not (isinstance(exits, Exits) and exits.group is not None):
        # No task group holds the call's resources (a call made concurrent after it
        # opened): a branch's resource could not close in the task that opened it.
        for step in plan.steps:
            await run(step.index)
        ready.clear()
        return
    # Until two steps could run at once, each runs here (no task, no task group).
    while ready:
        if len(ready) == 1:
            index = ready.popleft()
        else:  # what runs on the loop first: it could not overlap the others anyway
            index = next((i for i in ready if i in loop), -1) if loop else -1
            if index < 0:
                break
            ready.remove(index)
        await run(index)
        made: list[int] = []
        finish(index, made)
        ready.extend(made)
    if not ready:
        return

    # What steps set in branch tasks' contexts, in the order they finished:
    # (step index, context before, context after).
    changes: list[tuple[int, contextvars.Context, contextvars.Context]] = []
    copy_context = contextvars.copy_context

    # What the calling task adopted from the branch tasks while it ran a branch itself:
    # undone before every change is adopted in order below, so that a resource's change
    # is undone at the call's close back to the caller's own value.
    adopted: list[contextvars.Token[Any]] = []

    async def branch(
        index: int, seen: int, tokens: list[contextvars.Token[Any]] | None = None
    ) -> None:
        # What this task runs next, the last first: the plain functions on the loop it
        # made ready (nothing could overlap them), then at most one step that waits,
        # first in the list. Each other step it makes ready gets a task of its own.
        # *tokens* is `adopted` when this is the calling task.
        here = [index]
        waits = True  # whether one in `here` waits
        while here:
            index = here.pop()
            if not here:
                waits = False
            while seen < len(changes):  # what finished since, in order (its own too)
                set_here = adopt(*changes[seen][1:])
                if tokens is not None:
                    tokens += set_here
                seen += 1
            base = copy_context()
            try:  # `run`, in line: a coroutine fewer per step
                vals[index] = await run_step(steps[index], vals, call, args, values, scopes)
            except BaseException as exc:
                failed(index, exc)
            changed = copy_context()
            if changed != base:
                changes.append((index, base, changed))
            for other in dependents[index]:  # `finish`, in line
                left = waiting[other] - 1
                waiting[other] = left
                if left:
                    continue
                if other in loop:  # a plain function on the loop: nothing overlaps it
                    here.append(other)
                elif waits:
                    group.start_soon(branch, other, seen, name=_BRANCH)
                else:
                    here.insert(0, other)
                    waits = True

    try:
        async with anyio.create_task_group() as group:
            # The first ready step's branch runs here: a task fewer, and the calling
            # task would only wait otherwise.
            first = ready.popleft()
            while ready:
                group.start_soon(branch, ready.popleft(), 0, name=_BRANCH)
            # Every branch starts before any goes on past its first wait, as when each
            # had a task: asyncio runs a task started here before this one resumes,
            # trio runs a turn's tasks in either order, so there this one waits a turn.
            if asyncio_loop() is None:
                await checkpoint()
            await branch(first, 0, adopted)
    except BaseExceptionGroup as group_error:
        from .._runtime.failures import first_failure  # only when something failed

        raise first_failure(group_error, failures) from None
    finally:
        for token in reversed(adopted):
            token.var.reset(token)
    for index, base, changed in changes:
        step = steps[index]
        if step.kind.is_resource:  # undone when the call closes
            keep(exits, step, base, changed)
        else:
            adopt(base, changed)


_BRANCH = "resolvent branch"  # a branch task's name: anyio reads a function's name otherwise
