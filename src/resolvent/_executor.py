"""Running a plan: generated straight-line code for the fast path, an interpreter for
everything else (concurrent branches, multi-round asking, a call scope reused across
plans). Both follow the same plan and share the helpers below, so they agree.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio

from ._annotations import NO_DEFAULT, type_name
from ._cache import LiveScope
from ._context import adopt, keep
from ._errors import (
    AnswerTimeout,
    CallTimeout,
    InputRequired,
    InvalidAnswer,
    ResolventError,
)
from ._kinds import Kind
from ._plan import Input, Step
from ._questions import QUESTION_KINDS, Answered, Asker, Outcome, QuestionKind, as_outcome
from ._resources import enter, hold, open_resource, plain_cell
from ._scopes import Scope
from ._shield import begin, outer_cancelled
from ._teardown import Exits, close_now, close_rest, settle
from ._threads import abandonable, in_thread

if TYPE_CHECKING:
    from ._plan import Plan, PlanCode

__all__ = ("PLAN_CODE", "Rounds", "Sharing", "direct_shape", "generate", "interpret")

MISSING: Any = object()
PENDING: Any = object()
_counter = itertools.count()


class CallLike(Protocol):
    """What the executor needs of a call scope (implemented by `resolvent.Call`)."""

    exits: list[tuple[Step, Any]]
    cache: dict[Hashable, Any]
    flight: Plan | None
    sharing: Sharing | None
    rounds: Rounds | None
    asker: Asker | None
    answerer: Callable[[Any, Any], Awaitable[Any]] | None

    async def answered(self, step: Step, answer: Awaitable[Any]) -> Any:
        """Await a person's *answer* to *step*'s question (outside ``call_timeout``)."""
        ...


class _Pending(Exception):
    """A question has no answer yet in this round."""


# --- one call, several resolutions ---------------------------------------------------
# Tasks of one call scope may resolve in it at the same time (a task group inside
# `async with container.call() as call:`); each CALL value is still made once, by the
# first to ask, and the others wait for it. The first resolution in a call runs the
# generated code, which records its values only when it is done (the *flight*, see
# `Call.run`): a resolution that needs one of its values waits for it to land. Any other
# resolution runs the interpreter, which claims each value before making it.


class Sharing:
    """The resolutions in flight in one call scope, and the values they are making."""

    __slots__ = ("active", "failure", "keys", "landed", "starting")

    def __init__(self) -> None:
        self.active = 0  # interpreted resolutions in flight
        self.starting: dict[Hashable, _Creation] = {}
        self.landed: anyio.Event | None = None  # set when the flight lands
        self.failure: tuple[Hashable, BaseException] | None = None  # the flight's
        self.keys: tuple[Plan | None, frozenset[Hashable]] = (None, frozenset())

    def flight_keys(self, flight: Plan) -> frozenset[Hashable]:
        if self.keys[0] is not flight:
            keys = frozenset(s.key for s in flight.steps if s.scope is Scope.CALL)
            self.keys = (flight, keys)
        return self.keys[1]

    def wake(self) -> None:
        landed, self.landed = self.landed, None
        if landed is not None:
            landed.set()


class _Creation:
    """A CALL value being made by one resolution: what the others wait for."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done: anyio.Event | None = None  # made by the first waiter
        self.error: BaseException | None = None


async def _claim(call: CallLike, step: Step) -> Any:
    """The value of CALL *step* once another resolution has made it, else a `_Creation`
    that this one now owns (and ends with `_release`)."""
    sharing = call.sharing
    assert sharing is not None
    key = step.key
    while True:
        value = call.cache.get(key, MISSING)
        if value is not MISSING:
            return value
        creation = sharing.starting.get(key)
        if creation is not None:
            if creation.done is None:
                creation.done = anyio.Event()
            await creation.done.wait()
            if creation.error is not None:
                raise creation.error
            continue  # made (or its maker was cancelled: this one makes it)
        flight = call.flight
        if flight is not None and key in sharing.flight_keys(flight):
            if sharing.landed is None:
                sharing.landed = anyio.Event()
            await sharing.landed.wait()
            failure = sharing.failure
            if failure is not None and failure[0] == key:
                raise failure[1]
            continue
        creation = sharing.starting[key] = _Creation()
        return creation


def _release(
    call: CallLike, key: Hashable, creation: _Creation, error: BaseException | None
) -> None:
    sharing = call.sharing
    assert sharing is not None
    del sharing.starting[key]
    if error is not None and not isinstance(error, anyio.get_cancelled_exc_class()):
        creation.error = error  # a cancelled maker's waiters make the value themselves
    if creation.done is not None:
        creation.done.set()


