"""Launching a plan (`Launcher`): the one place that decides how a function's plan starts
and runs for a caller with no scope object of its own: cold (interpreted) or hot (its
generated code), which generated variant (``entry``, ``run``, ``direct``, ``kept``), with
which calling convention, whether overrides in effect or the container's settings send it
to a call scope instead, and the container's table of checked starts (the ready table)
that a caller's hot path reads. It never compiles a plan, and never generates or
interprets code itself."""

# A launcher reads its container's private state (as a call does): they are one unit.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from .._engine.executor import EMPTY, HOT_AFTER, PLAN_CODE, is_cold, run_branches
from .._graph.plan import Plan, direct_shape
from .._vocabulary.scopes import Scope, app_and_call
from .plans import check_scopes

if TYPE_CHECKING:
    from contextvars import ContextVar

    from .._runtime.cache import LiveScope
    from .call import Call
    from .plans import PlanCache

    Starter = Callable[..., Coroutine[Any, Any, Any]]

    class Container(Protocol):
        """What a launcher reads of its container (`resolvent.Container`): its own, not
        public; a launcher and its container are one unit, as a call and its container."""

        _app: LiveScope | None
        _ready: dict[Any, Starter]
        _concurrent: bool
        _call_timeout: float | None
        _overridden: list[int]
        _override_var: ContextVar[Any]
        _plans: PlanCache

        def _current(self, plan: Plan, /) -> Plan: ...
        def call(self, *, concurrent: bool | None = None) -> Call: ...


__all__ = ("Launcher", "on_hot")

_OPEN = frozenset({Scope.APP, Scope.CALL})
"""The scopes a start with no scope object runs in: the container's, and its own call."""


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
        return app_and_call(self.container._app, kept)

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
