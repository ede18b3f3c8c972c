"""Launching a plan (`Launcher`): the one place that decides how a function's plan starts
and runs for a caller with no scope object of its own: cold (interpreted) or hot (its
generated code), which generated variant (``entry``, ``run``, ``direct``, ``kept``), with
which calling convention, whether overrides in effect or the container's settings send it
to a call scope instead, and the container's table of checked starts (the ready table)
that a caller's hot path reads. Here too what a plan starts with: its tiering (a plan's
first calls interpreted, then its generated code: `cold_runner`), the `PlanCode` plans are
built with, and whether the scopes it needs are open (`check_scopes`). It never compiles a
plan, and never generates or interprets code itself."""

# A launcher reads its container's private state (as a call does): they are one unit.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from .._engine.interpreter import interpret, interpret_alone
from .._graph.plan import Plan, Step, direct_shape
from .._runtime.sharing import Sharing
from .._vocabulary.questions import Asker
from .._vocabulary.scopes import CALL_SLOT, SLOTS, Scope

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager
    from contextvars import ContextVar

    from .._graph.plan import PlanCode
    from .._runtime.cache import LiveScope
    from .._runtime.rounds import Rounds

    class Remembers(Protocol):
        """What a launcher asks of its container's plan cache (`PlanCache`)."""

        def remember(self, fn: Any, start: Starter, /) -> None: ...

    class Container(Protocol):
        """What a launcher reads of its container (`resolvent.Container`): its own, not
        public; a launcher and its container are one unit, as a call and its container."""

        _app: LiveScope | None
        _ready: dict[Any, Starter]
        _concurrent: bool
        _call_timeout: float | None
        _overridden: list[int]
        _override_var: ContextVar[Any]

        @property
        def _plans(self) -> Remembers: ...
        def _current(self, plan: Plan, /) -> Plan: ...
        def call(self, *, concurrent: bool | None = None) -> AbstractAsyncContextManager[Any]: ...

    class RunsHere(Protocol):
        """What `PlanCode.run_in` asks of a call scope (`resolvent.Call`)."""

        def run_here(self, plan: Plan, kwargs: dict[str, Any], /) -> Awaitable[Any]: ...


__all__ = (
    "EMPTY",
    "HOT_AFTER",
    "PLAN_CODE",
    "Launcher",
    "Starter",
    "app_and_call",
    "check_scopes",
    "cold_runner",
    "cold_shape",
    "is_cold",
    "on_hot",
    "run_branches",
)

Starter = Callable[..., Coroutine[Any, Any, Any]]
"""What starts a checked plan from the ready table: `Container.run` calls its own entries as
``start(kwargs)``; an integration's entries, keyed by an object of its own, take what
that integration passes."""

EMPTY: Mapping[Any, Any] = MappingProxyType({})
"""No arguments or framework values: what a call given none passes its plan."""

HOT_AFTER = 2
"""How many calls of a plan `Container.run` interprets before generating its code."""

_OPEN = frozenset({Scope.APP, Scope.CALL})
"""The scopes a start with no scope object runs in: the container's, and its own call."""

_BETWEEN = (None,) * (len(Scope) - 2)  # the entries between APP (first) and CALL (last)


def app_and_call(app: object, call: object = None) -> tuple[object, ...]:
    """A scopes tuple (`resolvent._vocabulary.scopes.SLOTS`) where no scope is open but
    APP's, *app* (or None), and CALL's, *call*: what a plan started with no scope object
    between the two runs in."""
    return (app, *_BETWEEN, call)


def check_scopes(plan: Plan, scopes: tuple[Any, ...]) -> None:
    """Refuse *plan* if a scope it needs is not open in *scopes*, the scopes tuple it would
    run in (see `resolvent._vocabulary.scopes.SLOTS`): every scope but CALL lives in an
    open container, and in a scope of its own."""
    for scope in plan.scopes:  # on every call's path: no enum attribute, no hashing
        if scope is not _CALL and (scopes[SLOTS[scope]] is None or scopes[_APP_SLOT] is None):
            from .._runtime.failures import not_open  # what a failure says: loaded by one

            raise not_open(plan, scopes)


_CALL, _APP_SLOT = Scope.CALL, SLOTS[Scope.APP]


