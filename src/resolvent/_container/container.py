"""The container (`Container`): the provider registry, the APP scope and its lifecycle, and
the entry points that run functions in it. Compiling lives in the plan cache, calls and
sessions in their own modules; it never generates code itself."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._graph.plan import Plan
from .._graph.registry import Registry, read
from .._runtime.cache import LiveScope
from .._vocabulary.questions import Asker
from .._vocabulary.scopes import Scope
from .app import AppScope, check_targets
from .launch import Launcher, Starter, app_and_call, check_scopes
from .plans import PlanCache, refuse_generator, refuse_values

if TYPE_CHECKING:
    from .._graph.compiler import Overrides
    from .call import Call, open_call
    from .overrides import OverrideBlock
    from .session import Session

    F = TypeVar("F", bound=Callable[..., Any])
    T = TypeVar("T")
else:

    def open_call(*args: Any) -> Any:
        """Open the first call scope: load `resolvent.Call` (a program that only uses `run`
        may never need it) and put the function itself in this name, so each later
        ``open_call(...)`` in this module is a plain global lookup, as if it had been
        imported at the top."""
        global open_call
        from .call import open_call

        return open_call(*args)


__all__ = ("Container",)


class Container(AppScope):
    """An async dependency-injection container.

    Holds the provider registry and the APP scope; compiles functions into plans; opens
    sessions and calls.

    Args:
        values: framework value types that calls will supply by type (for example the
            MCP ``Context``), declared up front so plans can be compiled.
        concurrent: run independent async branches of a plan at the same time
            (default: sequential, in plan order). A plan with no two steps that could
            run at once (a chain, one resolver) runs the sequential code all the same.
        call_timeout: seconds each call's resolution may take; on expiry the call
            fails with `TimeoutError` and its resources are closed. Time spent waiting
            for a person's answer to a question is not counted.
        answer_timeout: seconds a question may wait for its answer (the asker's, or an
            MCP client's); on expiry the call fails with a `TimeoutError` naming the
            resolver and the parameter. Default: no bound.
        tracing: True to trace every call (OpenTelemetry spans and metrics; needs the
            ``otel`` extra), False never to; None (the default) traces when a tracer
            provider is installed as a plan is compiled. Off, it costs one check on a
            multi-round `Call.run` and on a concurrent call with branches (about 150
            instructions); otherwise calls run the same code as without tracing.
        warm: APP providers (functions or provided types, as `Resolve` takes them) to
            `start` whenever the container is entered, so ``async with container:`` (or
            the server lifespan) returns only once they are open. If one fails to start,
            the container does not open and the error says which and why.

    ```python
    container = Container()

    @container.provider(scope=Scope.APP)
    async def settings() -> Settings: ...

    async with container:
        await container.run(handler, user_id="u1")
    ```
    """

    def __init__(
        self,
        *,
        values: Iterable[type] = (),
        concurrent: bool = False,
        call_timeout: float | None = None,
        warm: Iterable[Callable[..., Any]] = (),
        answer_timeout: float | None = None,
        tracing: bool | None = None,
    ) -> None:
        if isinstance(values, type):  # `values=Request`: one type, not an iterable of types
            raise TypeError(
                f"Container(values=...) takes the framework value types, not the type "
                f"{values.__name__} itself.\n  fix: Container(values=({values.__name__},))"
            )
        self._registry = Registry()
        self._warm: tuple[Callable[..., Any], ...] = tuple(warm)
        check_targets("Container(warm=[...])", self._warm)
        # fn -> what `run` calls, as ``start(kwargs)``, to start its checked plan (see
        # `_start`), for a fn that calls what whatever equals it calls (see
        # `PlanCache.remember`); `_hot` is `_ready`, or nothing while an override block
        # is open.
        self._ready: dict[Any, Starter] = {}
        self._hot: dict[Any, Starter] = self._ready
        # Overrides live in a context variable: a block applies to the task that entered
        # it and the tasks that task starts. `_overridden` counts open blocks in every
        # context (a list, shared with the blocks and the plan cache), so the hot path
        # reads the variable only while some block is open.
        self._override_var: ContextVar[Overrides | None] = ContextVar(
            "resolvent_overrides", default=None
        )
        self._overridden: list[int] = []
        self._plans = plans = PlanCache(
            self._registry, tuple(values), self._override_var, self._overridden, self._ready
        )
        # The plan cache's own methods, bound once: calls reach them in one step.
        self._for_run = plans.for_run
        self._current = plans.current
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._app: LiveScope | None = None
        self._entries = 0
        self._closing: list[Callable[[], Awaitable[None]]] = []
        self._concurrent = concurrent
        self._call_timeout = call_timeout
        self.answer_timeout = answer_timeout
        if tracing is not None:
            self.tracing = tracing

    @property
    def concurrent(self) -> bool:
        """Whether calls run independent async branches at the same time."""
        return self._concurrent

    @concurrent.setter
    def concurrent(self, value: bool) -> None:
        self._concurrent = value
        self._ready.clear()

    @property
    def call_timeout(self) -> float | None:
        """Seconds each call's resolution may take (None: no bound)."""
        return self._call_timeout

    @call_timeout.setter
    def call_timeout(self, value: float | None) -> None:
        self._call_timeout = value
        self._ready.clear()

    @property
    def tracing(self) -> bool | None:
        """Whether plans are traced (OpenTelemetry spans and metrics, see the Observability
        page): True or False as set, None (the default) to trace when a tracer provider
        other than OpenTelemetry's default is installed as a plan is compiled."""
        return self._plans.tracing

    @tracing.setter
    def tracing(self, value: bool | None) -> None:
        if value:
            from .._engine.tracing import require_api  # only when asked for

            require_api("Container(tracing=True)")
        self._plans.tracing = value
        # Every plan compiles again, whole: a call already running keeps the plan it has.
        self._plans.invalidate()

    # -- registration --------------------------------------------------------------------

    def provide(
        self,
        fn: F,
        *,
        scope: Scope = Scope.CALL,
        provides: Any = None,
        inline: bool = False,
    ) -> F:
        """Register *fn* as a provider and return it unchanged.

        Args:
            fn: an async or sync function, generator, or context-manager factory.
            scope: how long its value lives (`Scope.APP`, `Scope.SESSION`, `Scope.CALL`).
            provides: the type `Resolve()` finds it by (default: its return annotation;
                for a generator, the yielded type).
            inline: run a sync *fn* on the event loop instead of in a worker thread.

        Raises:
            InvalidSignature: what *fn* alone shows is wrong (a marker in a union, two
                question arms).
        """
        self._registry.add(fn, scope=scope, provides=provides, inline=inline)
        self._plans.invalidate()
        return fn

    @overload
    def provider(self, fn: F, /) -> F: ...
    @overload
    def provider(
        self, /, *, scope: Scope = Scope.CALL, provides: Any = None, inline: bool = False
    ) -> Callable[[F], F]: ...
    def provider(
        self,
        fn: F | None = None,
        /,
        *,
        scope: Scope = Scope.CALL,
        provides: Any = None,
        inline: bool = False,
    ) -> F | Callable[[F], F]:
        """Decorator form of `provide`: ``@container.provider(scope=Scope.APP)``.

        Without arguments both ``@container.provider`` and ``@container.provider()``
        register a CALL-scoped provider.
        """
        if fn is not None:
            return self.provide(fn)

        def register(fn: F) -> F:
            return self.provide(fn, scope=scope, provides=provides, inline=inline)

        return register

    def add_value_type(self, tp: type) -> None:
        """Declare a framework value type that calls supply with ``values={tp: obj}``."""
        self._plans.add_value_type(tp)

    # -- compiling ------------------------------------------------------------------------

    def compile(self, fn: Callable[..., Any]) -> Plan:
        """Compile *fn*'s dependency graph into a `Plan` (cached per function).

        Raises:
            InvalidSignature: any mistake in the graph, with the path and a fix.
        """
        return self._plans.compile(fn)

    # -- running ------------------------------------------------------------------------

    @overload
    def run(self, fn: Callable[..., Awaitable[T]], /, **kwargs: Any) -> Coroutine[Any, Any, T]: ...
    @overload
    def run(self, fn: Callable[..., T], /, **kwargs: Any) -> Coroutine[Any, Any, T]: ...
    def run(self, fn: Callable[..., Any], /, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        """Resolve *fn*'s dependencies in a fresh CALL scope, call it, tear down.

        A sync (``def``) *fn* runs in a worker thread, as a sync MCP tool does, unless it
        is marked `inline`.

        ```python
        result = await container.run(handler, user_id="u1")
        ```

        Raises:
            ResolventError: the container is not open and *fn* needs APP values, or
                *fn* needs a SESSION value (use `session`) or a framework value (use
                `call(values=...)`).
        """
        # The hot path: one lookup (a dict's, not a method call) and the plan's entry,
        # started in the same expression. Anything else (a first call, an override
        # block open, an unhashable callable object: TypeError) takes `_run`. A start
        # only makes its coroutine: no error of the call itself can be caught here.
        try:
            return self._hot[fn](kwargs)
        except (KeyError, TypeError):
            return self._run(kwargs, fn)

    async def _run(self, kwargs: dict[str, Any], fn: Callable[..., Any]) -> Any:
        if self._overridden and self._override_var.get() is None:
            # A block is open in another task: this one runs the plans as ever.
            try:
                started = self._ready.get(fn)
            except TypeError:  # an unhashable callable object
                started = None
            if started is not None:
                return await started(kwargs)
        # *fn* from here on is what its plan was compiled for: the plan's own function
        # (a bound method or partial is split into it), or one equal to it that calls
        # the same code (a bound method of the same object).
        fn, plan, kwargs = self._for_run(fn, kwargs)
        check_scopes(plan, app_and_call(self._app))
        if not (plan.fn_is_async or plan.fn_threaded):  # an inline function, or a generator
            refuse_generator(plan, "container.run")
        if plan.value_types:
            refuse_values(plan)
        # How it starts (cold or hot, in a call scope or with none) is the launcher's.
        start = Launcher(self, plan, key=fn, values=False, scoped=True).prepare()
        assert start is not None  # a scoped launcher always starts
        return await start(kwargs)

    def session(self) -> Session:
        """Open a SESSION scope: ``async with container.session() as session:``."""
        from .session import Session  # loaded by the first session, not by import

        return Session(self)

    def call(
        self,
        *,
        values: Mapping[Any, Any] | None = None,
        asker: Asker | None = None,
        concurrent: bool | None = None,
        rounds: bool = False,
        answers: Mapping[str, Any] | None = None,
        state: str | None = None,
    ) -> Call:
        """Open a CALL scope outside any session; see `Call`."""
        return open_call(self, None, values, asker, concurrent, rounds, answers, state)

    # -- overrides ----------------------------------------------------------------------

    def override(self, target: Any, replacement: Callable[..., Any]) -> OverrideBlock:
        """Swap a provider (by function, class or provided type) for *replacement*.

        The block applies to the task that enters it and the tasks it starts, compiled
        plans included; blocks nest and interleave, and leaving one restores exactly the
        state before it. The replacement keeps the target's scope unless it is itself
        registered with one; values cached for the original are not used meanwhile.
        Inside the replacement, ``Resolve(target)`` is the original (a spy).

        ```python
        with container.override(get_db, fake_db):
            await container.run(handler)
        ```

        Leaving the block closes the APP/SESSION values built from the replacement:
        ``async with`` closes every kind; a plain ``with`` closes sync resources and
        refuses (`ResolventError`, before it opens) an async APP/SESSION resource built
        from the replacement, which it could not close.
        """
        from .overrides import OverrideBlock, check_override  # for tests: loaded on first use

        replacement = check_override(target, replacement)
        read(replacement)  # validate what the replacement shows now

        return OverrideBlock(self, target, replacement)

    def _live_scopes(self) -> list[LiveScope]:
        scopes = [session.live for session in self._sessions]
        return scopes if self._app is None else [self._app, *scopes]
