"""One SESSION scope (`Session`): values shared by the calls of one client session. It never
runs a plan itself: its calls do."""

# A session reads its container's private state (`SessionHost`): they are one unit.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from .._runtime.cache import LiveScope
from .._runtime.teardown import settle
from .._vocabulary.errors import ResolventError
from .._vocabulary.questions import Asker
from .._vocabulary.scopes import Scope
from .call import Call, open_call
from .plans import callable_name

__all__ = ("Session", "SessionHost")


if TYPE_CHECKING:
    T = TypeVar("T")
    from .call import CallHost

    class SessionHost(CallHost, Protocol):
        """What a session reads of its container: a call's needs and its open sessions."""

        _sessions: weakref.WeakSet[Session]  # so leaving an override finds their values


class Session:
    """A SESSION scope: values shared by the calls of one client session.

    Use as ``async with container.session() as session:``; resources are closed when it
    exits (or on `aclose`).
    """

    __slots__ = ("__weakref__", "_container", "live")

    def __init__(self, container: SessionHost) -> None:
        self._container = container
        self.live = LiveScope(Scope.SESSION)
        container._sessions.add(self)  # so leaving an override finds its values

    async def __aenter__(self) -> Session:
        if self.live.closed:
            raise self._closed("async with session")
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        settle(exc, await self.live.close(exc))

    async def aclose(self) -> None:
        """Close the session's resources now (reverse order of setup)."""
        settle(None, await self.live.close(None))

    def call(
        self,
        *,
        values: Mapping[Any, Any] | None = None,
        asker: Asker | None = None,
        concurrent: bool | None = None,
        rounds: bool = False,
        answers: Mapping[str, Any] | None = None,
        state: str | None = None,
    ) -> Call:
        """Open a CALL scope inside this session; see `Call`.

        Raises:
            ResolventError: the session is already closed.
        """
        if self.live.closed:
            raise self._closed("session.call()")
        return open_call(
            self._container, self.live, values, asker, concurrent, rounds, answers, state
        )

    def _closed(self, use: str) -> ResolventError:
        return ResolventError(
            f"{use} on a session that is already closed (its `async with` block ended, or "
            "aclose() was called): its SESSION values are gone.\n"
            "  fix: use the session inside its block, or open a new one: "
            "`async with container.session() as session: ...`"
        )

    @overload
    async def run(self, fn: Callable[..., Awaitable[T]], /, **kwargs: Any) -> T: ...
    @overload
    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T: ...
    async def run(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        """Like `Container.run`, with this session's SESSION values.

        Raises:
            ResolventError: the session is already closed.
        """
        if self.live.closed:
            raise self._closed(f"session.run({callable_name(fn)})")
        async with self.call() as call:
            return await call.run(fn, **kwargs)
