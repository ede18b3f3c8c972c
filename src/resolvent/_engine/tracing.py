"""Tracing: a traced plan, and the call's span. Loaded only when a plan is compiled with
tracing on; a plan compiled with it off never reaches this module nor `spans`.

A traced plan is an ordinary plan whose steps are copies of the plain ones whose functions
open their spans (`resolvent._engine.spans`), and whose code (`TRACED_CODE`) wraps each
function it generates, and the resolution a call makes itself (`run_in`), in the call's
span. Every executor (generated code, the interpreter, concurrent branches) runs the same
steps, so all of them emit the same tree; the plain plan's code and the executors
themselves are untouched. Here too: a multi-round call's round number and its link to the
first round, and a question's span. Whether a plan is traced is decided where it is
compiled (`resolvent._container.plans.tracing_on`), which loads this module only for one that is.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import TYPE_CHECKING, Any, cast

from .._runtime.home import asyncio_loop
from .._vocabulary.errors import CallTimeout, ResolventError
from .._vocabulary.scopes import SLOTS, Scope
from .spans import (
    BACKEND,
    FAILED_RESOLVER,
    FUNCTION,
    MEMO_HIT,
    MODE,
    ROUND,
    SCOPE,
    SCOPES,
    TIMED_OUT,
    TIMEOUT,
    Traced,
    instruments,
    mark_failed,
    otel_tracer,
    who_raised,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Link, Span, SpanContext

    from .._graph.plan import Plan, Step

__all__ = (
    "TRACED_CODE",
    "answer_span",
    "require_api",
    "traced",
)


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


def _backend() -> str:
    return "trio" if asyncio_loop() is None else "asyncio"


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
    tracer, name = otel_tracer(), f"call {plan.name}"
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
    raised = who_raised(error)
    if raised is not None:  # a resolver's: which one
        span.set_attribute(FAILED_RESOLVER, raised)
    mark_failed(span, error)


class _TracedCode:
    """The `PlanCode` of a traced plan: the plain code generator's functions, each in the
    call's span. Never cold: a traced plan's code is generated when it is compiled."""

    __slots__ = ()

    def is_cold(self, run: Callable[..., Any]) -> bool:
        return False

    def function(self, plan: Plan, variant: str) -> Callable[..., Any] | None:
        from .codegen import plan_function  # a traced plan's code is generated at once

        function = plan_function(plan, variant)
        if function is None or variant == "resolve":
            # ``resolve`` runs inside a call that has its span (`run_in`), or for a
            # caller of `Call.resolve`, whose own span is the call's.
            return function
        return _call_span(function, plan, "generated", variant)

    def source(self, plan: Plan, variant: str) -> str:
        from .codegen import plan_source

        return plan_source(plan, variant)

    async def run_in(self, call: Any, plan: Plan, kwargs: dict[str, Any]) -> Any:
        """`Call.run` of a traced plan that the call resolves itself (the interpreter, a
        deadline, concurrent branches): `Call.run_here`, in the call's span."""
        if call.concurrent and plan.overlaps:  # else the sequential code runs (`_resolve`)
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
        with otel_tracer().start_as_current_span(
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
    return isinstance(cast(object, step.fn), Traced)


async def answer_span(step: Step, answer: Awaitable[Any]) -> Any:
    """Wait for a person's *answer* to *step*'s question in a span of its own: the wait,
    and the outcome (accepted, declined, cancelled; never the value)."""
    labels = {FUNCTION: step.name}
    attributes: dict[str, Any] = {**labels, SCOPE: step.scope.name}
    start = time.perf_counter()
    with otel_tracer().start_as_current_span(
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
            if mark_failed(span, error) is None:
                outcome = "cancelled"
            raise
        finally:
            span.set_attribute("resolvent.answer.outcome", outcome)
            instruments().answer_wait.record(
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
