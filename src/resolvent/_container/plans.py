"""The container's plan cache: compiling functions into plans (traced or not, cold or not:
what `launch` starts them with), keeping them, and the checks of a function a plan runs
(whether the scopes it needs are open is `launch.check_scopes`). It never opens a scope or
runs a plan."""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from .._graph.plan import Plan, Step, new_plan
from .._graph.registry import Registry, resolver_key
from .._reading.annotations import type_name
from .._reading.kinds import Kind, is_inline
from .._vocabulary.errors import ResolventError
from .._vocabulary.markers import ReadingEpoch, Resolve
from .._vocabulary.scopes import Scope
from .launch import PLAN_CODE, Starter, cold_runner, cold_shape

__all__ = ("PlanCache", "callable_name", "refuse_generator", "refuse_values")

if TYPE_CHECKING:
    from .._graph.compiler import Overrides, build_graph

    KW = TypeVar("KW", bound=Mapping[str, Any])
else:

    def build_graph(*args: Any) -> Any:
        """Compile the first plan: load the compiler (a program that imports resolvent for
        its markers, a library of resolvers say, never compiles) and put `build_graph`
        itself in this name, so each later compile finds a plain global, as if it had been
        imported at the top."""
        global build_graph
        from .._graph.compiler import build_graph

        return build_graph(*args)


_MAX_PLANS = 10_000
_MAX_OVERRIDE_PLANS = 1_000