def landed(call: CallLike, plan: Plan, index: int, error: BaseException, local: Any) -> None:
    """The flight *plan* failed at step *index*: keep the CALL values it made before, and
    its failure for the resolutions waiting for that step; let them go on."""
    for step in plan.steps[: max(index, 0)]:
        if step.scope is Scope.CALL:
            value = local.get(f"v{step.index}", MISSING)
            if value is not MISSING:
                call.cache[step.key] = value
    sharing = call.sharing
    call.flight = None
    if sharing is None:
        return
    if index >= 0 and not isinstance(error, anyio.get_cancelled_exc_class()):
        sharing.failure = (plan.steps[index].key, error)
    sharing.wake()


# --- questions ------------------------------------------------------------------------


def question_kind(question: Any) -> QuestionKind:
    cls_: type[object] = type(cast(object, question))
    kind = QUESTION_KINDS.get(cls_)
    if kind is None:
        for cls in cls_.__mro__:
            if cls in QUESTION_KINDS:
                return QUESTION_KINDS[cls]
        raise ResolventError(f"{type(question).__name__} is not a known question type")
    return kind


async def ask(call: CallLike | None, step: Step, question: Any) -> Answered:
    """Answer *step*'s question through the call's round state, answerer or asker.

    *call* is None when `Container.run` started the plan without a call scope: nobody
    can answer there, so a plan whose resolvers only *may* ask needs no scope.
    """
    kind = question_kind(question)
    if call is not None:
        if call.rounds is not None:
            return Answered(call.rounds.answer(step, question, kind))
        # A person answers: the wait is theirs, not the resolvers' (see `Call.answered`).
        if call.answerer is not None:
            return Answered(await call.answered(step, call.answerer(step, question)))
        if call.asker is not None and kind.ask is not None:
            try:
                return Answered(await call.answered(step, kind.ask(call.asker, question)))
            except InvalidAnswer as exc:
                raise InvalidAnswer.at(step.name, step.wire_key, exc, step.param) from None
    raise ResolventError(
        f"{step.name} asked a question ({question!r}) but this call has nobody to ask.\n"
        "  fix: open the call with an asker, `container.call(asker=...)`, or use rounds=True"
    )


class Rounds:
    """Multi-round asking: questions are batched per round, answers ride an opaque state.

    Nothing is kept between rounds but the state string the caller carries, so a later
    round may run in another process. An answer is accepted only for the exact question
    (by digest) it was given to; each question is asked once.
    """

    MAX_STATE = 1 << 20

    def __init__(
        self,
        answers: Mapping[str, Any] | None,
        state: str | None,
        answer_timeout: float | None = None,
    ) -> None:
        self.answers = dict(answers or {})
        self.recorded, self.asked = self._decode(state)
        self.pending: dict[str, Any] = {}
        self.asking: dict[str, str] = {}
        self.persist: dict[str, dict[str, Any]] = {}
        # With an answer bound: when each question was first asked (wall clock, since
        # the next round may run in another process), carried in the state.
        self.answer_timeout = answer_timeout
        self.asked_at: dict[str, float] = {}
        if answer_timeout is not None and self.asked:
            self.asked_at = self._decode_times(state)

    @classmethod
    def _decode_times(cls, state: Any) -> dict[str, float]:
        import json

        data = _as_dict(json.loads(state))
        times = _as_dict(data.get("at")) if data is not None else None
        if times is None:
            return {}
        return {k: float(t) for k, t in times.items() if isinstance(t, int | float)}

    @classmethod
    def _decode(cls, state: Any) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """Decode untrusted state; anything malformed counts as no progress."""
        if not state or not isinstance(state, str) or len(state) > cls.MAX_STATE:
            return {}, {}
        import json  # only a round that carries state; not paid by `import resolvent`

        try:
            data = _as_dict(json.loads(state))
        except ValueError:
            return {}, {}
        if data is None or data.get("v") != 1:
            return {}, {}
        recorded, asked = _as_dict(data.get("answers")), _as_dict(data.get("asked"))
        if recorded is None or asked is None:
            return {}, {}
        good: dict[str, dict[str, Any]] = {}
        for key, value in recorded.items():
            entry = _as_dict(value)
            if entry is not None and isinstance(entry.get("q"), str) and "r" in entry:
                good[key] = entry
        pinned = {key: digest for key, digest in asked.items() if isinstance(digest, str)}
        return good, pinned

    def answer(self, step: Step, question: Any, kind: QuestionKind) -> Outcome:
        key = step.wire_key
        digest = kind.digest(question)
        record = self.recorded.get(key)
        if record is not None and record["q"] == digest:
            try:
                outcome = kind.parse(question, record["r"])
            except InvalidAnswer:
                pass
            else:
                self.persist[key] = record
                return outcome
        raw = self.answers.get(key)
        asked_before = self.asked.get(key) == digest
        if raw is not None and asked_before:
            bound = self.answer_timeout
            if bound is not None and key in self.asked_at:
                import time

                if time.time() - self.asked_at[key] > bound:
                    raise AnswerTimeout(bound, step.name, step.param)
            try:
                outcome = kind.parse(question, raw)
            except InvalidAnswer as exc:
                raise InvalidAnswer.at(step.name, step.wire_key, exc, step.param) from None
            self.persist[key] = {"q": digest, "r": raw}
            return outcome
        self.pending[key] = question
        self.asking[key] = digest
        if self.answer_timeout is not None and not (asked_before and key in self.asked_at):
            import time

            self.asked_at[key] = time.time()
        raise _Pending

    def state(self) -> str:
        """The state to carry into the next round."""
        import json

        state: dict[str, Any] = {"v": 1, "answers": self.persist, "asked": self.asking}
        if self.answer_timeout is not None:
            state["at"] = {key: self.asked_at[key] for key in self.asking if key in self.asked_at}
        return json.dumps(state, sort_keys=True, separators=(",", ":"))

    def raise_if_pending(self) -> None:
        if self.pending:
            raise InputRequired(dict(self.pending), self.state())


