"""The spans of a traced plan's steps: a resolver's, a resource's set-up and teardown, a
`State`'s load, its lease wait, commit and rollback; the attribute names every span of
resolvent uses, and the metrics. Loaded with `resolvent._engine.tracing`, when a plan is
compiled with tracing on.

A traced step is a copy of the plain one whose function is a `Traced` callable: the
resolver in its span, or a proxy (`_Resource`) of the generator or context manager a
resource's provider returns, opening the set-up span when it is entered and the teardown
span when it is closed, under the call's span even when it closes later or in another
task. Every executor runs the same steps, so all of them emit the same spans.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from .._reading.kinds import Kind

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Span, Tracer

    from .._graph.plan import Step

__all__ = (
    "BACKEND",
    "FAILED_RESOLVER",
    "FUNCTION",
    "MEMO_HIT",
    "MODE",
    "ROUND",
    "SCOPE",
    "SCOPES",
    "TIMED_OUT",
    "TIMEOUT",
    "Traced",
    "instruments",
    "lease_wait",
    "mark_failed",
    "otel_tracer",
    "traced_steps",
    "who_raised",
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


def otel_tracer() -> Tracer:
    """The tracer of resolvent's spans, binding what each span calls of OpenTelemetry."""
    global _attach, _detach, _in_context
    from opentelemetry import context, trace

    _attach, _detach, _in_context = context.attach, context.detach, trace.set_span_in_context
    return trace.get_tracer(_NAME)


# Bound by `otel_tracer` (as a plan is compiled traced): OpenTelemetry's, called per span.
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


def instruments() -> _Metrics:
    from opentelemetry import metrics

    if not _metrics or _metrics[0].provider is not metrics.get_meter_provider():
        _metrics[:] = [_Metrics()]
    return _metrics[0]


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


def mark_failed(span: Span, error: BaseException, where: str | None = None) -> str | None:
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
# id, until the call's span asks (`who_raised`). Bounded: an error no call span
# reads (a `Call.resolve` of a traced plan has none) is forgotten after a few others.
_raised: OrderedDict[int, tuple[BaseException, str]] = OrderedDict()
_RAISED_KEPT = 32


def _raised_by(error: BaseException, name: str) -> None:
    if id(error) in _raised:
        return  # an outer span it crossed: the first is the one that raised it
    _raised[id(error)] = (error, name)
    while len(_raised) > _RAISED_KEPT:
        _raised.popitem(last=False)  # one step: safe beside worker threads


def who_raised(error: BaseException) -> str | None:
    """The resolver whose span *error* crossed first (the one that raised it), once."""
    raised = _raised.pop(id(error), None)
    return raised[1] if raised is not None and raised[0] is error else None


def _kind(step: Step) -> str:
    if step.kind.is_resource:
        return "resource"
    if step.kind is Kind.ASYNC:
        return "async"
    return "inline" if step.inline else "thread"


class Traced:
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

    def __init__(self, traced: Traced, name: str, parent: Context | None) -> None:
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
            metrics = instruments()
            if error is not None:
                name = self.traced.name
                failed = mark_failed(span, error, name)
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

    def __init__(self, traced: Traced, inner: Any) -> None:
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
        if not self.opened:  # (a `State`'s only async generator, `new`, loads nothing)
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
        if self.traced.state is not None:  # a `State`'s edit, whose load may wait for a lease
            loading = _LOADING.set(self.traced)
            try:
                with self._setup():
                    return await self.inner.__aenter__()
            finally:
                _LOADING.reset(loading)
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
_LOADING: ContextVar[Traced | None] = ContextVar("resolvent_state_loading", default=None)

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
            mark_failed(span, error, traced.name)
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
    """Copies of *steps* whose functions open their spans (see `Traced`)."""
    tracer = otel_tracer()
    traced: list[Step] = []
    for step in steps:
        twin = copy.copy(step)
        object.__setattr__(twin, "fn", Traced(step, tracer))
        object.__setattr__(twin, "positional", None)  # called as its function is not
        traced.append(twin)
    return tuple(traced)