class PlanCache:
    """A container's compiled plans, LRU-bounded, valid for one generation of its providers.

    The container shares three objects with it by reference, because its per-call path
    reads them directly: the registry, the overrides context variable and the list of open
    override blocks (a counter: the variable is read only while some block is open), and
    *ready* (function -> what `run` calls to start its checked plan).
    """

    __slots__ = (
        "__weakref__",
        "generation",
        "open_blocks",
        "override_plans",
        "override_var",
        "plans",
        "ready",
        "registry",
        "tiered",
        "tracing",
        "value_types",
    )

    def __init__(
        self,
        registry: Registry,
        value_types: tuple[type, ...],
        override_var: ContextVar[Overrides | None],
        open_blocks: list[int],
        ready: dict[Any, Starter],
    ) -> None:
        self.registry = registry
        self.value_types = value_types
        self.override_var = override_var
        self.open_blocks = open_blocks
        self.ready = ready
        self.plans: OrderedDict[Hashable, Plan] = OrderedDict()  # LRU
        self.override_plans: OrderedDict[Hashable, Plan] = OrderedDict()
        self.generation = 0
        self.tiered = True  # plans of a cold shape start interpreted (`cold_runner`)
        self.tracing: bool | None = None  # `Container(tracing=...)`: None follows the provider
        ReadingEpoch.caches.add(self)  # emptied when a function is marked `inline` later

    def __len__(self) -> int:
        """How many plans without overrides are cached."""
        return len(self.plans)

    def invalidate(self) -> None:
        """The providers changed: every plan compiles again on its next use."""
        self.generation += 1
        self.registry.forget_expansions()
        self.plans.clear()
        self.ready.clear()
        self.override_plans.clear()

    def add_value_type(self, tp: type) -> None:
        """Declare a framework value type calls supply by type."""
        if tp not in self.value_types:
            self.value_types += (tp,)
            self.invalidate()

    def compile(self, fn: Callable[..., Any]) -> Plan:
        """*fn*'s plan, from the cache or compiled now; see `Container.compile`."""
        key: Hashable = resolver_key(fn)
        overrides = self.override_var.get() if self.open_blocks else None
        plans = self.plans
        if overrides is not None:
            key, plans = (overrides.stamp, key), self.override_plans
        plan = plans.get(key)
        if plan is not None and plan.generation == self.generation:
            plans.move_to_end(key)
            return plan
        graph = build_graph(fn, self.registry, overrides, self.value_types)
        ref: list[Any] = [None]
        steps = graph.steps
        is_async = graph.root.awaits
        # A sync handler's body runs in a worker thread, as the MCP SDK runs a sync tool,
        # unless it is marked `inline`.
        threaded = graph.root.kind is Kind.SYNC and not is_inline(fn)
        run_fn: Callable[..., Any] | None
        # No local of its own for tracing: a cached plan's return clears this frame, whose
        # every local costs that instructions.
        if tracing_on(self.tracing):
            steps = _traced_steps(steps)
            run_fn = _not_yet  # its traced `run`, made once the plan exists (below)
        elif self.tiered and cold_shape(threaded, graph.call_resources, graph.call_threads):
            # Interpreted until it is called again: see `cold_runner`.
            run_fn = cold_runner(ref, graph.asks)
        else:
            from .._engine.codegen import generate  # see its `plan_function`

            run_fn = generate(
                ref,
                graph.root.name,
                is_async,
                steps,
                graph.inputs,
                graph.arguments,
                "run",
                root_threaded=threaded,
                body=fn,
            )[1]
        assert run_fn is not None
        # Only CALL resources need a scope (*needs_call*): `run` has nobody to ask, so a
        # resolver that may ask (one without a return annotation, say) is checked per value.
        plan = new_plan(
            fn=fn,
            name=graph.root.name,
            steps=steps,
            inputs=graph.inputs,
            arguments=graph.arguments,
            value_types=graph.value_types,
            scopes=graph.scopes,
            needs_call=graph.call_resources,
            generation=self.generation,
            fn_is_async=is_async,
            run_fn=run_fn,
            code=PLAN_CODE,
            overrides=overrides,
            fn_threaded=threaded,
        )
        ref[0] = plan
        if run_fn is _not_yet:
            _trace(plan)
        if len(plans) >= (_MAX_PLANS if overrides is None else _MAX_OVERRIDE_PLANS):
            plans.popitem(last=False)
        plans[key] = plan
        return plan

    def for_run(
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

    def current(self, plan: Plan) -> Plan:
        """*plan*, or its function's plan compiled again if providers or overrides changed."""
        overrides = self.override_var.get() if self.open_blocks else None
        if plan.generation == self.generation and plan.overrides is overrides:
            return plan
        return self.compile(plan.fn)

    def remember(self, fn: Any, start: Starter) -> None:
        """Let `run` start *fn*'s checked plan with *start* from now on (bounded: a miss
        costs only a look-up), if whatever equals *fn* calls what *fn* calls.

        *start* calls the plan's own function, not the one `run` is given: so only a
        *fn* that equals nothing but itself (a function, a class, an object without an
        ``__eq__`` of its own), or a bound method (equal only to one of the same function
        and object), is a key; any other, and an unhashable one, takes `run`'s slow path
        on every call."""
        equals: Any = type(fn).__eq__
        if equals is not object.__eq__ and type(fn) is not types.MethodType:
            return
        ready = self.ready
        try:
            if len(ready) >= _MAX_PLANS and fn not in ready:
                del ready[next(iter(ready))]
            ready[fn] = start
        except TypeError:  # an unhashable callable object
            pass

    def for_start(self, targets: tuple[Callable[..., Any], ...]) -> Plan:
        """Compile *targets* as the parameters of one function and check they are APP."""
        params: dict[str, Any] = {}
        for target in targets:
            if isinstance(target, type) and self.registry.get(target) is None:
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
        overrides = self.override_var.get() if self.open_blocks else None
        graph = build_graph(start, self.registry, overrides, self.value_types)
        plan = new_plan(
            fn=start,
            name=graph.root.name,
            steps=graph.steps,
            inputs=graph.inputs,
            arguments=graph.arguments,
            value_types=graph.value_types,
            scopes=graph.scopes,
            needs_call=False,
            generation=self.generation,
            fn_is_async=True,
            run_fn=start,
            code=PLAN_CODE,
            overrides=overrides,
        )
        shared = [s for s in plan.steps if s.scope is not Scope.APP]
        if shared:  # APP values depend only on APP values: a target is the culprit
            step = next((s for s in shared if plan.parent(s.index)[0] < 0), shared[0])
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


def tracing_on(setting: bool | None) -> bool:
    """Whether a plan compiled now is traced: *setting* (`Container.tracing`), else whether
    a tracer provider other than OpenTelemetry's default (the proxy, or no-op) is installed.
    A program that never imported OpenTelemetry has none, and does not import it here; one
    that has, but installed none, loads no tracing either."""
    if setting is not None:
        return setting
    if "opentelemetry.trace" not in sys.modules:
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _traced_steps(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    from .._engine.spans import traced_steps  # only a traced plan loads it

    return traced_steps(steps)


def _trace(plan: Plan) -> None:
    """Give a plan with traced steps the traced code, and its `run` generated now: a traced
    plan is never interpreted cold."""
    from .._engine.tracing import TRACED_CODE

    object.__setattr__(plan, "code", TRACED_CODE)
    object.__setattr__(plan, "run_fn", TRACED_CODE.function(plan, "run"))


async def _not_yet(*args: Any) -> Any:
    raise AssertionError("a traced plan's run is set as soon as the plan is made")


def refuse_generator(plan: Plan, runner: str) -> None:
    """Refuse to run a generator function as a handler (*runner* is what was asked to
    run it): calling it only makes a generator, so its set-up and teardown would never
    run. Called where ``plan.fn`` neither awaits nor runs in a thread: the rest cannot
    be generators."""
    fn = plan.fn
    if inspect.isasyncgenfunction(fn):
        what = "an async generator function"
    elif inspect.isgeneratorfunction(fn):
        what = "a generator function"
    else:
        return
    short = getattr(fn, "__name__", plan.name)
    raise ResolventError(
        f"{runner} cannot run {plan.name}: it is {what}, so calling it would only make a "
        "generator, and the code around its `yield` would never run.\n"
        f"  fix: to set up and tear down a value around a call, make it a resolver a "
        f"handler takes, `Annotated[T, Resolve({short})]`, which the call closes; to "
        "return a result, write a function that returns it"
    )


def refuse_values(plan: Plan) -> None:
    """`run` supplies no framework values: say which parameter needs one, and how."""
    wanted = [(plan.name, item) for item in plan.inputs if item.source == "value"]
    wanted += [(s.name, item) for s in plan.steps for item in s.inputs if item.source == "value"]
    consumer, item = wanted[0]
    name = type_name(item.value_type)
    raise ResolventError(
        f"parameter {item.name!r} of {consumer} needs the framework value {name}, and "
        "container.run(...) supplies no framework values.\n"
        f"  fix: `async with container.call(values={{{name}: ...}}) as call: "
        f"await call.run({plan.name.rpartition('.')[2]}, ...)`"
    )


def callable_name(fn: Any) -> str:
    """*fn*'s qualified name for messages."""
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
