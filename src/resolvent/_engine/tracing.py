"""Tracing: the OpenTelemetry spans and metrics of a traced plan. Loaded only when a plan is
compiled with tracing on; a plan compiled with it off never reaches this module.

A traced plan is an ordinary plan whose steps are copies of the plain ones with their
function replaced by a `_Traced` callable (a span around the resolver, a set-up and a
teardown span around a resource), and whose code (`TRACED_CODE`) wraps each function it
generates in the call's span. Every executor (generated code, the interpreter, concurrent
branches) runs the same steps, so all of them emit the same tree; the plain plan's code
and the executors themselves are untouched.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import sys
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._reading.kinds import Kind
from .._vocabulary.errors import CallTimeout, ResolventError
from .._vocabulary.scopes import SLOTS, Scope
from .executor import PLAN_CODE

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Link, Span, SpanContext, Tracer

    from .._graph.plan import Plan, Step

__all__ = (
    "TRACED_CODE",
    "answer_span",
    "lease_wait",
    "provider_installed",
    "require_api",
    "traced",
    "traced_steps",
)

_NAME = "resolvent"

# Attribute names: OpenTelemetry's semantic conventions where one exists, else `resolvent.`.
FUNCTION = "code.function.name"
ERROR_TYPE = "error.type"
SCOPE = "resolvent.scope"
SCOPES = "resolvent.scopes"
KIND = "resolvent.resolver.kind"
MODE = "resolvent.mode"
BACKEND = "resolvent.backend"
CANCELLED = "resolvent.cancelled"
TIMED_OUT = "resolvent.call_timeout.expired"
TIMEOUT = "resolvent.call_timeout"
ROUND = "resolvent.round"
FAILED_RESOLVER = "resolvent.error.resolver"
MEMO_HIT = "resolvent.memo.hit"
STATE = "resolvent.state.name"
STATE_STORE = "resolvent.state.store"
_STORE_ARGUMENT = "resolvent_store"  # what a `State`'s resolvers are given their store as


def require_api(where: str) -> None:
    """Refuse ``tracing=True`` where the OpenTelemetry API is not installed."""
    try:
        importlib.import_module("opentelemetry.trace")
    except ImportError:
        raise ResolventError(
            f"{where}: tracing=True needs the OpenTelemetry API, which is not installed.\n"
            "  fix: pip install 'resolvent[otel]' (or leave tracing=None: on only when a "
            "tracer provider is installed)"
        ) from None


def provider_installed() -> bool:
    """Whether a tracer provider other than OpenTelemetry's default (the proxy, or no-op)
    is installed. Never imports OpenTelemetry: a program that has not imported it has none."""
    if "opentelemetry.trace" not in sys.modules:
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _tracer() -> Tracer:
    global _attach, _detach, _in_context
    from opentelemetry import context, trace

    _attach, _detach, _in_context = context.attach, context.detach, trace.set_span_in_context
    return trace.get_tracer(_NAME)


# Bound by `_tracer` (as a plan is compiled traced): OpenTelemetry's, called per span.
_attach: Callable[[Context], object]
_detach: Callable[[Any], None]
_in_context: Callable[[Span], Context]


class _Metrics:
    """The instruments, made once per meter provider in use (a test may install another)."""

    __slots__ = ("answer_wait", "duration", "errors", "provider")

    def __init__(self) -> None:
        from opentelemetry import metrics

        self.provider = metrics.get_meter_provider()
        meter = metrics.get_meter(_NAME)
        self.duration: Histogram = meter.create_histogram(
            "resolvent.resolver.duration",
            unit="s",
            description="How long a resolver (or a resource's set-up) ran.",
        )
        self.errors: Counter = meter.create_counter(
            "resolvent.resolver.errors",
            unit="{error}",
            description="Resolvers (or resource set-ups and teardowns) that raised.",
        )
        self.answer_wait: Histogram = meter.create_histogram(
            "resolvent.answer.wait",
            unit="s",
            description="How long a question waited for a person's answer.",
        )


_metrics: list[_Metrics] = []


def _instruments() -> _Metrics:
    from opentelemetry import metrics

    if not _metrics or _metrics[0].provider is not metrics.get_meter_provider():
        _metrics[:] = [_Metrics()]
    return _metrics[0]


def _backend() -> str:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return "trio"
    return "asyncio"


def _cancellation(error: BaseException) -> bool:
    """A cancellation (asyncio's or trio's), which is no error of the span it crossed."""
    return isinstance(error, asyncio.CancelledError) or error.__class__.__name__ == "Cancelled"


def _error_type(error: BaseException) -> str:
    cls = error.__class__
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    if module.startswith("resolvent."):
        module = "resolvent"  # the public name of every error resolvent raises
    return f"{module}.{cls.__qualname__}"


def _failed(span: Span, error: BaseException, where: str | None = None) -> str | None:
    """Mark *span* with *error*: its type, and *where* (the resolver whose span it is)
    on the exception event. An error's message is not recorded: it may carry an argument
    value. Returns the error type, None for a cancellation."""
    from opentelemetry.trace import Status, StatusCode

    if _cancellation(error):
        span.set_attribute(CANCELLED, True)
        return None
    kind = _error_type(error)
    span.set_attribute(ERROR_TYPE, kind)
    event: dict[str, Any] = {"exception.type": kind}
    if where is not None:
        event[FUNCTION] = where
    span.add_event("exception", event)
    span.set_status(Status(StatusCode.ERROR, kind))
    return kind


# The resolver whose span an error crossed first (the one that raised it), by the error's
# id, until the call's span reads it (`_call_failed`). Bounded: an error no call span
# reads (a `Call.resolve` of a traced plan has none) is forgotten after a few others.
_raised: OrderedDict[int, tuple[BaseException, str]] = OrderedDict()
_RAISED_KEPT = 32


def _raised_by(error: BaseException, name: str) -> None:
    if id(error) in _raised:
        return  # an outer span it crossed: the first is the one that raised it
    _raised[id(error)] = (error, name)
    while len(_raised) > _RAISED_KEPT:
        _raised.popitem(last=False)  # one step: safe beside worker threads


def _kind(step: Step) -> str:
    if step.kind.is_resource:
        return "resource"
    if step.kind is Kind.ASYNC:
        return "async"
    return "inline" if step.inline else "thread"


class _Traced:
    """A traced step's function: *fn* in a span named for the resolver. A resource's is
    a proxy of the generator or context manager *fn* returns (`_Resource`), which opens
    the set-up span when it is entered and the teardown span when it is closed.

    An instance, not a closure: code that keys a cache by a step's function (its code
    object, else the object itself) keeps one entry per traced step.
    """

    __slots__ = (
        "attributes",
        "fn",
        "kind",
        "labels",
        "name",
        "names",
        "state",
        "step",
        "tracer",
    )

    def __init__(self, step: Step, tracer: Tracer) -> None:
        self.fn = step.fn
        self.step = step
        self.kind = step.kind
        self.tracer = tracer
        self.name = name = step.name
        scope = step.scope.name
        self.labels = {FUNCTION: name, SCOPE: scope}
        self.attributes: dict[str, Any] = {**self.labels, KIND: _kind(step)}
        # The span names: resolving, a resource's set-up, its teardown, and its teardown
        # when the call failed (a `State`'s commit and rollback).
        self.names = (f"resolve {name}", f"setup {name}", f"teardown {name}", f"teardown {name}")
        self.state = _state_resolver(step.fn)
        if self.state is not None:
            state, verb = self.state
            self.attributes[STATE] = state
            load, commit, rollback = (f"state.{v} {state}" for v in ("load", "commit", "rollback"))
            self.names = (
                load,
                f"state.{verb} {state}" if verb == "new" else load,
                commit,
                rollback,
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.state is not None:  # the kind of store it loads from (never the handle)
            store = kwargs.get(_STORE_ARGUMENT)
            self.attributes[STATE_STORE] = _store_kind(store)
        kind = self.kind
        if kind is Kind.ASYNC:
            return self._async(args, kwargs)
        if kind is Kind.SYNC:
            return self._sync(args, kwargs)
        if self.step.awaits:  # an async factory of a context manager
            return self._factory(args, kwargs)
        return _Resource(self, self.fn(*args, **kwargs))

    def _sync(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with self.span(self.names[0], None):
            return self.fn(*args, **kwargs)

    async def _async(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.state is not None:  # a `State`'s read: its load may wait for a lease
            loading = _LOADING.set(self)
            try:
                with self.span(self.names[0], None):
                    return await self.fn(*args, **kwargs)
            finally:
                _LOADING.reset(loading)
        with self.span(self.names[0], None):
            return await self.fn(*args, **kwargs)

    async def _factory(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return _Resource(self, await self.fn(*args, **kwargs))

    def span(self, name: str, parent: Context | None) -> _Measure:
        return _Measure(self, name, parent)


class _Measure:
    """One traced step's span (current while it is open), its duration and its error."""

    __slots__ = ("name", "parent", "span", "start", "token", "traced")

    def __init__(self, traced: _Traced, name: str, parent: Context | None) -> None:
        self.traced = traced
        self.name = name
        self.parent = parent
        self.span: Any = None
        self.token: Any = None
        self.start = 0.0

    def __enter__(self) -> _Measure:
        traced = self.traced
        # `start_span` and `attach` rather than `start_as_current_span`: the same span,
        # without two generator-based context managers per span.
        span = self.span = traced.tracer.start_span(
            self.name,
            context=self.parent,
            attributes=traced.attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self.token = _attach(_in_context(span))
        self.start = time.perf_counter()
        return self

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        elapsed = time.perf_counter() - self.start
        span = self.span
        try:
            labels = self.traced.labels
            metrics = _instruments()
            if error is not None:
                name = self.traced.name
                failed = _failed(span, error, name)
                if failed is not None:
                    _raised_by(error, name)
                    metrics.errors.add(1, {**labels, ERROR_TYPE: failed})
            if self.parent is None or self.name == self.traced.names[1]:  # not a teardown
                metrics.duration.record(elapsed, labels)
        finally:
            _detach(self.token)
            span.end()


class _Resource:
    """A traced resource: the generator or context manager its provider returned, with a
    set-up span around entering it and a teardown span around closing it. Both are
    children of the span that was current when the provider was called (the call's), so
    a teardown that runs after the call returned, or in another task, is still its child."""

    __slots__ = ("inner", "opened", "parent", "traced")

    def __init__(self, traced: _Traced, inner: Any) -> None:
        from opentelemetry import context

        self.traced = traced
        self.inner = inner
        self.parent = context.get_current()
        self.opened = False

    def _setup(self) -> _Measure:
        self.opened = True
        return self.traced.span(self.traced.names[1], self.parent)

    def _teardown(self, failed: BaseException | None = None) -> _Measure:
        names = self.traced.names
        return self.traced.span(names[2] if failed is None else names[3], self.parent)

    # An async generator: set up by its first ``__anext__``, closed by the next one or
    # by ``athrow`` (see `resolvent._runtime.teardown`).

    async def __anext__(self) -> Any:
        if not self.opened:
            if self.traced.state is not None:  # a `State`'s load, which may wait for a lease
                loading = _LOADING.set(self.traced)
                try:
                    with self._setup():
                        return await self.inner.__anext__()
                finally:
                    _LOADING.reset(loading)
            with self._setup():
                return await self.inner.__anext__()
        with _Closing(self._teardown()):
            return await self.inner.__anext__()

    async def athrow(self, error: BaseException) -> Any:
        with _Closing(self._teardown(error), error):
            return await self.inner.athrow(error)

    async def aclose(self) -> None:
        await self.inner.aclose()

    # A generator.

    def __next__(self) -> Any:
        if not self.opened:
            with self._setup():
                return next(self.inner)
        with _Closing(self._teardown()):
            return next(self.inner)

    def throw(self, error: BaseException) -> Any:
        with _Closing(self._teardown(error), error):
            return self.inner.throw(error)

    def close(self) -> None:
        self.inner.close()

    # A context manager, async or not.

    async def __aenter__(self) -> Any:
        with self._setup():
            return await self.inner.__aenter__()

    async def __aexit__(self, kind: Any, error: BaseException | None, tb: Any) -> Any:
        with _Closing(self._teardown(error), error):
            return await self.inner.__aexit__(kind, error, tb)

    def __enter__(self) -> Any:
        with self._setup():
            return self.inner.__enter__()

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> Any:
        with _Closing(self._teardown(error), error):
            return self.inner.__exit__(kind, error, tb)


class _Closing:
    """A teardown's span: a generator's end (StopIteration) and the scope's own error
    *passed* coming back are how a teardown ends, not its errors."""

    __slots__ = ("measure", "passed")

    def __init__(self, measure: _Measure, passed: BaseException | None = None) -> None:
        self.measure = measure
        self.passed = passed

    def __enter__(self) -> None:
        self.measure.__enter__()

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> None:
        if error is not None and (
            error is self.passed or isinstance(error, StopIteration | StopAsyncIteration)
        ):
            error = None
        self.measure.__exit__(None, error, None)


# The traced `State` resolver loading now in this context (see `lease_wait`).
_LOADING: ContextVar[_Traced | None] = ContextVar("resolvent_state_loading", default=None)

T = TypeVar("T")


async def lease_wait(name: str, waiting: Awaitable[T]) -> T:
    """Wait for another call's lease on a value of the `State` *name* (*waiting*: the
    retries of its load), in a span of its own under the load's, when the load is a
    traced plan's: how long the call stood behind another. Never the handle."""
    traced = _LOADING.get()
    if traced is None:  # an untraced plan's load
        return await waiting
    attributes = {
        FUNCTION: traced.name,
        STATE: name,
        STATE_STORE: traced.attributes.get(STATE_STORE, "unknown"),
    }
    with traced.tracer.start_as_current_span(
        f"state.lease_wait {name}",
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            return await waiting
        except BaseException as error:
            _failed(span, error, traced.name)
            raise


def _state_resolver(fn: Any) -> tuple[str, str] | None:
    """(the state's name, ``new``/``read``/``edit``) for a `State`'s resolver, else None."""
    qualname = getattr(fn, "__qualname__", "")
    if getattr(fn, "__module__", None) != "resolvent" or not qualname.startswith("State["):
        return None
    quoted, _, verb = qualname[len("State[") :].rpartition("].")
    return quoted.strip("'\""), verb


def _store_kind(store: Any) -> str:
    """A store's kind (its class, as ``SqliteStore``): nothing of where it is or what it holds."""
    return store.__class__.__name__ if store is not None else "unknown"


def traced_steps(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """Copies of *steps* whose functions open their spans (see `_Traced`)."""
    tracer = _tracer()
    traced: list[Step] = []
    for step in steps:
        twin = copy.copy(step)
        object.__setattr__(twin, "fn", _Traced(step, tracer))
        traced.append(twin)
    return tuple(traced)


def _call_attributes(plan: Plan, mode: str) -> dict[str, Any]:
    scopes = [s.name for s in Scope if s in plan.scopes]
    return {FUNCTION: plan.name, SCOPES: scopes, MODE: mode}


Outer = tuple[tuple[Hashable, int, dict[str, Any]], ...]


def _outer(plan: Plan) -> Outer:
    """*plan*'s steps of every scope but CALL: (key, its scope's place in a scopes tuple,
    the attributes of its memo hit)."""
    return tuple(
        (step.key, SLOTS[step.scope], {FUNCTION: step.name, SCOPE: step.scope.name})
        for step in plan.steps
        if step.scope is not Scope.CALL
    )


def _memo_hits(span: Span, outer: Outer, scopes: tuple[Any, ...] | None) -> None:
    """An event on the call's *span* for each value of *outer* its scope holds already
    (*scopes*: the scopes tuple the call runs in, see `SLOTS`): the call takes it from the
    memo, and its resolver does not run (no span)."""
    if scopes is None:
        return
    for key, slot, attributes in outer:
        live = scopes[slot]
        if live is not None and key in live.cache:
            span.add_event(MEMO_HIT, attributes)


def _call_span(
    function: Callable[..., Coroutine[Any, Any, Any]], plan: Plan, mode: str, variant: str
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """*function* (a plan's generated *variant*) inside the call's span."""
    tracer, name = _tracer(), f"call {plan.name}"
    attributes = _call_attributes(plan, mode)
    outer = _outer(plan)
    # Where the variant takes the scopes tuple: ``entry(scopes, args)`` (only for a plan
    # with APP values), else ``(args, values, scopes, body)``.
    entry = variant.startswith("entry")

    async def traced(*args: Any) -> Any:
        with tracer.start_as_current_span(
            name,
            attributes={**attributes, BACKEND: _backend()},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            if outer:
                if entry:
                    _memo_hits(span, outer, args[0] if len(args) == 2 else None)
                else:
                    _memo_hits(span, outer, args[2])
            try:
                return await function(*args)
            except BaseException as error:
                _call_failed(span, error)
                raise

    traced.__wrapped__ = function  # type: ignore[attr-defined]
    return traced


def _call_failed(span: Span, error: BaseException) -> None:
    if isinstance(error, CallTimeout):
        span.set_attribute(TIMED_OUT, True)
        span.set_attribute(TIMEOUT, error.timeout)
    raised = _raised.pop(id(error), None)
    if raised is not None and raised[0] is error:  # a resolver's: which one
        span.set_attribute(FAILED_RESOLVER, raised[1])
    _failed(span, error)


class _TracedCode:
    """The `PlanCode` of a traced plan: the plain code generator's functions, each in the
    call's span. Never cold: a traced plan's code is generated when it is compiled."""

    __slots__ = ()

    def is_cold(self, run: Callable[..., Any]) -> bool:
        return False

    def function(self, plan: Plan, variant: str) -> Callable[..., Any] | None:
        function = PLAN_CODE.function(plan, variant)
        if function is None or variant == "resolve":
            # ``resolve`` runs inside a call that has its span (`run_in`), or for a
            # caller of `Call.resolve`, whose own span is the call's.
            return function
        return _call_span(function, plan, "generated", variant)

    def source(self, plan: Plan, variant: str) -> str:
        return PLAN_CODE.source(plan, variant)

    async def run_in(self, call: Any, plan: Plan, kwargs: dict[str, Any]) -> Any:
        """`Call.run` of a traced plan that the call resolves itself (the interpreter, a
        deadline, concurrent branches): `Call.run_here`, in the call's span."""
        if call.concurrent:
            mode = "concurrent"
        elif call.rounds is not None or call.flight is not None or call.cache:
            mode = "interpreter"
        else:
            mode = "generated"
        attributes = {**_call_attributes(plan, mode), BACKEND: _backend()}
        timeout = call._container.call_timeout  # its own container's
        if timeout is not None:
            attributes[TIMEOUT] = timeout
        rounds = call.rounds
        number, first = _round(rounds) if rounds is not None else (0, None)
        if number:
            attributes[ROUND] = number
        with _tracer().start_as_current_span(
            f"call {plan.name}",
            attributes=attributes,
            links=_links(first),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            _memo_hits(span, _outer(plan), call._scopes())
            if rounds is not None:  # carried to the next round, if there is one
                context = first if first is not None else span.get_span_context()
                rounds.asking[_ROUND_KEY] = (
                    f"{number} {context.trace_id:032x} {context.span_id:016x}"
                )
            try:
                return await call.run_here(plan, kwargs)
            except BaseException as error:
                _call_failed(span, error)
                raise


TRACED_CODE = _TracedCode()


# A multi-round call carries its round number, and the span of its first round, to the next
# round in its state, under a key no question's wire key can be (they are identifiers): an
# entry of the questions it asked, which the next round reads back and otherwise ignores.
_ROUND_KEY = " resolvent.round"


def _round(rounds: Any) -> tuple[int, SpanContext | None]:
    """This round's number, and the first round's span (None in the first round)."""
    from opentelemetry.trace import SpanContext, TraceFlags

    carried = rounds.asked.get(_ROUND_KEY)
    try:
        number, trace_id, span_id = carried.split(" ")
        first = SpanContext(
            int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(1)
        )
        return int(number) + 1, first if first.is_valid else None
    except (AttributeError, ValueError):  # none carried (the first round), or malformed
        return 1, None


def _links(first: SpanContext | None) -> list[Link] | None:
    if first is None:
        return None
    from opentelemetry.trace import Link

    return [Link(first)]


def traced(step: Step) -> bool:
    """Whether *step* is a traced plan's."""
    return isinstance(cast(object, step.fn), _Traced)


async def answer_span(step: Step, answer: Awaitable[Any]) -> Any:
    """Wait for a person's *answer* to *step*'s question in a span of its own: the wait,
    and the outcome (accepted, declined, cancelled; never the value)."""
    labels = {FUNCTION: step.name}
    attributes: dict[str, Any] = {**labels, SCOPE: step.scope.name}
    start = time.perf_counter()
    with _tracer().start_as_current_span(
        f"ask {step.name}",
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        outcome = "failed"
        try:
            value = await answer
            outcome = _outcome(value)
            return value
        except BaseException as error:
            if _failed(span, error) is None:
                outcome = "cancelled"
            raise
        finally:
            span.set_attribute("resolvent.answer.outcome", outcome)
            _instruments().answer_wait.record(
                time.perf_counter() - start, {**labels, "resolvent.answer.outcome": outcome}
            )


def _outcome(value: Any) -> str:
    action = getattr(value, "action", None)
    if action == "accept":
        return "accepted"
    if action == "decline":
        return "declined"
    if action == "cancel":
        return "cancelled"
    return "accepted"
