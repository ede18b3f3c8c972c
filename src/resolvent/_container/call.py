"""One CALL scope (`Call`): resolving and running plans for one call, its values and its
resources; its deadlines are its base's (`deadlines.py`). It never compiles a plan (its
container does) nor outlives its block."""

# A call reads its container's private state (`CallHost`): they are one unit.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

from .._engine.interpreter import interpret
from .._graph.plan import Plan
from .._reading.annotations import with_article
from .._runtime.cache import LiveScope
from .._runtime.kept import settle_writes
from .._runtime.sharing import Sharing, land, unpack
from .._runtime.shield import begin
from .._runtime.teardown import Exits, close_now, settle
from .._runtime.threads import abandonable
from .._vocabulary.errors import AnswerPending, InputRequired, ResolventError
from .._vocabulary.questions import Asker
from .._vocabulary.scopes import Scope
from .deadlines import Deadlines
from .launch import EMPTY, PLAN_CODE, check_scopes
from .plans import callable_name, refuse_generator

__all__ = ("Call", "CallHost", "open_call")


if TYPE_CHECKING:
    T = TypeVar("T")
    M = TypeVar("M", bound=Mapping[str, Any])  # call arguments: a mapping, or `run`'s dict
    from .._runtime.rounds import Rounds, open_rounds
    from .deadlines import CallHost
else:

    def open_rounds(*args: Any) -> Any:
        """The first multi-round call loads `_runtime.rounds` (a program that never asks
        over rounds may never need it) and puts the function itself in this name, so each
        later ``open_rounds(...)`` is a plain global look-up, as if imported at the top."""
        global open_rounds
        from .._runtime.rounds import open_rounds

        return open_rounds(*args)


_NEW, _OPEN, _CLOSED = "new", "open", "closed"  # a Call's life, compared by identity
# The scopes of a plan that needs no scope but its call, and of one that needs no session:
# with the APP scope or the session not open, a plan whose scopes are within these needs
# no `check_scopes` (which refuses it by name), a set comparison without a frame.
_CALL_ONLY = frozenset((Scope.CALL,))
_NO_SESSION = frozenset((Scope.APP, Scope.CALL))


