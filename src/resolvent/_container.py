"""The container: registry + APP scope, sessions, calls, overrides."""

# Container, Session and Call are one unit and share each other's private state.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import math
import types
import weakref
from collections import OrderedDict
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Coroutine,
    Hashable,
    Iterable,
    Mapping,
)
from contextvars import ContextVar
from types import MappingProxyType
from typing import Annotated, Any, TypeVar, cast, overload

import anyio

from ._annotations import type_name
from ._cache import LiveScope
from ._codegen import direct_shape, generate
from ._compiler import NO_OVERRIDES, Overrides, build_graph
from ._context import InContext
from ._errors import AnswerTimeout, ResolventError
from ._executor import PLAN_CODE, cold_runner, cold_shape, is_cold, timed_out
from ._interpreter import interpret, run_step
from ._kinds import Kind
from ._markers import Resolve, is_inline
from ._plan import Plan, Step
from ._questions import Asker
from ._registry import Registry, read, resolver_key
from ._rounds import Rounds
from ._scopes import Scope
from ._sharing import MISSING, Sharing
from ._teardown import Exits, close_resources, finalize_sync, settle
from ._threads import abandonable

__all__ = ("Call", "Container", "Session")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
KW = TypeVar("KW", bound=Mapping[str, Any])
EMPTY: Mapping[Any, Any] = MappingProxyType({})
_MAX_PLANS = 10_000
_NOTHING_READY: dict[Any, Any] = {}  # `Container._hot` while an override block is open
_MAX_OVERRIDE_PLANS = 1_000
_block_ids = itertools.count(1)


_START_CHECKS: list[Callable[[Any], None]] = []


def register_start_check(check: Callable[[Any], None]) -> None:
    """Run *check(server)* whenever a container's lifespan starts (resolvent.mcp's guard)."""
    if check not in _START_CHECKS:
        _START_CHECKS.append(check)