def _as_dict(value: object) -> dict[str, Any] | None:
    """*value* as a JSON object with string keys, or None."""
    if not isinstance(value, dict):
        return None
    items = cast("dict[object, Any]", value)
    if not all(isinstance(key, str) for key in items):
        return None
    return cast("dict[str, Any]", items)


# --- errors ---------------------------------------------------------------------------


def explain(
    exc: BaseException, plan: Plan, index: int, args: Mapping[str, Any], values: Mapping[Any, Any]
) -> BaseException:
    """Add a note naming the resolver chain; turn a missing argument/value into advice."""
    if index < 0 or isinstance(exc, (anyio.get_cancelled_exc_class(), InputRequired)):
        return exc
    step = plan.steps[index]
    if isinstance(exc, KeyError) and exc.args:
        missing = exc.args[0]
        for item in step.inputs:
            if item.source == "arg" and item.arg == missing and missing not in args:
                return ResolventError(
                    f"call argument {missing!r} needed by {step.name} was not given.\n"
                    f"  path: {plan.path_to(index)}\n"
                    f"  fix: pass {missing}=... when calling {plan.name}"
                )
            if item.source == "value" and item.value_type is missing and missing not in values:
                name = type_name(missing)
                return ResolventError(
                    f"no framework value of type {name} was given to this call, but {step.name} "
                    f"needs one (parameter {item.name!r}).\n"
                    f"  path: {plan.path_to(index)}\n"
                    f"  fix: open the call with container.call(values={{{name}: ...}})"
                )
    note = f"resolvent: raised by {step.name} ({step.scope.name}) resolving {plan.path_to(index)}"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    return exc


def _fail(
    exc: BaseException,
    plan: Plan,
    lines: tuple[str, dict[int, int]],
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    call: CallLike | None = None,
    local: Any = None,
) -> BaseException:
    """Map a failure inside generated code (*lines*: its code name, line -> step); if
    it was a call's flight (see `Sharing`), land it (*local*: its variables)."""
    code_name, line_steps = lines
    index = -1
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == code_name:
            index = line_steps.get(tb.tb_lineno, index)
        tb = tb.tb_next
    error = explain(exc, plan, index, args, values)
    if call is not None and call.flight is plan:
        landed(call, plan, index, error, local)
    return error


def timed_out(plan: Plan, timeout: float, cancelled: BaseException) -> CallTimeout:
    """The error for *plan*'s call whose ``call_timeout`` expired; *cancelled* is the
    cancellation the deadline sent, whose trace tells which resolvers were running."""
    running: list[Step] = []
    tb = cancelled.__traceback__
    while tb is not None:  # the deepest steps the cancellation passed through
        frame = tb.tb_frame
        code = frame.f_code
        if code is _run_step.__code__:  # the interpreter, one step at a time
            step = frame.f_locals.get("step")
            running = [step] if isinstance(step, Step) else running
        elif code is _run_concurrently.__code__:  # branches: every started, unfinished one
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
                index = lines[1].get(tb.tb_lineno, -1)
                running = [owner[0].steps[index]] if index >= 0 else running
        tb = tb.tb_next
    steps = plan.steps
    told: list[tuple[str, str, str]] = []
    for step in running:
        if not (step.index < len(steps) and steps[step.index] is step):
            told.append((step.param, step.name, step.name))  # another plan's (an override's)
            continue
        top = step
        while top.parent >= 0:
            top = steps[top.parent]
        told.append((top.param, step.name, plan.path_to(step.index)))
    return CallTimeout(timeout, plan.name, tuple(told))


# --- the interpreter ------------------------------------------------------------------


def _consume(value: Any, item: Input, consumer: str) -> Any:
    if item.outcome is not None:
        return item.outcome.convert(as_outcome(value))
    if value.__class__ is Answered:
        return value.unwrap(item.name, consumer)
    return value