class Call(Deadlines):
    """A CALL scope: one call's values and resources, closed on exit in reverse order.

    Open one with `Container.call` or `Session.call`:

    ```python
    async with container.call(values={Context: ctx}, asker=ask_user) as call:
        kwargs = await call.resolve(plan, {"user_id": "u1"})
    ```

    What both take:

    - *values*: framework values by declared type.
    - *asker*: ``async (message, schema) -> ElicitationResult`` answering `Elicit`.
    - *concurrent*: run independent async branches at once (default: the container's).
    - *rounds*: multi-round mode: unanswered questions are batched and raised as
      `InputRequired` instead of asked; resume with *answers* and *state*.
    - *answers*: wire key -> JSON-shaped answer (MCP ``ElicitResult`` shape for `Elicit`).
    - *state*: the `InputRequired.state` of the previous round.
    """

    # Made by `open_call`, with no ``__init__``: a call makes one of these each time, and
    # running a Python ``__init__`` through the class costs as much as the rest of it.
    __slots__ = (
        "_container",
        "_session",
        "_state",
        "answerer",
        "asker",
        "cache",
        "concurrent",
        "exits",
        "flight",
        "made",
        "rounds",
        "sharing",
        "values",
    )

    _container: CallHost
    _session: LiveScope | None  # its session's scope, None for the container's call
    _state: str  # `_NEW`, `_OPEN` or `_CLOSED`
    values: Mapping[Any, Any]
    asker: Asker | None
    answerer: Callable[[Any, Any], Awaitable[Any]] | None
    concurrent: bool
    rounds: Rounds | None
    exits: Exits
    cache: dict[Hashable, Any]
    made: tuple[tuple[Hashable, ...], tuple[Any, ...]] | None
    flight: Plan | None
    sharing: Sharing | None

    async def __aenter__(self) -> Call:
        if self._state is not _NEW:
            raise _misuse(self, "async with", None)
        self._state = _OPEN
        # Branches and deadlines open cancel scopes around resolvers; resources are then
        # held by tasks of their own so their setup and teardown share a task.
        exits = self.exits
        if self.concurrent or self._container._call_timeout is not None:
            await exits.open(holders=True)
        else:
            exits.guard = begin()  # what `open` does, without a coroutine of its own
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._state = _CLOSED
        if self.cache:
            self.cache.clear()
        self.made = None
        exits = self.exits
        guard = exits.guard
        if guard.__class__ is tuple:
            # No scope entered (the lazy shield): what `Exits.close` does then, without
            # a coroutine of its own.
            exits.closed = True
            exits.guard = None
            if exits:
                left = close_now(exits, exc, guard)
                if left is not None:
                    settle(exc, await left)
            return
        await exits.close(exc)

    def _scopes(self) -> tuple[Any, ...]:
        """The scopes this call resolves in, as the tuple a plan's code takes (see
        `resolvent._vocabulary.scopes.SLOTS`): its container's APP scope as open now (or
        None), its session's (or None) and itself."""
        return (self._container._app, self._session, self)

    def resolve(
        self, plan: Plan | Callable[..., Any], args: Mapping[str, Any] | None = None
    ) -> Coroutine[Any, Any, dict[str, Any]]:
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
            raise _misuse(self, "resolve", plan)
        if args is None:
            args = EMPTY
        container = self._container
        scopes = (container._app, self._session, self)  # `_scopes`, inline: every call's path
        plan, args = _plan_of(self, plan, args, scopes)
        timeout = container._call_timeout
        if self.rounds is not None:
            return self._round(plan, args, timeout)
        if timeout is not None:
            return self._resolve_within(plan, args, timeout)
        if self.concurrent and plan.overlaps:
            return self._resolve(plan, args)
        # The plan's generated code, started here, not awaited in a coroutine of our own:
        # it resolves in the call as `_resolve` does, handing over to it when another
        # resolution is in flight in the call or made values there (`emit_flight`).
        return (plan._generated or plan.resolve_fn)(args, self.values, scopes, plan.fn)

    async def _round(
        self, plan: Plan, args: Mapping[str, Any], seconds: float | None
    ) -> dict[str, Any]:
        """`resolve` in a multi-round call (*seconds*: its ``call_timeout``)."""
        try:
            if seconds is None:
                return await self._resolve(plan, args)
            return await self._resolve_within(plan, args, seconds)
        except InputRequired as pending:
            # A round that ends by asking is not a success: what it would write is
            # rolled back now, before the question leaves (see `settle`).
            await settle_writes(self.exits, pending)
            raise

    async def settle(self, exc: BaseException | None = None) -> None:
        """Settle this call's writes now, before its answer leaves: close the resources
        marked `settles` (a `State` edit or creation, a transaction), committing if *exc*
        is None and rolling back with *exc* otherwise. Other resources stay open until
        the call's block ends.

        An integration calls it once the handler's outcome is known and before it sends
        the result (a web response after which the call stays open to stream); without
        it, the call's block settles them as it closes. A round that ends by asking
        (`InputRequired`) settles by itself, rolling back.

        Raises:
            Exception: with *exc* None, the error of a write that was refused (a
                `StateConflict`, a value over its size limit, an unreachable store):
                the call's error, to answer with instead of the result.
        """
        await settle_writes(self.exits, exc)

    async def _resolve(self, plan: Plan, args: Mapping[str, Any]) -> dict[str, Any]:
        if self.made is not None:
            unpack(self)  # the interpreter reads `cache`
        scopes = (self._container._app, self._session, self)  # `_scopes`, inline
        # Branches only where two steps could overlap (`Plan.overlaps`); else the
        # sequential code, which gives the same values in the same order.
        concurrent = self.concurrent and plan.overlaps
        rounds = self.rounds
        if (
            not concurrent
            and not self.cache
            and self.flight is None
            and self.sharing is None
            and (rounds is None or not rounds.pending)  # else generated code stopped at one
        ):
            # Generated code, which takes the call's flight itself (`emit_flight`), in a
            # multi-round call too: up to a question with no answer yet, where the
            # interpreter goes on (`_unanswered`).
            try:
                result: dict[str, Any] = await (plan._generated or plan.resolve_fn)(
                    args, self.values, scopes, plan.fn
                )
            except Exception as exc:
                if self.rounds is None or not _unanswered(self, exc):
                    raise
            else:
                return result
        return await interpret(plan, self, args, self.values, scopes, concurrent=concurrent)

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
            raise _misuse(self, "run", fn)
        container = self._container
        scopes = (container._app, self._session, self)  # `_scopes`, inline: every call's path
        plan, kwargs = _plan_of(self, fn, kwargs, scopes)
        if not (plan.fn_is_async or plan.fn_threaded or isinstance(fn, Plan)):
            # An inline function, or a generator (refused)
            refuse_generator(plan, "call.run" if self._session is None else "session.run")
        rounds = self.rounds
        if (
            (not self.concurrent or not plan.overlaps)
            and container._call_timeout is None
            # A traced plan's multi-round call: its span carries the round (`run_in`).
            and (rounds is None or plan.code is PLAN_CODE)
            and self.made is None  # nothing else resolved in the call: it takes the flight
            and not self.cache
            and self.flight is None
            and self.sharing is None
        ):
            self.flight = plan
            try:
                return await plan.run_fn(kwargs, self.values, scopes, plan.fn)
            except AnswerPending as exc:
                # A round's question with no answer yet (only a resolution asks): the
                # interpreter goes on below from what was made, as in `_resolve`.
                if rounds is None or not _unanswered(self, exc):
                    raise
            except InputRequired as pending:
                # A round ends asking (forwarded by a resolver or fn): rolled back now.
                if rounds is not None:
                    land(self, plan)
                    await settle_writes(self.exits, pending)
                raise
            finally:
                if self.flight is plan:  # not recorded (`record`) nor landed by a failure
                    land(self, plan)
        # Resolved here (the interpreter, a deadline, concurrent branches, another
        # resolution in flight): as the plan's code says (`run_here`, in the call's span
        # for a plan compiled traced).
        if self.made is not None:
            unpack(self)
        return await plan.code.run_in(self, plan, kwargs)

    async def run_here(self, plan: Plan, kwargs: dict[str, Any]) -> Any:
        """`run` of *plan*, which it checked, when this call resolves it itself: the
        resolution as `resolve` makes it (but its generated path, which `run` found taken),
        then the function. Called through the plan's code (`PlanCode.run_in`), not by users."""
        timeout = self._container._call_timeout
        try:
            if timeout is None:
                injected = await self._resolve(plan, kwargs)
            else:
                injected = await self._resolve_within(plan, kwargs, timeout)
            if plan.fn_threaded:
                return await abandonable(functools.partial(plan.fn, **kwargs, **injected))
            result = plan.fn(**kwargs, **injected)
            if plan.fn_is_async or inspect.isawaitable(result):
                result = await result
        except InputRequired as pending:
            if self.rounds is not None:  # a round that ends by asking: rolled back now
                await settle_writes(self.exits, pending)  # as `resolve` does
            raise
        return result