class Launcher:
    """How one caller starts one function's plan, with no scope object when it can.

    ```python
    launcher = Launcher(container, plan)            # an integration's, keyed by itself
    start = launcher.ready.get(launcher)            # the hot path: one look-up
    start = start or launcher.prepare()             # else checked now (None: take a call scope)
    await start(kwargs, values, launcher.scopes(kept), plan.fn)
    ```

    A start takes ``(kwargs)`` when *values* is False (`Container.run`, a tool that takes
    nothing from its request), else ``(kwargs, values, scopes, body)``: the framework
    values, the scopes it runs in as one tuple (`scopes`: the container's APP scope and,
    in the CALL scope's place, the `Kept` that collects the CALL resources when *keep*,
    else None), and the plan's function. `prepare` checks the plan
    and puts its start in the container's ready table (`ready`, under *key*: the launcher
    itself unless given), which the container empties whenever an entry may be wrong (a
    new provider or value type, ``concurrent`` or ``call_timeout`` set, the APP scope
    closing); a plan an override block compiled is started but never kept there. A plan
    still cold is interpreted for its first calls, then its start in the table becomes its
    generated code.

    Args:
        container: the container whose plan it starts.
        plan: the plan, as compiled for the caller's function.
        key: the ready table's key for this start (`Container.run` keys by function).
        values: whether the start takes framework values (the four-argument convention).
        keep: leave the CALL resources open in a `Kept` the caller closes later (a web
            response's); else the generated code tears them down itself.
        asker: the caller can answer questions, so a plan that may ask takes a call scope.
        scoped: with *values* False, start a plan that needs a call scope in one of its
            own (`Container.run`), instead of answering None.
    """

    __slots__ = (
        "asker",
        "checked",
        "cold",
        "container",
        "count",
        "keep",
        "kept",
        "key",
        "plan",
        "ready",
        "refused",
        "scoped",
        "settles",
        "start",
        "values",
    )

    def __init__(
        self,
        container: Container,
        plan: Plan,
        *,
        key: Any = None,
        values: bool = True,
        keep: bool = False,
        asker: bool = False,
        scoped: bool = False,
    ) -> None:
        self.container = container
        self.plan = plan
        self.key = self if key is None else key
        self.values, self.keep, self.asker, self.scoped = values, keep, asker, scoped
        self.ready: dict[Any, Starter] = container._ready
        self.start: Starter | None = None
        self.kept = False  # whether `start` takes a `Kept` as its *call*
        self.settles = False  # whether a resource of its plan settles the call's writes
        self.count = 0  # cold calls so far (a start of no values: see `_cold`)
        self.cold: Starter | None = None  # `_cold`, bound once
        self.checked: Plan | None = None  # the plan `direct` last judged, and its answer
        self.refused = False

    def scopes(self, kept: Any = None) -> tuple[Any, ...]:
        """The scopes a start runs in, as the tuple it takes (see
        `resolvent._vocabulary.scopes.SLOTS`): the container's APP scope as open now (or
        None), no scope between APP and CALL (a plan that needs one takes a scope object),
        and *kept* (a `Kept`, when `kept` says the start takes one, else None) as the
        CALL scope."""
        return (self.container._app, *_BETWEEN, kept)

    @property
    def blocks(self) -> list[int]:
        """The container's open override blocks, in every context (a list as a counter):
        the same object for its life; on a hot path, ``blocks and var.get() is not None``
        (with `override_var`) tells that a block applies here, and the start must not."""
        return self.container._overridden

    @property
    def override_var(self) -> Any:
        """The context variable holding the override blocks open in this context."""
        return self.container._override_var

    def direct(self, plan: Plan) -> bool:
        """Whether *plan* can start with no scope object for this caller."""
        if plan.scopes - _OPEN or (plan.needs_call and not direct_shape(plan.steps)):
            return False
        if self.asker and any(step.may_ask for step in plan.steps):
            return False
        return self.values or not plan.value_types

    def prepare(self) -> Starter | None:
        """The start of the current plan (compiled again if providers or the overrides in
        effect changed), checked, and kept in the ready table unless an override compiled
        it; None if it needs a call scope (branches that can overlap, a deadline, a
        SESSION value, a resource that needs one, a question for a caller with an asker).
        A concurrent container's plan whose steps cannot overlap (`Plan.overlaps`)
        starts as it would in a container that is not concurrent: the same code.

        Raises:
            ResolventError: the plan needs APP values and the container is not open.
        """
        container = self.container
        plan = container._current(self.plan)
        if plan is not self.checked:  # what `direct` says of a plan holds for its life
            self.checked, self.refused = plan, not self.direct(plan)
        if (
            container._call_timeout is not None
            or self.refused
            or (container._concurrent and plan.overlaps)
        ):
            self.plan = plan
            if not self.scoped:
                return None
            check_scopes(plan, self.scopes())
            start: Starter = self._in_call
        else:
            check_scopes(plan, self.scopes())
            if plan is not self.plan or self.start is None:
                self.plan, self.start = plan, self._choose(plan)
            elif not self.values and self.start is not self.cold:
                self.start = self._entry(plan)  # bound to the APP scope open now
            start = self.start
        if plan.overrides is None:
            self._keep(start)
        return start

    def _choose(self, plan: Plan) -> Starter:
        self.kept = self.keep and plan.needs_call
        self.count = 0
        if not self.values:
            if is_cold(plan.run_fn):
                # One object, so the ready table's entry can be told by identity.
                self.cold = functools.partial(self._cold, plan)
                return self.cold
            return self._entry(plan)
        from .._vocabulary.markers import is_settling

        self.settles = any(is_settling(step.fn) for step in plan.steps)
        if plan.needs_call:
            start = plan.code.function(plan, "kept") if self.keep else plan.direct_fn
            assert start is not None  # `direct` said so
            return start
        if is_cold(plan.run_fn):  # interpreted until hot: then its generated code
            on_hot(plan, functools.partial(self._hot, plan))
        return plan.run_fn

    def _entry(self, plan: Plan) -> Starter:
        entry: Starter = plan.entry_fn
        if plan.scopes - {Scope.CALL}:  # it takes the scopes: bound to those open now
            return types.MethodType(entry, self.scopes())
        return entry

    def _keep(self, start: Starter) -> None:
        key = self.key
        if key is self:
            self.ready[self] = start
        else:
            self.container._plans.remember(key, start)

    def _swap(self, old: Any, new: Starter) -> None:
        """Put *new* where *old* is in the ready table (a plan turned hot)."""
        ready = self.ready
        with contextlib.suppress(TypeError):  # an unhashable callable object
            if ready.get(self.key) is old:
                ready[self.key] = new

    def _hot(self, plan: Plan, function: Starter) -> None:
        if self.plan is plan and self.start is not None:  # not a plan replaced since
            self._swap(self.start, function)
            self.start = function

    async def _cold(self, plan: Plan, kwargs: dict[str, Any]) -> Any:
        """A cold plan's start with no values: its first `HOT_AFTER` calls through its
        interpreting ``run_fn``, then its generated ``entry`` (only that variant: a plan
        only started so never needs ``run``), which the ready table holds from then on."""
        if self.plan is not plan or self.count < HOT_AFTER:  # not hot, or replaced since
            self.count += 1
            return await plan.run_fn(kwargs, EMPTY, self.scopes(), plan.fn)
        if self.key is self:
            # An integration's plan also runs in call scopes (a request that needs one),
            # which run its ``run``: made now too, once. `Container.run` never needs it.
            plan.heat()
        start = self._entry(plan)
        if plan.overrides is None:
            self._swap(self.cold, start)
        self.start, self.cold = start, None
        return await start(kwargs)

    async def _in_call(self, kwargs: dict[str, Any]) -> Any:
        """A start of no values in a call scope: branches run concurrently or under a
        deadline in one of `call`'s; a resource that needs a scope, in a plain one."""
        container, plan = self.container, self.plan
        if container._call_timeout is not None or (container._concurrent and plan.overlaps):
            if container._call_timeout is None and not plan.needs_call and plan.code is PLAN_CODE:
                # No CALL resource for a call scope to hold (and a plan compiled
                # untraced, whose call has no span): its branches need none.
                return await run_branches(plan, kwargs, self.scopes())
            async with container.call() as call:
                return await call.run(plan, **kwargs)
        # Nothing to overlap (see `Plan.overlaps`): the sequential code, as ever.
        async with container.call(concurrent=False) as scope:
            return await plan.run_fn(kwargs, EMPTY, self.scopes(scope), plan.fn)

    async def launch(
        self, kwargs: dict[str, Any], values: Any = EMPTY, kept: Any = None
    ) -> tuple[bool, Any]:
        """Start the plan now if it starts with no scope object: ``(True, result)``, else
        ``(False, None)``: the caller takes a call scope. The slow path's form of
        `prepare` and the start, in the start's own convention."""
        start = self.prepare()
        if start is None:
            return False, None
        if not self.values:
            return True, await start(kwargs)
        scopes = self.scopes(kept if self.kept else None)
        return True, await start(kwargs, values, scopes, self.plan.fn)


