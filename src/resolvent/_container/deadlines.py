"""A call's time (`Deadlines`, `Call`'s base): its resolution under ``call_timeout``, a
person's answer under ``answer_timeout``, and the first deadline paused while a person
answers, since the wait is theirs, not the resolvers'; and the error for a deadline that
expired, naming the resolvers it cut short (`timed_out`). One concern of `Call`, as
`AppScope` is of `Container`; loaded with it. And `CallHost`, what a call reads of its
container."""

# A call reads its container's private state (`CallHost`): they are one unit.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from sys import modules as _modules
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from .._engine.interpreter import interpret, run_concurrently, run_step
from .._graph.plan import Plan, Step
from .._runtime.sharing import MISSING
from .._runtime.teardown import Exits
from .._vocabulary.errors import AnswerTimeout, CallTimeout

__all__ = ("CallHost", "Deadlines", "timed_out")


if TYPE_CHECKING:
    from .._runtime.cache import LiveScope
    from .plans import PlanCache

    KW = TypeVar("KW", bound=Mapping[str, Any])

    class CallHost(Protocol):
        """What a call reads of its container (`Container` is the one implementation).

        The container's own, not public: a call and its container are one unit.
        """

        _app: LiveScope | None  # the open APP scope, or None
        answer_timeout: float | None
        _concurrent: bool  # `concurrent` and `call_timeout`, read without a property
        _call_timeout: float | None
        _overridden: list[int]  # the open override blocks, in every context
        _plans: PlanCache

        @property
        def concurrent(self) -> bool: ...
        @property
        def call_timeout(self) -> float | None: ...
        def _current(self, plan: Plan, /) -> Plan: ...
        def _for_run(
            self, fn: Callable[..., Any], kwargs: KW, /
        ) -> tuple[Callable[..., Any], Plan, KW | dict[str, Any]]: ...


class Deadlines:
    """The deadlines of one call: `Call`'s base, which sets both slots as it is made."""

    __slots__ = ("_deadline", "_paused")

    _deadline: anyio.CancelScope | None  # call_timeout's, while resolving
    _paused: list[float] | None  # [deadline, paused at, waiting answers] while paused
    if TYPE_CHECKING:  # `Call`'s, which the deadlines read
        _container: CallHost
        exits: Exits

        async def _resolve(self, plan: Plan, args: Mapping[str, Any]) -> dict[str, Any]: ...

    async def _resolve_within(
        self, plan: Plan, args: Mapping[str, Any], seconds: float
    ) -> dict[str, Any]:
        """`_resolve` under ``call_timeout``; on expiry a `CallTimeout` naming what ran."""
        cancelled: BaseException | None = None
        try:
            with anyio.fail_after(seconds) as scope:
                self.exits.deadline = scope.deadline
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
        tracing = _modules.get("resolvent._engine.tracing")  # loaded by a traced plan
        if tracing is not None and tracing.traced(step):
            answer = tracing.answer_span(step, answer)
        scope = self._deadline
        bound = self._container.answer_timeout
        if scope is None and bound is None:
            return await answer
        paused = None
        if scope is not None:
            paused = self._paused
            if paused is None:  # the first of the questions waiting at once
                paused = self._paused = [scope.deadline, anyio.current_time(), 0]
                scope.deadline = self.exits.deadline = math.inf
            paused[2] += 1
        try:
            if bound is None:
                return await answer
            with anyio.move_on_after(bound):
                return await answer
            raise AnswerTimeout(bound, step.name, step.param)
        finally:
            if scope is not None and paused is not None:
                paused[2] -= 1
                if not paused[2]:
                    deadline = paused[0] + (anyio.current_time() - paused[1])
                    scope.deadline = self.exits.deadline = deadline
                    self._paused = None


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