def _kwargs(
    inputs: tuple[Input, ...],
    vals: list[Any],
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    consumer: str,
) -> dict[str, Any] | None:
    kwargs: dict[str, Any] = {}
    for item in inputs:
        if item.source == "step":
            value = vals[item.step]
            if value is PENDING:
                return None
            kwargs[item.name] = _consume(value, item, consumer)
        elif item.source == "arg":
            if item.arg in args:
                kwargs[item.name] = args[item.arg]
            elif item.default is not NO_DEFAULT:
                kwargs[item.name] = item.default
            else:
                raise KeyError(item.arg)
        else:
            kwargs[item.name] = values[item.value_type]
    return kwargs


async def _run_step(
    step: Step,
    vals: list[Any],
    call: CallLike,
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    app: LiveScope | None,
    session: LiveScope | None,
) -> Any:
    kwargs = _kwargs(step.inputs, vals, args, values, step.name)
    if kwargs is None:
        return PENDING
    if step.scope is not Scope.CALL:
        live = app if step.scope is Scope.APP else session
        assert live is not None
        value = live.cache.get(step.key, MISSING)
        if value is MISSING:
            value = await live.create(step, step.key, functools.partial(step.fn, **kwargs))
        return value
    key = step.key
    value = call.cache.get(key, MISSING)
    if value is not MISSING:
        return value
    creation = await _claim(call, step)
    if creation.__class__ is not _Creation:
        return creation  # another resolution of this call made it
    try:
        kind = step.kind
        if kind is Kind.ASYNC:
            value = await step.fn(**kwargs)
        elif kind is Kind.SYNC:
            value = (
                step.fn(**kwargs)
                if step.inline
                else await in_thread(functools.partial(step.fn, **kwargs))
            )
        else:
            obj = step.fn(**kwargs)
            if step.awaits:  # an async factory of a context manager
                obj = await obj
            value = await enter(call.exits, step, obj)
        if step.may_ask and value.__class__ in QUESTION_KINDS:
            try:
                value = await ask(call, step, value)
            except _Pending:
                _release(call, key, creation, None)
                return PENDING
    except BaseException as error:
        _release(call, key, creation, error)
        raise
    call.cache[key] = value
    _release(call, key, creation, None)
    return value


async def interpret(
    plan: Plan,
    call: CallLike,
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    app: LiveScope | None,
    session: LiveScope | None,
    *,
    concurrent: bool,
) -> dict[str, Any]:
    """Resolve *plan* step by step (or concurrently) and return the injected kwargs."""
    sharing = call.sharing
    if sharing is None:
        sharing = call.sharing = Sharing()
    sharing.active += 1
    try:
        return await _interpret(plan, call, args, values, app, session, concurrent=concurrent)
    finally:
        sharing.active -= 1


async def _interpret(
    plan: Plan,
    call: CallLike,
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    app: LiveScope | None,
    session: LiveScope | None,
    *,
    concurrent: bool,
) -> dict[str, Any]:
    vals: list[Any] = [MISSING] * len(plan.steps)
    if concurrent and len(plan.steps) > 1:
        await _run_concurrently(plan, vals, call, args, values, app, session)
    else:
        for step in plan.steps:
            try:
                vals[step.index] = await _run_step(step, vals, call, args, values, app, session)
            except BaseException as exc:
                error = explain(exc, plan, step.index, args, values)
                if error is exc:
                    raise
                raise error from exc
    if call.rounds is not None:
        call.rounds.raise_if_pending()
    kwargs = _kwargs(plan.inputs, vals, args, values, plan.name)
    assert kwargs is not None
    return kwargs


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


def cold_shape(steps: tuple[Step, ...], root_threaded: bool) -> bool:
    """True if *steps* can start interpreted: the interpreter runs them exactly as the
    generated ``run`` does (no CALL resource to enter, no worker-thread step whose hops
    the generated code would share, a handler called on the loop)."""
    return not root_threaded and all(
        s.scope is not Scope.CALL or not (s.kind.is_resource or s.threaded) for s in steps
    )


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

    async def run(
        args: dict[str, Any],
        values: Mapping[Any, Any],
        call: Any,
        app: LiveScope | None,
        session: LiveScope | None,
        body: Callable[..., Any],
    ) -> Any:
        nonlocal calls
        plan = plan_ref[0]
        if call is not None or calls >= HOT_AFTER:
            return await plan.heat()(args, values, call, app, session, body)
        calls += 1
        kwargs = await interpret(plan, _NoCall(), args, values, app, session, concurrent=False)
        ret = body(**args, **kwargs)
        return (await ret) if plan.fn_is_async else ret

    return run


_COLD_CODE = cold_runner([None]).__code__


class _PlanCode:
    """The `PlanCode` every plan is built with: its code is generated by `generate`."""

    __slots__ = ()

    def is_cold(self, run: Callable[..., Any]) -> bool:
        return is_cold(run)

    def function(self, plan: Plan, variant: str) -> Callable[..., Any] | None:
        if variant == "direct" and not direct_shape(plan.steps):
            return None
        return _generate(plan, variant, build=True)[1]

    def source(self, plan: Plan, variant: str) -> str:
        return _generate(plan, variant, build=False)[0]


