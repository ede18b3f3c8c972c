"""Worker threads: run sync code off the event loop, abandonable on cancel, bounded.

Owns the thread slots; never holds a resource or decides a scope's lifetime.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .context import adopt
from .home import asyncio_loop

if TYPE_CHECKING:
    import asyncio

__all__ = ("abandonable", "in_thread")


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread, abandoned on cancel; keep what it set in context."""
    base = contextvars.copy_context()
    context = base.copy()
    value = await abandonable(context.run, fn, *args)
    adopt(base, context)
    return value


async def abandonable(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread that a cancelled caller abandons (stops waiting
    for); the thread keeps its worker-thread slot until it really ends.

    So threads stuck in a call that timed out are bounded by the default thread limiter
    (``anyio.to_thread.current_default_thread_limiter()``, 40 tokens unless raised), on
    both backends: trio keeps an abandoned thread's token itself; anyio's asyncio backend
    gives it back at once, so on asyncio the slot is taken here on the thread's behalf and
    given back by the thread when it ends.
    """
    loop = asyncio_loop()
    if loop is None:  # trio: an abandoned thread holds its token until it ends
        return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
    limiter = anyio.to_thread.current_default_thread_limiter()
    slot = _Slot(loop, limiter)
    try:  # the thread hop checkpoints anyway: no second one here when a slot is free
        limiter.acquire_on_behalf_of_nowait(slot)
    except anyio.WouldBlock:
        await limiter.acquire_on_behalf_of(slot)
    try:
        return await anyio.to_thread.run_sync(
            slot.run, fn, args, abandon_on_cancel=True, limiter=_unbounded(loop)
        )
    finally:
        slot.leave()


_unbounded_limiters: weakref.WeakKeyDictionary[Any, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _unbounded(loop: asyncio.AbstractEventLoop) -> anyio.CapacityLimiter:
    """*loop*'s limiter that bounds nothing (the slot is held by `_Slot`)."""
    limiter = _unbounded_limiters.get(loop)
    if limiter is None:
        limiter = _unbounded_limiters[loop] = anyio.CapacityLimiter(math.inf)
    return limiter


_WAITING, _RUNNING, _LEFT = "waiting", "running", "left"  # a `_Slot`'s life, by identity


class _Slot:
    """The default limiter's token that one worker thread holds until it ends (asyncio).

    Given back by the caller (`leave`) when the thread has finished or never started, else
    by the thread itself when it ends: a thread abandoned before it started never runs.
    """

    __slots__ = ("limiter", "lock", "loop", "state")

    def __init__(self, loop: asyncio.AbstractEventLoop, limiter: anyio.CapacityLimiter) -> None:
        self.loop = loop
        self.limiter = limiter
        self.lock = threading.Lock()
        self.state = _WAITING

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        with self.lock:
            if self.state is _LEFT:  # abandoned before it started
                return None
            self.state = _RUNNING
        try:
            return fn(*args)
        finally:
            self._ended()

    def _ended(self) -> None:
        with self.lock:
            left, self.state = self.state is _LEFT, _LEFT
        if left:  # abandoned: the caller is gone, give the token back from here
            with contextlib.suppress(RuntimeError):  # the event loop has closed
                self.loop.call_soon_threadsafe(self.limiter.release_on_behalf_of, self)

    def leave(self) -> None:
        """The caller is done (the thread finished) or gone (cancelled)."""
        with self.lock:
            running, self.state = self.state is _RUNNING, _LEFT
        if not running:
            self.limiter.release_on_behalf_of(self)
