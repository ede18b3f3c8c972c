"""Home tasks: tasks of their own that no caller's cancellation reaches, where shared
values start and held resources live. Never opens or closes a resource itself.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from .._vocabulary.errors import ResolventError

if TYPE_CHECKING:
    import asyncio

    from .._graph.plan import Step
    from .._vocabulary.scopes import Scope

__all__ = ("Start", "asyncio_loop", "creating", "reentrant", "spawn_home")


class Start:
    """A shared value under creation in its home task: what its waiters wait for."""

    __slots__ = ("abort", "done", "error", "name", "reported", "value", "waiters")

    def __init__(self, name: str) -> None:
        self.name = name
        self.abort = anyio.CancelScope()
        self.done = anyio.Event()
        self.waiters = 0
        self.value: Any = None
        self.error: BaseException | None = None
        self.reported = False

    def report(self, step: Step, scope: Scope) -> None:
        """Log a failure that no caller received (every caller stopped waiting)."""
        if self.error is None or self.reported:
            return
        self.reported = True
        from .._vocabulary.log import logger  # only when something failed

        logger.error(
            "resolvent: %s (%r) failed to start; the next call will try again",
            step.name,
            scope,
            exc_info=self.error,
        )


creating: contextvars.ContextVar[tuple[Start, ...]] = contextvars.ContextVar(
    "resolvent_creating", default=()
)
"""The shared values whose creation this logical chain of calls is part of, outermost first."""


def reentrant(chain: tuple[Start, ...], start: Start, scope: Scope) -> ResolventError:
    """The error for a run, made while *start* is being created, that needs it again."""
    names = [s.name for s in chain[chain.index(start) :]]
    value, runner = start.name, names[-1]
    return ResolventError(
        f"re-entrant run forms a cycle: {' -> '.join([*names, value])}.\n"
        f"  {value} ({scope!r}) is still being created, and a container.run or session.run "
        f"made by {runner} while it is created needs {value}: it would wait for itself forever.\n"
        f"  fix: do not run, from inside {runner}, a function that needs {value}; declare what "
        f"{runner} needs as Resolve(...) parameters (a real cycle is then reported at compile "
        f"time), or make that run later, from a consumer of {value}"
    )


_home_tasks: set[asyncio.Task[None]] = set()


async def _await(fn: Callable[[], Awaitable[None]]) -> None:
    await fn()


_interruptible_home: Callable[[Callable[[], Awaitable[None]]], Awaitable[None]] | None = None


def _interruptible() -> Callable[[Callable[[], Awaitable[None]]], Awaitable[None]]:
    """What runs a home task on trio: a system task that Ctrl-C interrupts.

    trio shields system tasks from KeyboardInterrupt, so a set-up that blocks (no
    checkpoint) would ignore Ctrl-C until it returns; in the caller's task it would be
    interrupted at once. The interrupt reaches the callers waiting for the value.
    """
    global _interruptible_home
    if _interruptible_home is None:
        import trio

        @trio.lowlevel.disable_ki_protection
        async def home(fn: Callable[[], Awaitable[None]]) -> None:
            await fn()

        _interruptible_home = home
    return _interruptible_home


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None under anyio's other backend (trio). asyncio is
    imported here, not at the top: importing it loads logging, which `import resolvent`
    does not need."""
    import asyncio

    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def spawn_home(fn: Callable[[], Awaitable[None]]) -> None:
    """Start *fn* in a task of its own that no caller's cancellation reaches.

    Its only outer cancellation is the event loop's shutdown. The task inherits a copy
    of the caller's context variables on both backends.
    """
    loop = asyncio_loop()
    if loop is None:  # anyio's other backend
        import trio

        trio.lowlevel.spawn_system_task(_interruptible(), fn, context=contextvars.copy_context())
        return
    task: asyncio.Task[None] = loop.create_task(_await(fn))
    _home_tasks.add(task)  # the loop keeps only a weak reference
    task.add_done_callback(_home_tasks.discard)
