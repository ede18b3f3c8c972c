"""The APP scope of a container: entering and leaving it (``async with container``,
counted, the last exit closing it), creating APP values up front (`start`), the callbacks
run as it closes, and the lifespans built on it. `AppScope` is `Container`'s base, one
concern of it, as `Access` is `State`'s; what a lifespan runs as it starts is `startup`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Self, TypeVar

import anyio

from .._reading.annotations import with_article
from .._runtime.cache import LiveScope
from .._runtime.teardown import settle
from .._vocabulary.errors import InvalidSignature, ResolventError
from .._vocabulary.scopes import Scope

if TYPE_CHECKING:
    from .launch import Starter
    from .plans import PlanCache

    T = TypeVar("T")

__all__ = ("AppScope", "check_targets")


class AppScope:
    """The APP scope's part of `Container`: open from the first entry to the last exit."""

    _app: LiveScope | None
    _entries: int
    _warm: tuple[Callable[..., Any], ...]
    _ready: dict[Any, Starter]
    _closing: list[Callable[[], Awaitable[None]]]
    _plans: PlanCache

    async def __aenter__(self) -> Self:
        if self._entries == 0:
            self._app = LiveScope(Scope.APP)
        self._entries += 1
        if self._warm:
            # Every entry waits for the warm values (a later one finds them made or
            # joins the start under way), so no lifespan serves traffic before them.
            try:
                await self.start(*self._warm)
            except BaseException as error:
                # Close what did start, cleanly: the failure is not theirs.
                settle(error, await self._leave(None))
                raise
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        settle(exc, await self._leave(exc))

    async def _leave(self, exc: BaseException | None) -> list[BaseException]:
        """Drop one entry; the last one closes the APP scope. Returns teardown errors."""
        self._entries -= 1
        if self._entries > 0:
            return []
        app, self._app = self._app, None
        assert app is not None
        self._ready.clear()  # plans needing APP must be checked again
        callbacks, self._closing = self._closing, []
        errors: list[BaseException] = []
        with anyio.CancelScope(shield=True):
            for callback in reversed(callbacks):
                try:
                    await callback()
                except Exception as error:
                    errors.append(error)
        return errors + await app.close(exc)

    async def start(self, *targets: Callable[..., Any]) -> None:
        """Create APP values now, with the APP values they depend on, and wait for them.

        So a server opens its pool before it accepts traffic instead of on the first
        call. *targets* are APP providers, as `Resolve` takes them: a function, or a
        type some provider provides. Values already made are kept; a start another call
        began is joined. Under a deadline of your own, timing out only stops the
        waiting: the start goes on, as it does for calls. ``Container(warm=[...])`` does
        this on every entry.

        ```python
        async with container:
            await container.start(pool, Settings)
        ```

        Raises:
            ResolventError: the container is not open; a target is not APP-scoped; or
                a value failed to start.
                The last says, on its last line, the provider and the cause; the
                original exception is its ``__context__``, not printed again with it
                (the ``resolvent`` logger has its traceback at DEBUG). Values started
                before it stay open.
            InvalidSignature: the targets' graph does not compile.
        """
        app = self._app
        if app is None:
            raise ResolventError(
                "container.start(...) needs an open container.\n"
                "  fix: call it inside `async with container:` (or the server lifespan), "
                "or pass Container(warm=[...]) to start them on entry"
            )
        check_targets("container.start(...)", targets)
        from .startup import start_values  # container.start only

        await start_values(self._plans.for_start(targets), app)

    def on_close(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Run *callback* when the open APP scope closes, before its resources close.

        For integrations that keep SESSION scopes of their own (the MCP adapter does):
        they are closed while the APP values they use still exist. Callbacks run last
        registered first, like an exit stack (one registered later may use what an
        earlier one closes), each to its end even if one fails; the next opening of the
        container starts with none.

        Raises:
            ResolventError: the container is not open.
        """
        if self._app is None:
            raise ResolventError("on_close needs an open container (`async with container:`)")
        self._closing.append(callback)

    @contextlib.asynccontextmanager
    async def lifespan(self, server: Any = None) -> AsyncGenerator[None, None]:
        """The APP scope as a lifespan: ``MCPServer("x", lifespan=container.lifespan)``,
        ``Starlette(lifespan=...)``, ``FastAPI(lifespan=...)``.

        It yields nothing (no lifespan state), which every one of them accepts: Starlette
        reads a yielded value as a state mapping, and FastAPI merges the states of the
        routers an app includes. Entries are reference-counted, so several connections
        may share one APP scope. Checks that integrations registered
        (`register_start_check`) run on *server* first.
        """
        from .startup import starting  # at start-up only

        async with starting(self, server):
            yield

    def wrap_lifespan(
        self, inner: Callable[[Any], contextlib.AbstractAsyncContextManager[T]]
    ) -> Callable[[Any], contextlib.AbstractAsyncContextManager[T]]:
        """Compose with your own lifespan: the APP scope opens first and closes last."""

        @contextlib.asynccontextmanager
        async def lifespan(server: Any) -> AsyncGenerator[T, None]:
            from .startup import starting

            async with starting(self, server), inner(server) as value:
                yield value

        return lifespan

    @property
    def is_open(self) -> bool:
        """True between entering and leaving ``async with container``."""
        return self._app is not None


def check_targets(where: str, targets: tuple[Any, ...]) -> None:
    """Refuse a start target that is neither a provider function nor a type (a provider's
    name as a string, say), naming where it was given, before anything compiles."""
    for target in targets:
        if not callable(target):
            example = where.replace("...", "open_pool"), where.replace("...", "Pool")
            raise InvalidSignature(
                f"{where} was given {target!r} ({with_article(type(target).__name__)}), "
                "which is neither a "
                "provider function nor a type.\n"
                "  fix: pass the provider itself or the type it provides, as `Resolve` "
                f"takes them: {example[0]} or {example[1]}"
            )