def open_call(
    container: CallHost,
    session: LiveScope | None,
    values: Mapping[Any, Any] | None,
    asker: Asker | None,
    concurrent: bool | None,
    rounds: bool,
    answers: Mapping[str, Any] | None,
    state: str | None,
) -> Call:
    """A new call scope, not yet entered: what `Container.call` and `Session.call` open
    (with *session* None for the container's)."""
    if values is None:
        values = EMPTY
    elif values.__class__ is not dict and not isinstance(cast(object, values), Mapping):
        raise _values_not_a_mapping(values)
    call = Call()
    call._container = container
    call._session = session
    call.values = values
    call.asker = asker
    call.answerer = None
    call.concurrent = container._concurrent if concurrent is None else concurrent
    call.rounds = None
    if rounds or answers or state:
        call.rounds = open_rounds(answers, state, container.answer_timeout)
    call.exits = exits = Exits()
    exits.deadline = math.inf  # `Exits`' slots: it has no ``__init__`` (see there)
    exits.group = exits.guard = None
    exits.closed = False
    call.cache = {}
    # What the generated resolution made, kept aside (see `resolvent._runtime.sharing.record`).
    call.made = None
    # Several tasks may resolve in one call at once (see `resolvent._runtime.sharing.Sharing`):
    # the generated resolution in flight, and what the others share.
    call.flight = None
    call.sharing = None
    call._state = _NEW
    call._deadline = None  # the deadlines' (see `Deadlines`)
    call._paused = None  # a list only while a question pauses the deadline
    return call


