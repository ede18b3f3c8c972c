"""What a call keeps open past its answer, and what it closes before the answer leaves:
`Kept`, the CALL resources a generated ``kept`` function opened, closed later as the exit of
a web framework's exit stack, and `settle_writes`, the resources that settle a call's writes
(marked `settles`) closed as soon as its outcome is known. How each one closes is
`resolvent._runtime.teardown`'s; this module only says which and when.
"""

from __future__ import annotations

import collections
import contextlib
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from .._vocabulary.markers import is_settling
from .teardown import close_guarded, close_now, finalize, settle

if TYPE_CHECKING:
    from .._graph.plan import Step

__all__ = ("Kept", "settle_writes")


class Kept(list[tuple["Step", Any]]):
    """The CALL resources a plan's generated ``kept`` function opened, closed when its
    caller is done with them, as the exit of an exit stack (``__aexit__``).

    Give it to the ``kept`` function right after handing its exit on (so a failing
    resolution closes what opened too): the function's first step marks where a call
    scope would have been entered (``guard``, see `resolvent._runtime.shield.begin`), and the
    teardown is shielded from there, as a call scope's is (see `resolvent._runtime.teardown.Exits`).
    """

    __slots__ = ("guard",)
    guard: Any  # from `begin`: a mark (asyncio) or an entered cancel scope
    appends: ClassVar[bool]  # `APPENDS`, for an integration to tell

    async def __aenter__(self) -> Kept:
        return self

    @classmethod
    def on(cls, stack: contextlib.AsyncExitStack[Any]) -> Kept:
        """A new `Kept`, its exit on *stack* (a web framework's exit stack, which it
        leaves after the response is sent), so the resources close there, in reverse
        order after what the stack held before: with one append to the stack's own
        list of exits where this Python keeps them so (`APPENDS`), else pushed."""
        kept = cls()
        if APPENDS and stack.__class__ is contextlib.AsyncExitStack:
            stack._exit_callbacks.append((False, kept.__aexit__))  # type: ignore[attr-defined]  # pyright: ignore[reportUnknownMemberType, reportAttributeAccessIssue]
        else:
            stack.push_async_exit(kept)
        return kept

    @staticmethod
    def probe() -> bool:
        """Whether this Python's `AsyncExitStack` keeps its exits as ``(is_sync, callback)``
        pairs in a deque, ``_exit_callbacks``, as every CPython since 3.7 does: then `on`
        pushes an exit with one append, not through three frames of contextlib's on each
        request. Checked once (`APPENDS`), on a stack of its own; a test fails if it is not."""

        async def probe(*exc_details: Any) -> None:
            return None

        stack = contextlib.AsyncExitStack()
        stack.push_async_exit(probe)
        callbacks: Any = getattr(stack, "_exit_callbacks", None)
        return isinstance(callbacks, collections.deque) and list(callbacks) == [(False, probe)]  # pyright: ignore[reportUnknownArgumentType]

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        guard = self.guard
        if guard.__class__ is tuple:  # shielded once needed (see `resolvent._runtime.shield`)
            left = close_now(self, exc, guard)
            if left is not None:
                settle(exc, await left)
            return
        settle(exc, await close_guarded(self, exc, guard))

    async def settle(self, exc: BaseException | None) -> None:
        """Settle the call's writes now (see `settle_writes`), before its answer leaves."""
        await settle_writes(self, exc)


async def settle_writes(exits: list[tuple[Step, Any]], exc: BaseException | None) -> None:
    """Close the resources among *exits* that settle a call's writes (marked `settles`),
    in reverse order, now that the call's outcome is known: *exc* None (a success, they
    commit) or the exception that ended the call (they roll back). The rest stay open,
    to close with their scope.

    A finalizer's error after a success is the call's error, raised here (one as itself,
    several as a group); after a failure it becomes a note on *exc*.
    """
    picked: list[tuple[Step, Any]] | None = None
    for pair in exits:
        if is_settling(pair[0].fn):
            if picked is None:
                picked = []
            picked.append(pair)
    if picked is None:
        return
    exits[:] = [pair for pair in exits if not is_settling(pair[0].fn)]
    errors: list[BaseException] = []
    # Not logged: the caller receives each error (raised, or as a note on *exc*).
    with anyio.CancelScope(shield=True):
        while picked:
            step, obj = picked.pop()
            try:
                await finalize(step, obj, exc)
            except BaseException as error:
                errors.append(error)
    settle(exc, errors)


APPENDS = Kept.appends = Kept.probe()
"""Whether `Kept.on` appends to an exit stack's own list (see `Kept.probe`)."""
