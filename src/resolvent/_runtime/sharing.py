"""CALL values shared by the resolutions of one call scope that run at once: each value is
made once, by the first to ask, and the others wait for it. It never makes a value itself.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from .._vocabulary.scopes import Scope

if TYPE_CHECKING:
    from .._graph.plan import Plan, Step
    from .rounds import Asking

__all__ = (
    "MAKING",
    "MISSING",
    "CallLike",
    "Creation",
    "Sharing",
    "claim",
    "emit_record",
    "land",
    "landed",
    "record",
    "release",
    "unpack",
)

MISSING: Any = object()
"""Not in a cache (yet): the generated code, the interpreter and the container share it."""

MAKING: Any = object()
"""A CALL value one resolution is making and nobody waits for yet (in `Sharing.starting`);
the first waiter puts a `Creation` in its place. A maker allocates nothing for a value
nobody else asks for."""


if TYPE_CHECKING:

    class CallLike(Asking, Protocol):
        """What the executor needs of a call scope (implemented by `resolvent.Call`)."""

        @property
        def exits(self) -> list[tuple[Step, Any]]: ...

        cache: dict[Hashable, Any]
        made: tuple[tuple[Hashable, ...], tuple[Any, ...]] | None  # see `record`
        flight: Plan | None
        sharing: Sharing | None


# --- one call, several resolutions ---------------------------------------------------
# Tasks of one call scope may resolve in it at the same time (a task group inside
# `async with container.call() as call:`); each CALL value is still made once, by the
# first to ask, and the others wait for it. The first resolution in a call runs the
# generated code, which records its values only when it is done (the *flight*, see
# `Call.run`): a resolution that needs one of its values waits for it to land. Any other
# resolution runs the interpreter, which claims each value before making it.


_NO_KEYS: tuple[Plan | None, frozenset[Hashable]] = (None, frozenset())


class Sharing:
    """The resolutions in flight in one call scope, and the values they are making.

    No ``__init__`` (its maker sets `starting`), and defaults on the class: an
    interpreted call makes one each time, and a Python ``__init__`` cost as much as the
    rest of its making. What the defaults stand for is set on the instance only when
    another resolution waits for the flight."""

    __slots__ = ("__dict__", "starting")

    starting: dict[Hashable, Any]  # by key: `MAKING`, or the `Creation` its waiters wait on
    landed: anyio.Event | None = None  # set when the flight lands
    failure: tuple[Hashable, BaseException] | None = None  # the flight's
    keys: tuple[Plan | None, frozenset[Hashable]] = _NO_KEYS

    def flight_keys(self, flight: Plan) -> frozenset[Hashable]:
        if self.keys[0] is not flight:
            keys = frozenset(s.key for s in flight.steps if s.scope is Scope.CALL)
            self.keys = (flight, keys)
        return self.keys[1]

    def wake(self) -> None:
        landed, self.landed = self.landed, None
        if landed is not None:
            landed.set()


class Creation:
    """A CALL value being made by one resolution, once another waits for it: made by
    the first waiter, in `Sharing.starting` in the place of `MAKING`."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.error: BaseException | None = None


async def claim(call: CallLike, step: Step) -> Any:
    """The value of CALL *step* once another resolution has made it, else `MAKING`: this
    one now makes it (and ends with `release`)."""
    sharing = call.sharing
    assert sharing is not None
    key = step.key
    starting = sharing.starting
    while True:
        value = call.cache.get(key, MISSING)
        if value is not MISSING:
            return value
        creation = starting.get(key)
        if creation is not None:
            if creation is MAKING:
                creation = starting[key] = Creation()
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
        starting[key] = MAKING
        return MAKING


def release(call: CallLike, key: Hashable, error: BaseException | None) -> None:
    """The making of *key* ended (with *error*, or none made): wake its waiters."""
    sharing = call.sharing
    assert sharing is not None
    creation = sharing.starting.pop(key)
    if creation is MAKING:
        return  # nobody waits
    if error is not None and not isinstance(error, anyio.get_cancelled_exc_class()):
        creation.error = error  # a cancelled maker's waiters make the value themselves
    creation.done.set()


def record(call: CallLike, keys: tuple[Hashable, ...], values: tuple[Any, ...]) -> None:
    """The generated resolution in flight in *call* made *values*, the CALL values of
    *keys* (in the same order): it landed. What generated code calls.

    If nobody else resolved in the call meanwhile (the interpreter sets ``sharing``
    first), the values are kept aside as given (``made``) and go into ``cache`` only once
    another resolution in the call needs them (`unpack`), which most calls never start."""
    call.flight = None
    sharing = call.sharing
    if sharing is None and call.made is None and not call.cache:  # see `emit_record`
        call.made = (keys, values)
        return
    unpack(call)
    call.cache.update(zip(keys, values, strict=True))
    if sharing is not None:
        sharing.wake()


def emit_record(emit: Callable[[str], None], keys: str, values: str) -> None:
    """The lines of generated code that do what ``record(call, keys, values)`` does (for
    a ``call`` that may be None: then nothing), its common case in line: nobody else
    resolved in the call. *keys* and *values* are the code's expressions for the tuples."""
    emit("        if call is None: pass")
    emit("        elif call.sharing is None and call.made is None and not call.cache:")
    emit("            call.flight = None")
    emit(f"            call.made = ({keys}, {values})")
    emit(f"        else: record(call, {keys}, {values})")


def emit_flight(emit: Callable[[str], None]) -> None:
    """The first lines of a generated ``resolve`` in a call scope: it takes the call's
    flight itself (as `Call.run` does before it starts a generated ``run``), so the call
    starts it without a coroutine of its own; if another resolution is in flight in the
    call, or made values there, it hands over to the call's own resolution, which then
    runs the interpreter (`resolvent.Call`)."""
    emit("    if call.flight is not None or call.made is not None or call.sharing is not None \\")
    emit("            or call.cache:")
    emit("        return await call._resolve(PLAN[0], args)")
    emit("    call.flight = PLAN[0]")


def unpack(call: CallLike) -> None:
    """Put the values `record` kept aside into *call*'s cache, before another resolution
    reads it."""
    made = call.made
    if made is not None:
        call.made = None
        call.cache.update(zip(*made, strict=True))


def land(call: CallLike, plan: Plan) -> None:
    """The flight *plan* ended with no CALL value to record, or failed before `fail`
    saw it (see `landed`)."""
    if call.flight is plan:
        call.flight = None
        if call.sharing is not None:
            call.sharing.wake()


def landed(call: CallLike, plan: Plan, index: int, error: BaseException, local: Any) -> None:
    """The flight *plan* failed at step *index* (a `Step.index`; -1: none): keep the CALL
    values it made before, and its failure for the resolutions waiting for that step;
    let them go on."""
    for step in plan.steps[: plan.position(index) if index >= 0 else 0]:
        if step.scope is Scope.CALL:
            value = local.get(f"v{step.index}", MISSING)
            if value is not MISSING:
                call.cache[step.key] = value
    sharing = call.sharing
    call.flight = None
    if sharing is None:
        return
    if index >= 0 and not isinstance(error, anyio.get_cancelled_exc_class()):
        sharing.failure = (plan.step_at(index).key, error)
    sharing.wake()