def _generate(plan: Plan, variant: str, *, build: bool) -> tuple[str, Callable[..., Any] | None]:
    return generate(
        [plan],
        plan.name,
        plan.fn_is_async,
        plan.steps,
        plan.inputs,
        plan.arguments,
        variant,
        build=build,
        root_threaded=plan.fn_threaded,
    )


PLAN_CODE: PlanCode = _PlanCode()
"""What `Plan` runs its code with; passed in by whoever builds a plan."""


async def _run_concurrently(
    plan: Plan,
    vals: list[Any],
    call: CallLike,
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    app: LiveScope | None,
    session: LiveScope | None,
) -> None:
    """Run independent branches at once; a step starts when its inputs are ready.

    A call opened with ``async with`` holds each resource in a task of its own (see
    `Exits`), so resources set up in a branch are torn down in the task that set them
    up; they are then branches like any other. Otherwise resources are entered by the
    calling task, one at a time. If a step fails, the others are cancelled and the
    first failure is raised as itself (later ones are attached as notes). A branch task
    runs in a copy of the calling task's context; what its step set there is copied
    back when it finishes, so the steps after it and the handler see it.
    """
    steps = plan.steps
    waiting = [len({i.step for i in s.inputs if i.source == "step"}) for s in steps]
    dependents: list[list[int]] = [[] for _ in steps]
    for step in steps:
        for dep in {i.step for i in step.inputs if i.source == "step"}:
            dependents[dep].append(step.index)
    send, receive = anyio.create_memory_object_stream[int](len(steps))
    ready = deque(s.index for s in steps if waiting[s.index] == 0)
    exits = call.exits
    held = isinstance(exits, Exits) and exits.group is not None
    cancelled = anyio.get_cancelled_exc_class()
    failures: list[BaseException] = []
    changes: dict[int, tuple[contextvars.Context, contextvars.Context]] = {}

    async def branch(index: int) -> None:
        base = contextvars.copy_context()
        await run(index)
        changed = contextvars.copy_context()
        if changed != base:
            changes[index] = (base, changed)
        send.send_nowait(index)

    async def run(index: int) -> None:
        try:
            vals[index] = await _run_step(steps[index], vals, call, args, values, app, session)
        except BaseException as exc:
            error = explain(exc, plan, index, args, values)
            if not isinstance(error, cancelled):
                failures.append(error)
            if error is exc:
                raise
            raise error from exc

    try:
        async with send, receive, anyio.create_task_group() as group:
            done = 0
            while done < len(steps):
                while ready:
                    index = ready.popleft()
                    if held or not steps[index].kind.is_resource:
                        group.start_soon(branch, index)
                    else:
                        await run(index)
                        send.send_nowait(index)
                finished = await receive.receive()
                done += 1
                changed = changes.pop(finished, None)
                if changed is not None:
                    step = steps[finished]
                    if step.kind.is_resource:  # undone when the call closes
                        keep(exits, step, *changed)
                    else:
                        adopt(*changed)
                for dependent in dependents[finished]:
                    waiting[dependent] -= 1
                    if waiting[dependent] == 0:
                        ready.append(dependent)
    except BaseExceptionGroup as group_error:
        raise _original(group_error, failures) from None


def _original(
    group: BaseExceptionGroup[BaseException], failures: list[BaseException] | None = None
) -> BaseException:
    """The real error inside a task group's exception group: the first of *failures*
    (in the order they happened) if it is there, else the only one; else the group."""
    cancelled = anyio.get_cancelled_exc_class()
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        error = stack.pop()
        if isinstance(error, BaseExceptionGroup):
            stack.extend(cast("BaseExceptionGroup[BaseException]", error).exceptions)
        elif not isinstance(error, cancelled):
            leaves.append(error)
    if not leaves:
        return group  # only cancellations: let the cancelling scope catch them
    first = next((f for f in failures or () if any(f is leaf for leaf in leaves)), leaves[-1])
    for leaf in leaves:
        if leaf is not first:
            first.add_note(f"resolvent: another branch failed at the same time: {leaf!r}")
    return first


# --- code generation ------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.line_steps: dict[int, int] = {}
        self.namespace: dict[str, Any] = {}
        self._names: dict[int, str] = {}

    def const(self, prefix: str, value: Any) -> str:
        name = self._names.get(id(value))
        if name is None or self.namespace.get(name) is not value:
            name = f"{prefix}{len(self.namespace)}"
            self.namespace[name] = value
            self._names[id(value)] = name
        return name

    def emit(self, text: str, step: int = -1) -> None:
        self.lines.append(text)
        if step >= 0:
            self.line_steps[len(self.lines)] = step