def on_hot(plan: Plan, callback: Callable[[Callable[..., Any]], None]) -> None:
    """Call *callback(run_fn)* once *plan*, interpreted while cold, has its code generated:
    *run_fn* then replaces the plan's cold ``run_fn``."""
    plan.when_hot(callback)


# -- tiering: what a plan starts with ------------------------------------------------


class _NoCall:
    """The call `interpret` is given for a plan started without a call scope, as the
    generated code is given None: nobody to ask, and a memo for this call only."""

    __slots__ = ("cache", "sharing")
    exits: Any = None
    made: tuple[tuple[Hashable, ...], tuple[Any, ...]] | None = None
    flight: Plan | None = None
    rounds: Rounds | None = None
    asker: Asker | None = None
    answerer: Callable[[Any, Any], Awaitable[Any]] | None = None

    def __init__(self) -> None:
        self.cache: dict[Hashable, Any] = {}
        self.sharing: Sharing | None = None  # made by `interpret`

    async def answered(self, step: Step, answer: Awaitable[Any]) -> Any:
        return await answer  # never called: `ask` finds nobody to ask first


def cold_shape(root_threaded: bool, call_resources: bool, call_threads: bool) -> bool:
    """True if a plan can start interpreted: the interpreter runs it exactly as the
    generated ``run`` does (no CALL resource to enter, no worker-thread CALL step whose
    hops the generated code would share, a handler called on the loop)."""
    return not (root_threaded or call_resources or call_threads)


