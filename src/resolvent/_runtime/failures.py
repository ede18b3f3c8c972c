"""What a failure inside a plan says: the resolver chain as a note, a missing call argument
or framework value as advice with a fix; and a plan started where a scope it needs is not
open, with how to open it (`not_open`); which of concurrent branches' failures is raised
(`first_failure`). It never catches, retries or swallows an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio

from .._reading.annotations import type_name
from .._vocabulary.errors import AnswerPending, InputRequired, ResolventError
from .._vocabulary.scopes import SLOTS, Scope
from .sharing import landed

if TYPE_CHECKING:
    from .._graph.plan import Plan
    from .sharing import CallLike

__all__ = ("explain", "fail", "first_failure", "not_open")


def explain(
    exc: BaseException, plan: Plan, index: int, args: Mapping[str, Any], values: Mapping[Any, Any]
) -> BaseException:
    """Add a note naming the resolver chain to step *index* (a `Step.index`; -1: none);
    turn a missing argument/value into advice."""
    if index < 0 or isinstance(
        exc, (anyio.get_cancelled_exc_class(), InputRequired, AnswerPending)
    ):
        return exc  # nothing to explain: a cancellation, or a question waiting
    step = plan.step_at(index)
    if isinstance(exc, KeyError) and exc.args:
        missing = exc.args[0]
        for item in step.inputs:
            if item.source == "arg" and item.arg == missing and missing not in args:
                return ResolventError(
                    f"call argument {missing!r} needed by {step.name} was not given"
                    f"{_given(list(args))}.\n"
                    f"  path: {plan.path_to(index)}\n"
                    f"  fix: pass {missing}=... when calling {plan.name}"
                )
            if item.source == "value" and item.value_type is missing and missing not in values:
                name = type_name(missing)
                return ResolventError(
                    f"no framework value of type {name} was given to this call, but {step.name} "
                    f"needs one (parameter {item.name!r}){_given([type_name(t) for t in values])}"
                    ".\n"
                    f"  path: {plan.path_to(index)}\n"
                    f"  fix: open the call with container.call(values={{{name}: ...}})"
                )
    note = f"resolvent: raised by {step.name} ({step.scope.name}) resolving {plan.path_to(index)}"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    return exc


def _given(names: list[str]) -> str:
    """What the call had instead, for a misspelled or mistyped key; empty if nothing."""
    return f"; it was given {', '.join(names)}" if names else ""


def fail(
    exc: BaseException,
    plan: Plan,
    lines: tuple[str, tuple[int, ...]],
    args: Mapping[str, Any],
    values: Mapping[Any, Any],
    call: CallLike | None = None,
    local: Any = None,
) -> BaseException:
    """Map a failure inside generated code (*lines*: its code name and which step each
    line runs, see `line_step`); if it was a call's flight (see `Sharing`), land it
    (*local*: its variables)."""
    code_name = lines[0]
    index = -1
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == code_name:
            found = line_step(lines, tb.tb_lineno)
            if found >= 0:
                index = found
        tb = tb.tb_next
    error = explain(exc, plan, index, args, values)
    if call is not None and call.flight is plan:
        landed(call, plan, index, error, local)
    return error


def line_step(lines: tuple[str, tuple[int, ...]], lineno: int) -> int:
    """The step (its index) that line *lineno* of generated code runs, or -1.

    *lines* is the code's name and its lines that run a step, flat and in order:
    ``(line, step, line, step, ...)`` (a dict would cost a plan about twice as much,
    for a look-up made only when something fails).
    """
    flat = lines[1]
    low, high = 0, len(flat) // 2
    while low < high:
        middle = (low + high) // 2
        line = flat[2 * middle]
        if line == lineno:
            return flat[2 * middle + 1]
        if line < lineno:
            low = middle + 1
        else:
            high = middle
    return -1


def not_open(plan: Plan, scopes: tuple[Any, ...]) -> ResolventError:
    """The error for *plan*, which needs a scope *scopes* does not have open (see
    `resolvent._container.launch.check_scopes`): the APP scope first (the container is not
    open), else the longest-lived one missing, and how to open it."""
    inner = sorted(plan.scopes - {_APP, _CALL}, reverse=True)
    if scopes[_APP_SLOT] is None:
        shared = [s for s in plan.steps if s.scope is not _CALL]
        names = ", ".join(f"{s.name} ({s.scope.name})" for s in shared)
        return ResolventError(
            f"{plan.name} needs shared values ({names}) but the container is not open "
            "(never opened, or already closed).\n"
            "  fix: run it inside `async with container:` (or the server lifespan)"
            + "".join(f", in {_OPENED_BY[scope][1]}" for scope in inner)
        )
    scope = next(s for s in inner if scopes[SLOTS[s]] is None)
    names = ", ".join(s.name for s in plan.steps if s.scope is scope)
    noun, _, fix = _OPENED_BY[scope]
    return ResolventError(
        f"{plan.name} needs {scope.name}-scoped values ({names}) but runs outside "
        f"{noun}.\n  fix: {fix}"
    )


_OPENED_BY: dict[Scope, tuple[str, str, str]] = {
    Scope.SESSION: (
        "a session",
        "a container.session()",
        "`async with container.session() as session: await session.run(...)`",
    ),
}
"""How a user opens each scope between APP and CALL, for `not_open`'s messages: outside
what, in what, and the fix."""

_CALL, _APP = Scope.CALL, Scope.APP
_APP_SLOT = SLOTS[_APP]


def first_failure(
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