def _plan_of(
    call: Call, target: Plan | Callable[..., Any], args: M, scopes: tuple[Any, ...]
) -> tuple[Plan, M]:
    """*target*'s current plan for `Call.resolve` and `Call.run`, checked against the
    scopes open (*scopes*), and *args* as its function takes them: the plan keyed by
    *target* itself while no override block is open, else a `Plan` given (`_prepare`), or
    a bound method's or partial's, which shares its function's plan (`_for_run`)."""
    container = call._container
    cache = container._plans
    try:
        found = None if container._overridden else cache.plans.get(target)
    except TypeError:  # an unhashable callable object
        found = None
    if found is None or found.fn is not target or found.generation != cache.generation:
        if isinstance(target, Plan):
            return _prepare(call, target, scopes), args
        _, found, bound = container._for_run(target, args)
        check_scopes(found, scopes)
        return found, cast("M", bound)
    if (scopes[0] is None and not found.scopes <= _CALL_ONLY) or (
        scopes[1] is None and not found.scopes <= _NO_SESSION
    ):  # a scope it may need is not open
        check_scopes(found, scopes)
    return found, args


def _prepare(call: Call, target: Plan, scopes: tuple[Any, ...]) -> Plan:
    """*target*, a plan given to `Call.resolve` or `Call.run`, as current and checked."""
    plan = call._container._current(target)
    if None in scopes and not plan.scopes <= _CALL_ONLY:  # one not open: needed?
        check_scopes(plan, scopes)
    return plan


def _misuse(call: Call, method: str, target: Plan | Callable[..., Any] | None) -> ResolventError:
    """The error for a call scope used outside its ``async with`` block."""
    opener = "container.call()" if call._session is None else "session.call()"
    if target is None:
        return ResolventError(
            f"this call scope was already entered once (`async with {opener} as call:`); "
            "a call scope is used for one block only.\n"
            f"  fix: open a new one for each block: `async with {opener} as call: ...`"
        )
    name = target.name if isinstance(target, Plan) else callable_name(target)
    if call._state is _NEW:
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


def _unanswered(call: Call, exc: Exception) -> bool:
    """Whether *exc*, raised by the generated resolution of *call*, a multi-round call,
    is a question with no answer yet. The generated code stopped there and kept the
    values it had made (`resolvent._runtime.sharing.landed`); the interpreter goes on
    from them, so independent questions still go out together in one round, and never
    runs the resolver of a question already waiting in this round again (`run_step`)."""
    if exc.__class__ is not AnswerPending:
        return False
    sharing = call.sharing
    if sharing is not None and sharing.failure is not None and sharing.failure[1] is exc:
        sharing.failure = None  # not a failure: who waits for that value makes it
    return True


def _values_not_a_mapping(values: object) -> TypeError:
    """``call(values=[request])``: the types a container declares are a tuple, the
    objects a call is given are a dict from each type to its object."""
    return TypeError(
        f"call(values=...) takes a dict from each framework value type to its object, "
        f"not {with_article(type(values).__name__)}.\n"
        "  fix: container.call(values={Request: request}) (the types are declared with "
        "Container(values=(Request,)) or add_value_type)"
    )