def _run_start_checks(server: Any) -> None:
    if server is None:
        return
    checks = list(_START_CHECKS)
    if any(cls.__module__.partition(".")[0] == "mcp" for cls in type(server).__mro__):
        # An MCP server (the SDK is loaded, since it exists): its guard runs even if the
        # server module never imported resolvent.mcp, as one that forgot @inject does not.
        from .mcp._guard import check_if_server

        if check_if_server not in checks:
            checks.append(check_if_server)
    for check in checks:
        check(server)


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
    ) -> None:
        self._registry = Registry()
        self._warm: tuple[Callable[..., Any], ...] = tuple(warm)
        self._value_types: tuple[type, ...] = tuple(values)
        self._plans: OrderedDict[Hashable, Plan] = OrderedDict()  # LRU
        # fn -> what `run` calls, as ``start(kwargs, fn)``, to start its checked plan
        # (see `_start`); `_hot` is `_ready`, or nothing while an override block is open.
        self._ready: dict[Any, Callable[..., Coroutine[Any, Any, Any]]] = {}
        self._hot: dict[Any, Callable[..., Coroutine[Any, Any, Any]]] = self._ready
        # Overrides live in a context variable: a block applies to the task that entered
        # it and the tasks that task starts. `_overridden` counts open blocks in every
        # context, so the hot path reads the variable only while some block is open.
        self._override_var: ContextVar[Overrides | None] = ContextVar(
            "resolvent_overrides", default=None
        )
        self._overridden = 0
        self._override_plans: OrderedDict[Hashable, Plan] = OrderedDict()
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._generation = 0
        self._app: LiveScope | None = None
        self._entries = 0
        self._closing: list[Callable[[], Awaitable[None]]] = []
        self._concurrent = concurrent
        self._call_timeout = call_timeout
        self._tiered = True  # plans of a cold shape start interpreted (`cold_runner`)
        self.answer_timeout = answer_timeout

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
        self._invalidate()
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
        if tp not in self._value_types:
            self._value_types += (tp,)
            self._invalidate()

    def _invalidate(self) -> None:
        self._generation += 1
        self._registry.expansions.clear()
        self._plans.clear()
        self._ready.clear()
        self._override_plans.clear()

    # -- compiling ------------------------------------------------------------------------

    def compile(self, fn: Callable[..., Any]) -> Plan:
        """Compile *fn*'s dependency graph into a `Plan` (cached per function).

        Raises:
            InvalidSignature: any mistake in the graph, with the path and a fix.
        """
        key: Hashable = resolver_key(fn)
        overrides = self._override_var.get() if self._overridden else None
        plans = self._plans
        if overrides is not None:
            key, plans = (overrides.stamp, key), self._override_plans
        plan = plans.get(key)
        if plan is not None and plan.generation == self._generation:
            plans.move_to_end(key)
            return plan
        graph = build_graph(fn, self._registry, overrides or NO_OVERRIDES, self._value_types)
        ref: list[Any] = [None]
        steps = graph.steps
        is_async = graph.root.awaits
        # A sync handler's body runs in a worker thread, as the MCP SDK runs a sync tool,
        # unless it is marked `inline`.
        threaded = graph.root.kind is Kind.SYNC and not is_inline(fn)
        run_fn: Callable[..., Any] | None
        if self._tiered and cold_shape(steps, threaded):
            # Interpreted until it is called again: see `cold_runner`.
            run_fn = cold_runner(ref)
        else:
            run_fn = generate(
                ref,
                graph.root.name,
                is_async,
                steps,
                graph.inputs,
                graph.arguments,
                "run",
                root_threaded=threaded,
            )[1]
        assert run_fn is not None
        plan = Plan(
            fn=fn,
            name=graph.root.name,
            steps=steps,
            inputs=graph.inputs,
            arguments=graph.arguments,
            value_types=graph.value_types,
            scopes=frozenset(s.scope for s in steps),
            # Only CALL resources need a scope: `run` has nobody to ask, so a resolver
            # that may ask (one without a return annotation, say) is checked per value.
            needs_call=any(s.scope is Scope.CALL and s.kind.is_resource for s in steps),
            generation=self._generation,
            fn_is_async=is_async,
            run_fn=run_fn,
            code=PLAN_CODE,
            overrides=overrides,
            fn_threaded=threaded,
        )
        ref[0] = plan
        if len(plans) >= (_MAX_PLANS if overrides is None else _MAX_OVERRIDE_PLANS):
            plans.popitem(last=False)
        plans[key] = plan
        return plan

    def _for_run(
        self, fn: Callable[..., Any], kwargs: KW
    ) -> tuple[Callable[..., Any], Plan, KW | dict[str, Any]]:
        """The callable, plan and arguments that run *fn*.

        A bound method or a `functools.partial` shares the plan of its function: `self`
        and the partial's arguments are bound per call, so a per-request object or a
        fresh partial does not compile again. So does a bound method whose function has
        a ``functools.wraps`` decorator (see `_method_body`).
        """
        split = _split(fn, kwargs)
        if split is not None:
            func, bound = split
            plan = self.compile(func)
            if bound.keys() <= set(plan.arguments):
                return func, plan, {**bound, **kwargs}
        return fn, self.compile(fn), kwargs

    def _current(self, plan: Plan) -> Plan:
        overrides = self._override_var.get() if self._overridden else None
        if plan.generation == self._generation and plan.overrides is overrides:
            return plan
        return self.compile(plan.fn)

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
                The last names the provider, and the original exception is its
                ``__cause__``; values started before it stay open.
            InvalidSignature: the targets' graph does not compile.
        """
        app = self._app
        if app is None:
            raise ResolventError(
                "container.start(...) needs an open container.\n"
                "  fix: call it inside `async with container:` (or the server lifespan), "
                "or pass Container(warm=[...]) to start them on entry"
            )
        plan = self._start_plan(targets)
        vals: list[Any] = [MISSING] * len(plan.steps)
        for step in plan.steps:
            try:
                vals[step.index] = await run_step(
                    step, vals, cast(Any, None), EMPTY, EMPTY, app, None
                )
            except Exception as error:
                raise ResolventError(
                    f"{step.name} ({step.scope!r}) failed to start: "
                    f"{type(error).__name__}: {error}\n"
                    f"  path: {plan.path_to(step.index)}\n"
                    f"  fix: the cause printed above was raised inside {step.name}; fix it "
                    "and start again (the next start or call that needs it tries again)"
                ) from error

    def _start_plan(self, targets: tuple[Callable[..., Any], ...]) -> Plan:
        """Compile *targets* as the parameters of one function and check they are APP."""
        params: dict[str, Any] = {}
        for target in targets:
            if isinstance(target, type) and self._registry.get(target) is None:
                hint: Any = Annotated[target, Resolve()]  # a provided type
            else:
                hint = Annotated[Any, Resolve(target)]
            name = getattr(target, "__name__", "")
            if not (isinstance(name, str) and name.isidentifier()) or name in params:
                name = f"target{len(params)}"
            params[name] = hint

        async def start(**values: Any) -> None:
            return None

        start.__qualname__ = start.__name__ = "container.start"
        start.__module__ = "builtins"  # messages then call it plain `container.start`
        start.__annotations__ = dict(params)
        start.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in params]
        )
        overrides = self._override_var.get() if self._overridden else None
        graph = build_graph(start, self._registry, overrides or NO_OVERRIDES, self._value_types)
        plan = Plan(
            fn=start,
            name=graph.root.name,
            steps=graph.steps,
            inputs=graph.inputs,
            arguments=graph.arguments,
            value_types=graph.value_types,
            scopes=frozenset(s.scope for s in graph.steps),
            needs_call=False,
            generation=self._generation,
            fn_is_async=True,
            run_fn=start,
            code=PLAN_CODE,
            overrides=overrides,
        )
        shared = [s for s in plan.steps if s.scope is not Scope.APP]
        if shared:  # APP values depend only on APP values: a target is the culprit
            step = next((s for s in shared if s.parent < 0), shared[0])
            raise ResolventError(
                f"container.start cannot start {step.name}: it is {step.scope!r}, and "
                "start creates APP values only.\n"
                + (
                    f"  fix: a SESSION value starts in its session; start the APP values "
                    f"{step.name} needs instead"
                    if step.scope is Scope.SESSION
                    else f"  fix: register {step.name} with scope=Scope.APP if one value "
                    "should serve every call, or leave it out of start()"
                )
            )
        return plan

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
        _run_start_checks(server)
        async with self:
            yield

    def wrap_lifespan(
        self, inner: Callable[[Any], contextlib.AbstractAsyncContextManager[T]]
    ) -> Callable[[Any], contextlib.AbstractAsyncContextManager[T]]:
        """Compose with your own lifespan: the APP scope opens first and closes last."""

        @contextlib.asynccontextmanager
        async def lifespan(server: Any) -> AsyncGenerator[T, None]:
            _run_start_checks(server)
            async with self, inner(server) as value:
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
        # The hot path: one lookup (a dict's, not a method call), then the plan's entry.
        # Anything else (a first call, an override block open) takes `_run`.
        try:
            start = self._hot[fn]
        except (KeyError, TypeError):  # TypeError: an unhashable callable object
            start = self._run
        return start(kwargs, fn)

    async def _run(self, kwargs: dict[str, Any], fn: Callable[..., Any]) -> Any:
        if self._overridden and self._override_var.get() is None:
            # A block is open in another task: this one runs the plans as ever.
            try:
                started = self._ready.get(fn)
            except TypeError:  # an unhashable callable object
                started = None
            if started is not None:
                return await started(kwargs, fn)
        fn, plan, kwargs = self._for_run(fn, kwargs)
        self._check_scopes(plan, None)
        if plan.value_types:
            self._refuse_values(plan)
        start = self._start(plan)
        if Scope.SESSION not in plan.scopes and plan.overrides is None:
            ready = self._ready
            with contextlib.suppress(TypeError):
                if len(ready) >= _MAX_PLANS and fn not in ready:
                    del ready[next(iter(ready))]  # bounded: a miss only costs a lookup
                ready[fn] = start
                if is_cold(plan.run_fn):  # once hot, `run` starts the generated code
                    plan._on_hot.append(functools.partial(self._warmed, fn, start, plan))
        return await start(kwargs, fn)

    def _start(self, plan: Plan) -> Callable[..., Coroutine[Any, Any, Any]]:
        """What `run` calls, as ``start(kwargs, fn)``, to start a checked *plan* with no
        SESSION step and no framework value: its generated ``entry`` (see `generate`),
        with no scope object, when the plan has no CALL resources or sets them all up
        and tears them down itself (see `direct_shape`); else the plan in a call scope.
        A plan still cold is interpreted (`cold_runner`) until it turns hot."""
        if self.concurrent or self.call_timeout is not None:
            return functools.partial(self._run_in_call, plan)
        if plan.needs_call and not direct_shape(plan.steps):
            return functools.partial(self._run_in_scope, plan)
        if is_cold(plan.run_fn):
            return functools.partial(self._run_cold, plan)
        entry = plan.entry_fn
        return types.MethodType(entry, self._app) if Scope.APP in plan.scopes else entry

    def _warmed(self, fn: Any, start: Any, plan: Plan, run: Callable[..., Any]) -> None:
        """A cold plan turned hot: `run` starts its generated entry from now on."""
        ready = self._ready
        if ready.get(fn) is start:
            ready[fn] = self._start(plan)

    async def _run_cold(self, plan: Plan, args: dict[str, Any], body: Callable[..., Any]) -> Any:
        return await plan.run_fn(args, EMPTY, None, self._app, None, body)

    async def _run_in_scope(
        self, plan: Plan, args: dict[str, Any], body: Callable[..., Any]
    ) -> Any:
        async with Call(self, None, None, None, False, False, None, None) as scope:
            return await plan.run_fn(args, EMPTY, scope, self._app, None, body)

    async def _run_in_call(self, plan: Plan, args: dict[str, Any], body: Callable[..., Any]) -> Any:
        # Branches run concurrently, or under a deadline: in a call scope of its own.
        async with self.call() as call:
            return await call.run(plan, **args)

    def _refuse_values(self, plan: Plan) -> None:
        """`run` supplies no framework values: say which parameter needs one, and how."""
        wanted = [(plan.name, item) for item in plan.inputs if item.source == "value"]
        wanted += [
            (s.name, item) for s in plan.steps for item in s.inputs if item.source == "value"
        ]
        consumer, item = wanted[0]
        name = type_name(item.value_type)
        raise ResolventError(
            f"parameter {item.name!r} of {consumer} needs the framework value {name}, and "
            "container.run(...) supplies no framework values.\n"
            f"  fix: `async with container.call(values={{{name}: ...}}) as call: "
            f"await call.run({plan.name.rpartition('.')[2]}, ...)`"
        )

    def _check_scopes(self, plan: Plan, session: LiveScope | None) -> None:
        if self._app is None and plan.scopes - {Scope.CALL}:
            shared = [s for s in plan.steps if s.scope is not Scope.CALL]
            names = ", ".join(f"{s.name} ({s.scope.name})" for s in shared)
            raise ResolventError(
                f"{plan.name} needs shared values ({names}) but the container is not open "
                "(never opened, or already closed).\n"
                "  fix: run it inside `async with container:` (or the server lifespan)"
                + ("" if Scope.SESSION not in plan.scopes else ", in a container.session()")
            )
        if session is None and Scope.SESSION in plan.scopes:
            names = ", ".join(s.name for s in plan.steps if s.scope is Scope.SESSION)
            raise ResolventError(
                f"{plan.name} needs SESSION-scoped values ({names}) but runs outside a session.\n"
                "  fix: `async with container.session() as session: await session.run(...)`"
            )

    def session(self) -> Session:
        """Open a SESSION scope: ``async with container.session() as session:``."""
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
        read(replacement)  # validate what the replacement shows now
        return OverrideBlock(self, target, replacement)

    def _live_scopes(self) -> list[LiveScope]:
        scopes = [session.live for session in self._sessions]
        return scopes if self._app is None else [self._app, *scopes]


_NEW, _OPEN, _CLOSED = "new", "open", "closed"  # a Call's life, compared by identity


def _callable_name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def _split(fn: Any, kwargs: Mapping[str, Any]) -> tuple[Any, dict[str, Any]] | None:
    """A bound method or partial as (plain function, the arguments it binds), or None."""
    args: tuple[Any, ...] = ()
    keywords: dict[str, Any] = {}
    if isinstance(fn, functools.partial):
        args, keywords, fn = fn.args, fn.keywords, fn.func
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        fn = getattr(fn, "__func__", None)
        args = (owner, *args)
    elif not args and not keywords:
        return None
    if not isinstance(fn, types.FunctionType):
        return None
    if hasattr(fn, "__wrapped__"):  # a decorated method: its own code tells no names
        method = _method_body(fn) if args == (owner,) and not keywords else None
        if method is None or method[1] in kwargs:
            return None
        return method[0], {method[1]: owner}
    code = fn.__code__
    names = code.co_varnames[: code.co_argcount]
    if len(args) > len(names) or (code.co_posonlyargcount and args):
        return None
    bound = dict(zip(names, args, strict=False))
    if bound.keys() & kwargs.keys():
        return None  # let the call fail the way Python says
    bound.update(keywords)
    return fn, bound


_method_bodies: dict[types.FunctionType, tuple[Callable[..., Any], str] | None] = {}


def _method_body(fn: types.FunctionType) -> tuple[Callable[..., Any], str] | None:
    """For a decorated function used as a method: a stand-in that takes the instance by
    name and passes it first, as calling the bound method would, and that name.

    Its plan (the decorated signature, instance included) is shared by every instance:
    ``container.run(View(request).handle)`` compiles once. None if the signature has no
    first parameter to take the instance.
    """
    if fn in _method_bodies:
        return _method_bodies[fn]
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    method: tuple[Callable[..., Any], str] | None = None
    if params and params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
        name = params[0].name

        @functools.wraps(fn)
        def body(*args: Any, **kwargs: Any) -> Any:
            return fn(kwargs.pop(name), *args, **kwargs)

        method = (body, name)
    if len(_method_bodies) >= _MAX_PLANS:
        del _method_bodies[next(iter(_method_bodies))]
    _method_bodies[fn] = method
    return method


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

    def __init__(self, container: Container, target: Any, replacement: Callable[..., Any]) -> None:
        self._container = container
        self._target = target
        self._replacement = replacement
        self._id = 0
        self._plain = True

    def __repr__(self) -> str:
        target, replacement = (
            getattr(x, "__name__", None) or _callable_name(x)
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
        container._overridden += 1
        container._hot = _NOTHING_READY  # `run` then checks for blocks (see `_run`)

    def _leave(self, *, sync: bool) -> list[tuple[Step, Any]]:
        """Drop this block from the current context; take out the values built from it.

        Returns the resources to close now (with *sync*, only those closable without
        awaiting; the others stay with their scope).
        """
        container = self._container
        block = self._id
        container._overridden -= 1
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


class Session:
    """A SESSION scope: values shared by the calls of one client session.

    Use as ``async with container.session() as session:``; resources are closed when it
    exits (or on `aclose`).
    """

    __slots__ = ("__weakref__", "_container", "live")

    def __init__(self, container: Container) -> None:
        self._container = container
        self.live = LiveScope(Scope.SESSION)
        container._sessions.add(self)  # so leaving an override finds its values

    async def __aenter__(self) -> Session:
        if self.live.closed:
            raise self._closed("async with session")
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        settle(exc, await self.live.close(exc))

    async def aclose(self) -> None:
        """Close the session's resources now (reverse order of setup)."""
        settle(None, await self.live.close(None))

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
        """Open a CALL scope inside this session; see `Call`.

        Raises:
            ResolventError: the session is already closed.
        """
        if self.live.closed:
            raise self._closed("session.call()")
        return Call(self._container, self.live, values, asker, concurrent, rounds, answers, state)

    def _closed(self, use: str) -> ResolventError:
        return ResolventError(
            f"{use} on a session that is already closed (its `async with` block ended, or "
            "aclose() was called): its SESSION values are gone.\n"
            "  fix: use the session inside its block, or open a new one: "
            "`async with container.session() as session: ...`"
        )

    @overload
    async def run(self, fn: Callable[..., Awaitable[T]], /, **kwargs: Any) -> T: ...
    @overload
    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T: ...
    async def run(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        """Like `Container.run`, with this session's SESSION values.

        Raises:
            ResolventError: the session is already closed.
        """
        if self.live.closed:
            raise self._closed(f"session.run({_callable_name(fn)})")
        async with self.call() as call:
            return await call.run(fn, **kwargs)


class Call:
    """A CALL scope: one call's values and resources, closed on exit in reverse order.

    Open one with `Container.call` or `Session.call`:

    ```python
    async with container.call(values={Context: ctx}, asker=ask_user) as call:
        kwargs = await call.resolve(plan, {"user_id": "u1"})
    ```

    Args:
        values: framework values by declared type.
        asker: ``async (message, schema) -> ElicitationResult`` answering `Elicit`.
        concurrent: run independent async branches at once (default: the container's).
        rounds: multi-round mode: unanswered questions are batched and raised as
            `InputRequired` instead of asked; resume with *answers* and *state*.
        answers: wire key -> JSON-shaped answer (MCP ``ElicitResult`` shape for `Elicit`).
        state: the `InputRequired.state` of the previous round.
    """

    __slots__ = (
        "_container",
        "_deadline",
        "_paused",
        "_session",
        "_state",
        "answerer",
        "asker",
        "cache",
        "concurrent",
        "exits",
        "flight",
        "rounds",
        "sharing",
        "values",
    )

    def __init__(
        self,
        container: Container,
        session: LiveScope | None,
        values: Mapping[Any, Any] | None,
        asker: Asker | None,
        concurrent: bool | None,
        rounds: bool,
        answers: Mapping[str, Any] | None,
        state: str | None,
    ) -> None:
        self._container = container
        self._session = session
        self.values: Mapping[Any, Any] = values if values is not None else EMPTY
        self.asker = asker
        self.answerer: Callable[[Any, Any], Awaitable[Any]] | None = None
        self.concurrent = container.concurrent if concurrent is None else concurrent
        self.rounds = (
            Rounds(answers, state, container.answer_timeout) if rounds or answers or state else None
        )
        self.exits: list[tuple[Step, Any]] = Exits()
        self.cache: dict[Hashable, Any] = {}
        # Several tasks may resolve in one call at once (see `resolvent._sharing.Sharing`):
        # the generated resolution in flight, and what the others share.
        self.flight: Plan | None = None
        self.sharing: Sharing | None = None
        self._state = _NEW
        self._deadline: anyio.CancelScope | None = None  # call_timeout's, while resolving
        self._paused: list[float] = []  # [deadline, paused at, waiting answers] while paused

    async def __aenter__(self) -> Call:
        if self._state is not _NEW:
            raise self._misuse("async with", None)
        self._state = _OPEN
        # Branches and deadlines open cancel scopes around resolvers; resources are then
        # held by tasks of their own so their setup and teardown share a task.
        holders = self.concurrent or self._container.call_timeout is not None
        await cast(Exits, self.exits).open(holders=holders)
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._state = _CLOSED
        self.cache.clear()
        exits = self.exits
        if isinstance(exits, Exits):
            await exits.close(exc)
        elif exits:
            settle(exc, await close_resources(exits, exc))

    def _misuse(self, method: str, target: Plan | Callable[..., Any] | None) -> ResolventError:
        """The error for a call scope used outside its ``async with`` block."""
        opener = "container.call()" if self._session is None else "session.call()"
        if target is None:
            return ResolventError(
                f"this call scope was already entered once (`async with {opener} as call:`); "
                "a call scope is used for one block only.\n"
                f"  fix: open a new one for each block: `async with {opener} as call: ...`"
            )
        name = target.name if isinstance(target, Plan) else _callable_name(target)
        if self._state is _NEW:
            what = "was never entered"
        else:
            what = "is already closed (its `async with` block has ended)"
        short = name.rpartition(".")[2]
        return ResolventError(
            f"call.{method}({name}) on a call scope that {what}: resources it opened "
            "would never be closed.\n"
            f"  fix: use the call inside its block: "
            f"`async with {opener} as call: await call.{method}({short}, ...)`"
        )

    def _prepare(self, target: Plan) -> Plan:
        container = self._container
        plan = container._current(target)
        container._check_scopes(plan, self._session)
        return plan

    async def resolve(
        self, plan: Plan | Callable[..., Any], args: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resolve the plan's injected parameters (name -> value) in this call scope.

        *plan* is a `Plan` or the function itself; a bound method or `functools.partial`
        shares its function's plan (``self`` and the partial's arguments are bound per
        call), so a per-request object does not compile again.

        Raises:
            InputRequired: in multi-round mode, when questions still need answers.
            NotAccepted: an unwrapped consumer's question was declined or cancelled.
            ResolventError: the call is used outside its ``async with`` block.
        """
        if self._state is not _OPEN:
            raise self._misuse("resolve", plan)
        args = EMPTY if args is None else args
        if isinstance(plan, Plan):
            plan = self._prepare(plan)
        else:  # a bound method or partial shares its function's plan, as in `run`
            _, plan, bound = self._container._for_run(plan, args)
            self._container._check_scopes(plan, self._session)
            args = bound
        timeout = self._container.call_timeout
        if timeout is None:
            return await self._resolve(plan, args)
        return await self._resolve_within(plan, args, timeout)

    async def _resolve_within(
        self, plan: Plan, args: Mapping[str, Any], seconds: float
    ) -> dict[str, Any]:
        """`_resolve` under ``call_timeout``; on expiry a `CallTimeout` naming what ran."""
        cancelled: BaseException | None = None
        try:
            with anyio.fail_after(seconds) as scope:
                cast(Exits, self.exits).deadline = scope.deadline
                self._deadline = scope
                try:
                    return await self._resolve(plan, args)
                except anyio.get_cancelled_exc_class() as exc:
                    if anyio.current_time() >= scope.deadline:
                        cancelled = exc  # the deadline's own cancellation
                    raise
                finally:
                    self._deadline = None
        except TimeoutError:
            if cancelled is None:
                raise  # a TimeoutError of a resolver's own
            raise timed_out(plan, seconds, cancelled) from None
        finally:
            cancelled = None  # its traceback holds every frame of the resolution

    async def answered(self, step: Step, answer: Awaitable[Any]) -> Any:
        """Await a person's *answer* to *step*'s question.

        The wait does not count against ``call_timeout`` (its deadline moves on by the
        time spent waiting), and ``answer_timeout`` bounds it.
        """
        scope = self._deadline
        bound = self._container.answer_timeout
        if scope is None and bound is None:
            return await answer
        paused = self._paused
        if scope is not None:
            if not paused:  # the first of the questions waiting at once
                paused[:] = [scope.deadline, anyio.current_time(), 0]
                scope.deadline = cast(Exits, self.exits).deadline = math.inf
            paused[2] += 1
        try:
            if bound is None:
                return await answer
            with anyio.move_on_after(bound):
                return await answer
            raise AnswerTimeout(bound, step.name, step.param)
        finally:
            if scope is not None:
                paused[2] -= 1
                if not paused[2]:
                    deadline = paused[0] + (anyio.current_time() - paused[1])
                    scope.deadline = cast(Exits, self.exits).deadline = deadline
                    paused.clear()

    def record(self, made: dict[Hashable, Any]) -> None:
        """The generated resolution in flight made *made* (its CALL values): it landed."""
        self.cache.update(made)
        self.flight = None
        if self.sharing is not None:
            self.sharing.wake()

    def _fly(self, plan: Plan) -> bool:
        """Whether *plan* may resolve with generated code, as the call's only resolution
        (its flight); it then is."""
        if self.cache or self.flight is not None or self.sharing is not None:
            return False
        self.flight = plan
        return True

    def _land(self, plan: Plan) -> None:
        """The flight ended with no CALL value to record, or failed before `fail` saw it."""
        if self.flight is plan:
            self.flight = None
            if self.sharing is not None:
                self.sharing.wake()

    async def _resolve(self, plan: Plan, args: Mapping[str, Any]) -> dict[str, Any]:
        container = self._container
        if self.rounds is None and not self.concurrent and self._fly(plan):
            try:
                result: dict[str, Any] = await plan.resolve_fn(
                    args, self.values, self, container._app, self._session, plan.fn
                )
            finally:
                self._land(plan)
            return result
        return await interpret(
            plan, self, args, self.values, container._app, self._session, concurrent=self.concurrent
        )

    @overload
    async def run(self, fn: Callable[..., Awaitable[T]], /, **kwargs: Any) -> T: ...
    @overload
    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T: ...
    @overload
    async def run(self, fn: Plan, /, **kwargs: Any) -> Any: ...
    async def run(self, fn: Plan | Callable[..., Any], /, **kwargs: Any) -> Any:
        """Resolve *fn*'s dependencies in this call scope and call it.

        A sync (``def``) *fn* runs in a worker thread unless it is marked `inline`.

        Raises:
            ResolventError: the call is used outside its ``async with`` block.
        """
        if self._state is not _OPEN:
            raise self._misuse("run", fn)
        container = self._container
        if isinstance(fn, Plan):
            plan = self._prepare(fn)
        else:
            fn, plan, kwargs = container._for_run(fn, kwargs)
            container._check_scopes(plan, self._session)
        if (
            self.rounds is None
            and not self.concurrent
            and container.call_timeout is None
            and self._fly(plan)
        ):
            try:
                return await plan.run_fn(
                    kwargs, self.values, self, container._app, self._session, plan.fn
                )
            finally:
                self._land(plan)
        injected = await self.resolve(plan, kwargs)
        if plan.fn_threaded:
            return await abandonable(functools.partial(plan.fn, **kwargs, **injected))
        result = plan.fn(**kwargs, **injected)
        if inspect.isawaitable(result):
            result = await result
        return result