def _expr(w: _Writer, item: Input, steps: tuple[Step, ...], consumer: str) -> str:
    if item.source == "arg":
        if item.default is NO_DEFAULT:
            return f"args[{item.arg!r}]"
        return f"args.get({item.arg!r}, {w.const('D', item.default)})"
    if item.source == "value":
        return f"values[{w.const('T', item.value_type)}]"
    var = f"v{item.step}"
    if item.outcome is not None:
        return f"{w.const('C', item.outcome.convert)}(as_outcome({var}))"
    if steps[item.step].may_ask:
        return (
            f"({var}.unwrap({item.name!r}, {consumer!r}) if {var}.__class__ is Answered else {var})"
        )
    return var


def _call_args(
    w: _Writer, step_inputs: tuple[Input, ...], steps: tuple[Step, ...], consumer: str
) -> str:
    return ", ".join(f"{item.name}={_expr(w, item, steps, consumer)}" for item in step_inputs)


def _blocks(steps: tuple[Step, ...]) -> list[list[Step]]:
    """Group the steps: runs of worker-thread steps share one block (one hop)."""
    blocks: list[list[Step]] = []
    for step in steps:
        joins = (
            step.threaded
            and step.scope is Scope.CALL
            and blocks
            and blocks[-1][-1].threaded
            and blocks[-1][-1].scope is Scope.CALL
            and not blocks[-1][-1].may_ask
        )
        if joins:
            blocks[-1].append(step)
        else:
            blocks.append([step])
    return blocks


def _fusable(blocks: list[list[Step]], inputs: tuple[Input, ...], steps: tuple[Step, ...]) -> bool:
    """Whether a threaded handler can be called in the hop of the plan's last block: that
    block runs in a thread, asks nothing, and the handler's inputs need no conversion."""
    if not blocks:
        return False
    last = blocks[-1]
    return (
        last[0].threaded
        and last[0].scope is Scope.CALL
        and not last[-1].may_ask
        and all(
            i.source != "step" or (i.outcome is None and not steps[i.step].may_ask) for i in inputs
        )
    )


def _root_spread(w: _Writer, inputs: tuple[Input, ...], steps: tuple[Step, ...], root: str) -> str:
    """The handler's arguments: the call's own, then the injected ones."""
    root_kwargs = ", ".join(f"{i.name}={_expr(w, i, steps, root)}" for i in inputs)
    return f"**args, {root_kwargs}" if root_kwargs else "**args"


def _root_call(
    w: _Writer,
    inputs: tuple[Input, ...],
    steps: tuple[Step, ...],
    root: str,
    names: tuple[str, ...],
) -> tuple[str, str]:
    """The test, and the handler's arguments, for passing the call's arguments by name
    when they are exactly its own (*names*): a ``**`` spread costs more than the rest of
    a one-resolver call. Anything else is spread as given (`_root_spread`), so a missing
    or unexpected argument fails in the handler's call as it would without a container."""
    named = [f"{n}=args[{n!r}]" for n in names]
    named += [f"{i.name}={_expr(w, i, steps, root)}" for i in inputs]
    test = " and ".join([f"len(args) == {len(names)}", *(f"{n!r} in args" for n in names)])
    return ("not args" if not names else test), ", ".join(named)


def direct_shape(steps: tuple[Step, ...]) -> bool:
    """True if generated code can run *steps* without a call scope: every CALL resource
    is set up and torn down in the caller's task (async, or sync run inline)."""
    return all(
        s.kind is Kind.ASYNC_GENERATOR or s.kind is Kind.ASYNC_CONTEXT_MANAGER or s.inline
        for s in steps
        if s.scope is Scope.CALL and s.kind.is_resource
    ) and all(s.scope is not Scope.SESSION for s in steps)


