"""The container (`Container`): the provider registry, the APP scope and its lifecycle, and
the entry points that run functions in it. Compiling lives in the plan cache, calls and
sessions in their own modules; it never generates code itself."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar, overload

import anyio

from .._graph.plan import Plan
from .._graph.registry import Registry, read
from .._reading.annotations import with_article
from .._runtime.cache import LiveScope
from .._runtime.teardown import settle
from .._vocabulary.errors import InvalidSignature, ResolventError
from .._vocabulary.questions import Asker
from .._vocabulary.scopes import Scope, app_and_call
from .launch import Launcher
from .plans import PlanCache, Starter, check_scopes, refuse_generator, refuse_values

if TYPE_CHECKING:
    from .._graph.compiler import Overrides
    from .call import Call
    from .overrides import OverrideBlock
    from .session import Session

    F = TypeVar("F", bound=Callable[..., Any])
    T = TypeVar("T")
else:

    def Call(*args: Any, **kwargs: Any) -> Any:
        """Open the first call scope: load `resolvent.Call` (a program that only uses `run`
        may never need it) and put the class itself in this name, so each later ``Call(...)``
        in this module is a plain global lookup, as if it had been imported at the top."""
        global Call
        from .call import Call

        return Call(*args, **kwargs)


__all__ = ("Container",)


class Container:
    """An async dependency-injection container.

    Holds the provider registry and the APP scope; compiles functions into plans; opens
    sessions and calls.

    Args:
        values: framework value types that calls will supply by type (for example the
            MCP ``Context``), declared up front so plans can be compiled.
        concurrent: run independent async branches of a plan at the same time
            (default: sequential, in plan order).
        call_timeout: seconds each call's resolution may take; on expiry the call
            fails with `TimeoutError` and its resources are closed. Time spent waiting
            for a person's answer to a question is not counted.
        answer_timeout: seconds a question may wait for its answer (the asker's, or an
            MCP client's); on expiry the call fails with a `TimeoutError` naming the
            resolver and the parameter. Default: no bound.
        tracing: True to trace every call (OpenTelemetry spans and metrics; needs the
            ``otel`` extra), False never to; None (the default) traces when a tracer
            provider is installed as a plan is compiled. Off, calls run the same code as
            without tracing.
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
        _check_targets("Container(warm=[...])", self._warm)
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

    # -- the APP scope ------------------------------------------------------------------

    async def __aenter__(self) -> Container:
        if self._entries == 0:
            self._app = LiveScope(Scope.APP)
        self._entries += 1
        if self._warm:
            # Every entry waits for the warm values (a later one finds them made or
            # joins the start under way), so no lifespan serves traffic before them.
            try:
                await self.start(*self._warm)
            except BaseException as error:
                # Close what did start, cleanly: the failure is not theirs.
                settle(error, await self._leave(None))
                raise
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        settle(exc, await self._leave(exc))

    async def _leave(self, exc: BaseException | None) -> list[BaseException]:
        """Drop one entry; the last one closes the APP scope. Returns teardown errors."""
        self._entries -= 1
        if self._entries > 0:
            return []
        app, self._app = self._app, None
        assert app is not None
        self._ready.clear()  # plans needing APP must be checked again
        callbacks, self._closing = self._closing, []
        errors: list[BaseException] = []
        with anyio.CancelScope(shield=True):
            for callback in reversed(callbacks):
                try:
                    await callback()
                except Exception as error:
                    errors.append(error)
        return errors + await app.close(exc)

    async def start(self, *targets: Callable[..., Any]) -> None:
        """Create APP values now, with the APP values they depend on, and wait for them.

        So a server opens its pool before it accepts traffic instead of on the first
        call. *targets* are APP providers, as `Resolve` takes them: a function, or a
        type some provider provides. Values already made are kept; a start another call
        began is joined. Under a deadline of your own, timing out only stops the
        waiting: the start goes on, as it does for calls. ``Container(warm=[...])`` does
        this on every entry.

        ```python
        async with container:
            await container.start(pool, Settings)
        ```

        Raises:
            ResolventError: the container is not open; a target is not APP-scoped; or
                a value failed to start.
                The last says, on its last line, the provider and the cause; the
                original exception is its ``__context__``, not printed again with it
                (the ``resolvent`` logger has its traceback at DEBUG). Values started
                before it stay open.
            InvalidSignature: the targets' graph does not compile.
        """
        app = self._app
        if app is None:
            raise ResolventError(
                "container.start(...) needs an open container.\n"
                "  fix: call it inside `async with container:` (or the server lifespan), "
                "or pass Container(warm=[...]) to start them on entry"
            )
        _check_targets("container.start(...)", targets)
        from .startup import start_values  # container.start only

        await start_values(self._plans.for_start(targets), app)

    def on_close(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run *callback* when the open APP scope closes, before its resources close.

        For integrations that keep SESSION scopes of their own (the MCP adapter does):
        they are closed while the APP values they use still exist. Callbacks run last
        registered first, like an exit stack (one registered later may use what an
        earlier one closes), each to its end even if one fails; the next opening of the
        container starts with none.

        Raises:
            ResolventError: the container is not open.
        """
        if self._app is None:
            raise ResolventError("on_close needs an open container (`async with container:`)")
        self._closing.append(callback)

    @contextlib.asynccontextmanager
    async def lifespan(self, server: Any = None) -> AsyncGenerator[None, None]:
        """The APP scope as a lifespan: ``MCPServer("x", lifespan=container.lifespan)``,
        ``Starlette(lifespan=...)``, ``FastAPI(lifespan=...)``.

        It yields nothing (no lifespan state), which every one of them accepts: Starlette
        reads a yielded value as a state mapping, and FastAPI merges the states of the
        routers an app includes. Entries are reference-counted, so several connections
        may share one APP scope. Checks that integrations registered
        (`register_start_check`) run on *server* first.
        """
        from .startup import starting  # at start-up only

        async with starting(self, server):
            yield

    def wrap_lifespan(
        self, inner: Callable[[Any], contextlib.AbstractAsyncContextManager[T]]
    ) -> Callable[[Any], contextlib.AbstractAsyncContextManager[T]]:
        """Compose with your own lifespan: the APP scope opens first and closes last."""

        @contextlib.asynccontextmanager
        async def lifespan(server: Any) -> AsyncGenerator[T, None]:
            from .startup import starting

            async with starting(self, server), inner(server) as value:
                yield value

        return lifespan

    @property
    def is_open(self) -> bool:
        """True between entering and leaving ``async with container``."""
        return self._app is not None

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
        return Call(self, None, values, asker, concurrent, rounds, answers, state)

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


def _check_targets(where: str, targets: tuple[Any, ...]) -> None:
    """Refuse a start target that is neither a provider function nor a type (a provider's
    name as a string, say), naming where it was given, before anything compiles."""
    for target in targets:
        if not callable(target):
            example = where.replace("...", "open_pool"), where.replace("...", "Pool")
            raise InvalidSignature(
                f"{where} was given {target!r} ({with_article(type(target).__name__)}), "
                "which is neither a "
                "provider function nor a type.\n"
                "  fix: pass the provider itself or the type it provides, as `Resolve` "
                f"takes them: {example[0]} or {example[1]}"
            )