def is_cold(run: Any) -> bool:
    """Whether *run* is a plan's interpreting ``run_fn`` (see `cold_runner`)."""
    return getattr(run, "__code__", None) is _COLD_CODE


def cold_runner(plan_ref: list[Any], asks: bool) -> Callable[..., Coroutine[Any, Any, Any]]:
    """A ``run_fn`` that interprets the plan's first `HOT_AFTER` calls, then generates
    its code (`Plan.heat`) and runs that from then on.

    Most handlers of a large server are called rarely, and generating code costs as
    much as a few hundred interpreted calls: start-up pays only for reading and
    checking the graph. A call given a call scope generates at once, so `Call.run`
    runs the same code as ever. *asks*: whether a step of the plan may ask, as the
    compiler found.
    """
    calls = 0
    alone = not asks  # no step may ask (see `interpret_alone`)

    async def run(
        args: dict[str, Any],
        values: Mapping[Any, Any],
        scopes: tuple[Any, ...],
        body: Callable[..., Any],
    ) -> Any:
        nonlocal calls
        plan = plan_ref[0]
        if scopes[CALL_SLOT] is not None or calls >= HOT_AFTER:
            return await plan.heat()(args, values, scopes, body)
        calls += 1
        if alone:
            kwargs = await interpret_alone(plan, args, values, scopes)
        else:
            kwargs = await interpret(plan, _NoCall(), args, values, scopes, concurrent=False)
        ret = body(**args, **kwargs)
        return (await ret) if plan.fn_is_async else ret

    return run


_COLD_CODE = cold_runner([None], False).__code__


async def run_branches(plan: Plan, args: dict[str, Any], scopes: tuple[Any, ...]) -> Any:
    """Run *plan* with its independent branches at once and no call scope, then its
    function: what a concurrent container's ``run`` starts for a plan whose steps can
    overlap (`Plan.overlaps`) but that opens no CALL resource, so that nothing needs a
    call scope to hold it (`Call` with ``concurrent=True`` holds each resource in a task
    of its own, in a task group that the call enters and leaves). The values are
    memoized for this call only, as the generated code's are."""
    kwargs = await interpret(plan, _NoCall(), args, EMPTY, scopes, concurrent=True)
    if plan.fn_threaded:
        from .._runtime.threads import abandonable  # loaded by the first threaded one

        return await abandonable(functools.partial(plan.fn, **args, **kwargs))
    result = plan.fn(**args, **kwargs)
    if plan.fn_is_async or inspect.isawaitable(result):  # as `Call.run_here` calls it
        result = await result
    return result


class _PlanCode:
    """The `PlanCode` every plan is built with: its first calls through `cold_runner` (if
    it starts cold), its code generated by `resolvent._engine.codegen`."""

    __slots__ = ()

    def is_cold(self, run: Callable[..., Any]) -> bool:
        return is_cold(run)

    def function(self, plan: Plan, variant: str) -> Callable[..., Any] | None:
        from .._engine.codegen import plan_function  # loaded with the first plan that turns hot

        return plan_function(plan, variant)

    def source(self, plan: Plan, variant: str) -> str:
        from .._engine.codegen import plan_source

        return plan_source(plan, variant)

    def run_in(self, call: RunsHere, plan: Plan, kwargs: dict[str, Any]) -> Awaitable[Any]:
        return call.run_here(plan, kwargs)  # what `Call.run` would do without a plan's code


PLAN_CODE: PlanCode = _PlanCode()
"""What `Plan` runs its code with; passed in by whoever builds a plan."""