def generate(
    plan_ref: list[Any],
    name: str,
    root_is_async: bool,
    steps: tuple[Step, ...],
    inputs: tuple[Input, ...],
    arguments: tuple[str, ...],
    variant: str,
    *,
    build: bool = True,
    root_threaded: bool = False,
) -> tuple[str, Callable[..., Any] | None]:
    """Generate one function of a plan: ``run`` (resolves, then calls the function),
    ``direct`` (``run`` that also sets up and tears down the plan's CALL resources itself,
    with no call scope; see `direct_shape`) or ``resolve`` (returns the injected kwargs).
    *arguments* are the names of the function's own parameters, which the caller passes.
    Returns its source and, with *build*, the compiled function; a failure inside it is
    mapped back to its step by line number.
    """
    direct = variant == "direct"
    w = _Writer()
    ns = w.namespace
    ns.update(
        MISSING=MISSING,
        Answered=Answered,
        QT=QUESTION_KINDS,
        as_outcome=as_outcome,
        ask=ask,
        enter=enter,
        hold=hold,
        partial=functools.partial,
        in_thread=in_thread,
        to_thread=abandonable,
        fail=_fail,
        PLAN=plan_ref,
        begin=begin,
        open_=open_resource,
        close_now=close_now,
        close_rest=close_rest,
        cancelled=outer_cancelled,
        settle=settle,
    )
    root_name = name
    scopes = {s.scope for s in steps}
    call_resources = any(s.kind.is_resource and s.scope is Scope.CALL for s in steps)

    # Worker-thread blocks become plain functions that run in one hop.
    block_defs: list[tuple[str, int]] = []
    body: list[tuple[str, int]] = []
    blocks = _blocks(steps)
    # A sync handler whose last resolvers run in a thread is called in that same hop.
    fused = variant != "resolve" and root_threaded and _fusable(blocks, inputs, steps)
    for number, block in enumerate(blocks):
        first = block[0]
        if first.threaded and first.scope is Scope.CALL:
            inside = {s.index for s in block}
            fuse = fused and number == len(blocks) - 1
            consumers = [i for s in block for i in s.inputs] + (list(inputs) if fuse else [])
            needed = sorted(
                {i.step for i in consumers if i.source == "step" and i.step not in inside}
            )
            params = ", ".join(
                [f"v{i}" for i in needed] + ["args", "values"] + (["body"] if fuse else [])
            )
            block_defs.append((f"def block{number}({params}):", -1))
            for step in block:
                fn = w.const("f", step.fn)
                text = f"    v{step.index} = {fn}({_call_args(w, step.inputs, steps, step.name)})"
                block_defs.append((text, step.index))
            outs = ", ".join(f"v{s.index}" for s in block)
            if fuse:
                # The handler's own exception is handed back, not raised here, so it is
                # not mistaken for a resolver's (and gets no note).
                block_defs += [
                    ("    try:", -1),
                    (f"        ret = body({_root_spread(w, inputs, steps, root_name)})", -1),
                    ("    except BaseException as error:", -1),
                    (f"        return ({outs}, None, error)", -1),
                    (f"    return ({outs}, ret, None)", -1),
                ]
                outs += ", ret, raised"
            else:
                block_defs.append((f"    return ({outs},)", -1))
            # A cancelled call (its deadline, a failed branch) does not wait for the
            # thread: it is abandoned and its late result dropped (see docs/concepts.md).
            # What the block sets in context variables is kept, as if run here.
            body.append(
                (
                    f"({outs},) = await in_thread(block{number}, {params})",
                    block[-1].index,
                )
            )
            last = block[-1]
            if last.may_ask:
                body.append(
                    (
                        f"if v{last.index}.__class__ in QT: "
                        f"v{last.index} = await ask(call, {w.const('S', last)}, v{last.index})",
                        last.index,
                    )
                )
            continue
        step = first
        fn = w.const("f", step.fn)
        s = w.const("S", step)
        call_args = _call_args(w, step.inputs, steps, step.name)
        v = f"v{step.index}"
        if step.scope is not Scope.CALL:
            cache = "app_cache" if step.scope is Scope.APP else "session_cache"
            live = "app" if step.scope is Scope.APP else "session"
            k = w.const("K", step.key)
            make = f"partial({fn}, {call_args})" if call_args else fn
            body.append((f"{v} = {cache}.get({k}, MISSING)", step.index))
            body.append(
                (f"if {v} is MISSING: {v} = await {live}.create({s}, {k}, {make})", step.index)
            )
            continue
        if step.kind.is_resource:
            factory = f"{'await ' if step.awaits else ''}{fn}({call_args})"
            if direct:  # set up here; torn down by `close_now` below
                r = f"r{step.index}"
                pad = ""
                if step.kind is Kind.ASYNC_GENERATOR or step.kind is Kind.ASYNC_CONTEXT_MANAGER:
                    # In this task once known to hold no cancel scope open, else in a
                    # task of its own (see `resolvent._resources.hold`).
                    k = w.const("P", plain_cell(step))
                    body.append((f"if not {k}[0]:", step.index))
                    body.append((f"    {r} = await hold(exits, {s}, {factory}, {k})", step.index))
                    body.append((f"    {v} = {r}.value", step.index))
                    body.append(("else:", step.index))
                    pad = "    "
                body.append((f"{pad}{r} = {factory}", step.index))
                if step.kind is Kind.ASYNC_GENERATOR:
                    body.append((f"{pad}try: {v} = await {r}.__anext__()", step.index))
                    body.append((f"{pad}except StopAsyncIteration:", step.index))
                    body.append((f"{pad}    {v} = await open_({s}, {r})", step.index))
                else:
                    body.append((f"{pad}{v} = await open_({s}, {r})", step.index))
                body.append((f"exits.append(({s}, {r}))", step.index))
            else:
                body.append((f"{v} = await enter(exits, {s}, {factory})", step.index))
        elif step.kind is Kind.ASYNC:
            body.append((f"{v} = await {fn}({call_args})", step.index))
        else:
            body.append((f"{v} = {fn}({call_args})", step.index))
        if step.may_ask:
            body.append((f"if {v}.__class__ in QT: {v} = await ask(call, {s}, {v})", step.index))

    call_steps = [s for s in steps if s.scope is Scope.CALL]

    for line, index in block_defs:  # map a failure inside a block to its own step
        w.emit(line, index)
    w.emit(f"async def {variant}(args, values, call, app, session, body):")
    # `direct` wraps the resolution and the call in the teardown of its resources.
    pad = "    " * (1 + direct)
    if direct:
        # As a call scope does (see `Exits`): a cancel scope entered below every resource
        # is shielded for the teardown, so a provider's own scopes are left in order.
        w.emit("    exits = []")
        w.emit("    guard = begin()")
        w.emit("    try:")
    w.emit(f"{pad}try:")
    opened = len(w.lines)
    if Scope.APP in scopes:
        w.emit(f"{pad}    app_cache = app.cache")
    if Scope.SESSION in scopes:
        w.emit(f"{pad}    session_cache = session.cache")
    if call_resources and not direct:
        w.emit("        exits = call.exits")
    for text, index in body:
        w.emit(f"{pad}    {text}", index)
    if call_steps and not direct:  # a call scope reused for another plan must not run these again
        record = ", ".join(f"{w.const('K', s.key)}: v{s.index}" for s in call_steps)
        w.emit(f"        if call is not None: call.record({{{record}}})")
    if variant == "resolve":
        results = ", ".join(f"{i.name!r}: {_expr(w, i, steps, root_name)}" for i in inputs)
        w.emit(f"        return {{{results}}}")
    if len(w.lines) == opened:  # no steps (a tool that only takes Context): empty try
        w.emit(f"{pad}    pass")
    w.emit(f"{pad}except BaseException as exc:")
    w.emit(f"{pad}    error = fail(exc, PLAN[0], LINES, args, values, call, locals())")
    w.emit(f"{pad}    if error is exc: raise")
    w.emit(f"{pad}    raise error from exc")
    if fused:
        w.emit(f"{pad[4:]}    if raised is not None: raise raised")
    elif variant != "resolve":
        spread = _root_spread(w, inputs, steps, root_name)
        if root_threaded:
            # A sync handler's thread is abandoned on cancellation like a resolver's
            # (see docs/concepts.md): the caller's own bound holds.
            call = f"await to_thread(partial(body, {spread}))"
            w.emit(f"{pad}ret = {call}")
        else:
            awaits = "await " if root_is_async else ""
            test, named = _root_call(w, inputs, steps, root_name, arguments)
            w.emit(f"{pad}if {test}: ret = {awaits}body({named})")
            w.emit(f"{pad}else: ret = {awaits}body({spread})")
    if direct:
        # The call's exception (a resolver's, mapped, or the handler's) is thrown into
        # each finalizer, as `async with call` would; their own errors become notes.
        w.emit("    except BaseException as exc:")
        w.emit("        left = close_now(exits, exc, guard)")
        w.emit("        if left is not None: settle(exc, await left)")
        w.emit("        raise")
        resources = [t for t in steps if t.scope is Scope.CALL and t.kind.is_resource]
        if all(t.kind is Kind.ASYNC_GENERATOR for t in resources):
            # The success path in line: `close_now`'s loop, unrolled.
            w.emit("    left = None")
            w.emit("    if guard.__class__ is tuple:")
            w.emit("        mark = guard[0]")
            for n, t in enumerate(reversed(resources)):
                r, st = f"r{t.index}", w.const("S", t)
                if n:
                    w.emit("        if left is not None: pass")
                w.emit(f"        {'el' if n else ''}if mark is not None and cancelled(mark):")
                w.emit("            left = close_rest(exits, None, mark, None)")
                w.emit("        else:")
                w.emit(f"            finalizer = {r}.__anext__()")
                w.emit("            del exits[-1]")
                w.emit("            try:")
                w.emit(
                    f"                left = close_rest(exits, None, mark, "
                    f"({st}, {r}, finalizer, finalizer.send(None)))"
                )
                w.emit("            except StopAsyncIteration: pass")
                w.emit("            except BaseException as error:")
                started = f"({st}, {r}, None, error)"
                w.emit(f"                left = close_rest(exits, None, mark, {started})")
            w.emit("    else:")
            w.emit("        left = close_now(exits, None, guard)")
        else:
            w.emit("    left = close_now(exits, None, guard)")
        w.emit("    if left is not None:")
        w.emit("        errors = await left")
        w.emit("        if errors: settle(None, errors)")
    if variant != "resolve":
        w.emit("    return ret")
    source = "\n".join(w.lines) + "\n"
    if not build:
        return source, None
    code_name = f"<resolvent plan {root_name} {variant} #{next(_counter)}>"
    ns["LINES"] = (code_name, w.line_steps)
    exec(compile(source, code_name, "exec", dont_inherit=True), ns)
    function: Callable[..., Any] = ns[variant]
    return source, function
