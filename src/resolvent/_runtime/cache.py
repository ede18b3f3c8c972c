"""The scope cache: one open APP or SESSION scope (`LiveScope`), its values made once each
in a home task, and its resources. Never closes what another scope opened.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import anyio

from .._reading.kinds import Kind
from .._vocabulary.errors import ResolventError
from .._vocabulary.questions import QUESTION_KINDS
from .home import Start, creating, reentrant, spawn_home
from .resources import Holder, enter
from .teardown import close_resources

if TYPE_CHECKING:
    from .._graph.plan import Step
    from .._vocabulary.scopes import Scope

__all__ = ("LiveScope",)

# Resources whose setup and teardown must share one task (they may hold cancel scopes).
_HELD = frozenset({Kind.ASYNC_GENERATOR, Kind.ASYNC_CONTEXT_MANAGER})


class LiveScope:
    """One open scope instance: memoized values and the resources to close, in order.

    Values are created lazily on first use, once. Each is created in a *home task* of its
    own, not in the task of the call that first needed it: a caller that is cancelled (a
    deadline, a disconnect) only stops waiting, the creation goes on, and the next caller
    gets the value. An async resource stays in its home task from setup to teardown, so a
    provider that holds a task group or cancel scope across its ``yield`` works whichever
    call opened it and whichever task closes the scope. Resources are closed by `close`
    in reverse order of setup.
    """

    __slots__ = ("cache", "closed", "exits", "keepalive", "scope", "starting")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.cache: dict[Hashable, Any] = {}
        self.exits: list[tuple[Step, Any]] = []
        self.starting: dict[Hashable, Start] = {}
        self.keepalive: list[Any] = []
        self.closed = False

    async def create(self, step: Step, key: Hashable, make: Callable[[], Any]) -> Any:
        """Create the value of *step* once, in its home task; concurrent users share it."""
        start = self.starting.get(key)
        if start is None:
            if key in self.cache:
                return self.cache[key]
            if self.closed:
                raise RuntimeError(
                    f"the {self.scope.name} scope is closed; {step.name} cannot start"
                )
            start = self.starting[key] = Start(step.name)
            chain = (*creating.get(), start)
            spawn_home(lambda: self._home(step, key, make, start, chain))
        elif start in creating.get():  # a run made while it starts needs it again
            raise reentrant(creating.get(), start, self.scope)
        start.waiters += 1
        try:
            await start.done.wait()
        except BaseException:  # this caller stops waiting (cancelled); the start goes on
            start.waiters -= 1
            if start.done.is_set() and not start.waiters:
                start.report(step, self.scope)  # it failed, but nobody is left to see it
            raise
        start.waiters -= 1
        if start.error is not None:
            start.reported = True
            raise start.error
        return start.value

    async def _home(
        self,
        step: Step,
        key: Hashable,
        make: Callable[[], Any],
        start: Start,
        chain: tuple[Start, ...],
    ) -> None:
        """The home task of one value: create it; for an async resource, hold and close it.

        *chain* is the values being created in the first caller's logical chain, this one
        last: what runs here (and the home tasks and worker threads it starts) sees it.
        """
        creating.set(chain)
        try:
            if step.kind in _HELD:
                obj = make()
                if step.awaits:  # an async factory of the context manager: await, then enter
                    with start.abort:
                        obj = await obj
                    if start.abort.cancelled_caught:
                        self._settle(key, step, start, None, self._closed_while_starting(step))
                        return
                holder = Holder(step, obj, hold_shielded=False)
                start.abort = holder.abort
                holder.on_open = lambda: self._opened(key, step, start, holder)
                await holder.run()  # returns once the resource is closed (or failed to open)
                if not holder.opened:
                    self._settle(key, step, start, None, holder.error)
                return
            value: Any = None
            with start.abort:  # cancelled only by `close`; the scope swallows that
                value = await produce(self, step, make)
        except BaseException as error:  # a home task has nobody to raise to
            self._settle(key, step, start, None, error)
            return
        if start.abort.cancelled_caught:
            self._settle(key, step, start, None, self._closed_while_starting(step))
            return
        self._settle(key, step, start, value, None)

    def _opened(self, key: Hashable, step: Step, start: Start, holder: Holder) -> None:
        # Listed the moment its set-up finished, in the home task: values of one scope
        # may start at once (concurrent branches, concurrent calls), and they are closed
        # in reverse order of their set-up's end, not of its start.
        self.exits.append((step, holder))
        self._settle(key, step, start, holder.value, None)

    def _closed_while_starting(self, step: Step) -> RuntimeError:
        return RuntimeError(f"the {self.scope.name} scope closed while {step.name} was starting")

    def _settle(
        self, key: Hashable, step: Step, start: Start, value: Any, error: BaseException | None
    ) -> None:
        del self.starting[key]
        if error is None:
            self.keepalive.append(step.fn)
            self.cache[key] = value
            start.value = value
        elif isinstance(error, anyio.get_cancelled_exc_class()):
            start.error = self._closed_while_starting(step)
        else:
            start.error = error
            if not start.waiters:
                start.report(step, self.scope)
        start.done.set()

    async def close(self, exc: BaseException | None) -> list[BaseException]:
        """Close every resource in reverse order, shielded; return the errors raised.

        Values still being created are stopped first; a resource that opened anyway is
        closed with the rest.
        """
        self.closed = True
        with anyio.CancelScope(shield=True):
            while self.starting:
                start = next(iter(self.starting.values()))
                start.abort.cancel()
                await start.done.wait()
        errors = await close_resources(self.exits, exc)
        self.cache.clear()
        self.keepalive.clear()
        return errors


async def produce(scope: LiveScope, step: Step, make: Callable[[], Any]) -> Any:
    """Run *step*'s function (via *make*) and, for a resource, enter it in *scope*."""
    kind = step.kind
    if kind is Kind.ASYNC:
        value = await make()
    elif kind is Kind.SYNC:
        # Abandoned if its scope closes while it blocks: closing does not wait for it.
        if step.inline:
            value = make()
        else:
            from .threads import abandonable  # once per value made in a worker thread

            value = await abandonable(make)
    else:
        obj = make()
        if step.awaits:  # an async factory of a context manager
            obj = await obj
        return await enter(scope.exits, step, obj)
    if value.__class__ in QUESTION_KINDS:
        raise ResolventError(
            f"{step.name} ({step.scope!r}) returned a question; "
            "only CALL-scoped resolvers may ask.\n"
            f"  fix: move the question into a CALL-scoped resolver that depends on {step.name}"
        )
    return value
