"""Running plans: tiering (a plan's first calls interpreted, then its generated code), the
`PlanCode` plans are built with, and the timeout error. It never generates or interprets itself.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .._graph.plan import Step, direct_shape
from .._runtime.sharing import MISSING, Sharing
from .._vocabulary.errors import CallTimeout
from .._vocabulary.questions import Asker
from .._vocabulary.scopes import CALL_SLOT
from .interpreter import interpret, interpret_alone, run_concurrently, run_step

if TYPE_CHECKING:
    from typing import Protocol

    from .._graph.plan import Plan, PlanCode
    from .._runtime.rounds import Rounds

    class RunsHere(Protocol):
        """What `run_in` asks of a call scope (`resolvent.Call`)."""

        def run_here(self, plan: Plan, kwargs: dict[str, Any], /) -> Awaitable[Any]: ...


__all__ = (
    "EMPTY",
    "HOT_AFTER",
    "PLAN_CODE",
    "cold_runner",
    "cold_shape",
    "is_cold",
    "run_branches",
    "timed_out",
)


EMPTY: Mapping[Any, Any] = MappingProxyType({})
"""No arguments or framework values: what a call given none passes its plan."""

HOT_AFTER = 2
"""How many calls of a plan `Container.run` interprets before generating its code."""


class _NoCall:
    """The call `interpret` is given for a plan started without a call scope, as the
    generated code is given None: nobody to ask, and a memo for this call only."""

    __slots__ = ("cache", "sharing")
    exits: Any = None
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


def cold_runner(plan_ref: list[Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """A ``run_fn`` that interprets the plan's first `HOT_AFTER` calls, then generates
    its code (`Plan.heat`) and runs that from then on.

    Most handlers of a large server are called rarely, and generating code costs as
    much as a few hundred interpreted calls: start-up pays only for reading and
    checking the graph. A call given a call scope generates at once, so `Call.run`
    runs the same code as ever.
    """
    calls = 0
    alone: bool | None = None  # whether no step may ask (see `interpret_alone`)

    async def run(
        args: dict[str, Any],
        values: Mapping[Any, Any],
        scopes: tuple[Any, ...],
        body: Callable[..., Any],
    ) -> Any:
        nonlocal calls, alone
        plan = plan_ref[0]
        if scopes[CALL_SLOT] is not None or calls >= HOT_AFTER:
            return await plan.heat()(args, values, scopes, body)
        calls += 1
        if alone is None:
            alone = not any(s.may_ask for s in plan.steps)
        if alone:
            kwargs = await interpret_alone(plan, args, values, scopes)
        else:
            kwargs = await interpret(plan, _NoCall(), args, values, scopes, concurrent=False)
        ret = body(**args, **kwargs)
        return (await ret) if plan.fn_is_async else ret

    return run


_COLD_CODE = cold_runner([None]).__code__


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
    if inspect.isawaitable(result):  # as `Call.run_here` calls it
        result = await result
    return result


class _PlanCode:
    """The `PlanCode` every plan is built with: its code is generated by `generate`."""

    __slots__ = ()

    def is_cold(self, run: Callable[..., Any]) -> bool:
        return is_cold(run)

    def function(self, plan: Plan, variant: str) -> Callable[..., Any] | None:
        if (variant == "direct" or variant == "kept") and not direct_shape(plan.steps):
            return None
        return _generate(plan, variant, build=True)[1]

    def source(self, plan: Plan, variant: str) -> str:
        return _generate(plan, variant, build=False)[0]

    def run_in(self, call: RunsHere, plan: Plan, kwargs: dict[str, Any]) -> Awaitable[Any]:
        return call.run_here(plan, kwargs)  # what `Call.run` would do without a plan's code


def _generate(plan: Plan, variant: str, *, build: bool) -> tuple[str, Callable[..., Any] | None]:
    from .codegen import generate  # loaded with the first plan that turns hot

    return generate(
        (plan,),  # what the code reads as PLAN[0]; the plan exists: no list to fill later
        plan.name,
        plan.fn_is_async,
        plan.steps,
        plan.inputs,
        plan.arguments,
        variant,
        build=build,
        root_threaded=plan.fn_threaded,
        body=plan.fn,
    )


PLAN_CODE: PlanCode = _PlanCode()
"""What `Plan` runs its code with; passed in by whoever builds a plan."""


def timed_out(plan: Plan, timeout: float, cancelled: BaseException) -> CallTimeout:
    """The error for *plan*'s call whose ``call_timeout`` expired; *cancelled* is the
    cancellation the deadline sent, whose trace tells which resolvers were running."""
    running: list[Step] = []
    tb = cancelled.__traceback__
    while tb is not None:  # the deepest steps the cancellation passed through
        frame = tb.tb_frame
        code = frame.f_code
        if code is run_step.__code__ or code is interpret.__code__:  # one step at a time
            step = frame.f_locals.get("step")
            running = [step] if isinstance(step, Step) else running
        elif code is run_concurrently.__code__:  # branches: every started, unfinished one
            local = frame.f_locals
            vals, waiting, ready = local.get("vals"), local.get("waiting"), local.get("ready")
            if vals is not None and waiting is not None and ready is not None:
                running = [
                    s
                    for s in plan.steps
                    if not waiting[s.index] and vals[s.index] is MISSING and s.index not in ready
                ]
        elif code.co_filename.startswith("<resolvent plan "):  # generated code
            lines, owner = frame.f_globals.get("LINES"), frame.f_globals.get("PLAN")
            if lines is not None and owner and lines[0] == code.co_filename:
                from .._runtime.failures import line_step  # loaded with the generated code

                index = line_step(lines, tb.tb_lineno)
                running = [owner[0].step_at(index)] if index >= 0 else running
        tb = tb.tb_next
    told: list[tuple[str, str, str]] = []
    for step in running:
        if not plan.has(step):
            told.append((step.param, step.name, step.name))  # another plan's (an override's)
            continue
        index, param = step.index, ""
        while index >= 0:  # up to the parameter of the plan's function
            index, param = plan.parent(index)
        told.append((param, step.name, plan.path_to(step.index)))
    return CallTimeout(timeout, plan.name, tuple(told))
