"""`inject`: resolvent dependencies in Starlette endpoints and FastAPI path operations.

CALL is one HTTP request (or one WebSocket connection), APP is the container's lifespan
(pass ``lifespan=container.lifespan`` to the application), and the `Request` (or
`WebSocket`) reaches the endpoint and any resolver by type. On FastAPI, path and query
parameters and the body stay the framework's job: the wrapper shows it only the
caller-facing parameters, so injected ones never appear in its OpenAPI schema. A Starlette
endpoint's call arguments (a state handle, say) come from the path parameters, else the
query string. A dependency written with ``yield`` is a FastAPI dependency with ``yield``.

A request is one CALL scope wherever resolvent is entered in it: a FastAPI dependency
decorated with `inject` and the route that uses it share it.

The CALL scope closes after the response is sent, so a streaming body reads open
resources. On Starlette the endpoint returns at once and the work (resolving, the
function, sending its response) runs when Starlette sends that "response"; on FastAPI the
scope's exit joins the request's exit stack, which FastAPI leaves after the response.
Either way a failing handler or a departed client closes the resources too.

What settles the call's writes (resources marked `settles`: `State`'s ``new`` and
``edit``, a transaction) closes earlier, once the handler's outcome is known and before
the response is sent; a write refused then is the request's answer instead of the
handler's: 409 for a `StateConflict`, 413 for a `StateTooLarge` value, 503 for a store
that could not be reached (see `refused`).

This module needs Starlette (``pip install resolvent[starlette]``); the core never imports it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from . import Container, InvalidSignature, Plan, StoreUnavailable
from . import Scope as Lifetime  # not starlette.types.Scope, the ASGI scope
from ._integration import Kept, argument_parameters, instance_parameter, is_inline, shown_hints
from ._starlette.arguments import Argument, bind, request_arguments
from ._starlette.requests import (
    CALLS,
    FUNCTION_STACK,
    REQUEST_STACK,
    call_opener,
    held_call,
    refusal,
    request_calls,
    settled,
    unavailable,
)
from ._starlette.routes import CONNECTION, Alone, dressed

__all__ = ("inject", "refused")

F = TypeVar("F", bound=Callable[..., Any])


def refused(exc: BaseException) -> HTTPException | None:
    """The error response for a write the call could not make, or None for any other error.

    A `StateConflict` (another call holds or changed the state) is 409 Conflict, a
    `StateTooLarge` value 413 Content Too Large, and a store or service that could not
    be reached (the store's unavailable error, whose detail is its brief, or an
    `OSError`: refused, reset, timed out) 503 Service Unavailable; the detail is
    otherwise the error's message, which names what failed. `inject` answers so when a
    write is refused as the call settles, before the response is sent; raise
    ``refused(exc)`` yourself to answer the same way to such an error raised elsewhere
    in a route.
    """
    return refusal(exc)


def inject(container: Container) -> Callable[[F], F]:
    """Make *fn*'s resolvent dependencies work as a Starlette endpoint or FastAPI route.

    ```python
    @app.get("/notes")
    @inject(container)
    async def notes(limit: int, db: Annotated[Db, Resolve(database)]) -> list[str]: ...
    ```

    *fn* may be a method: decorated in a class body (an `HTTPEndpoint`'s ``get``, say),
    it takes ``self`` as Python binds it, and its instance's bound method serves as a
    Starlette endpoint or a FastAPI route (``app.get("/")(api.notes)``).

    Each request opens a CALL scope, resolves the injected parameters and calls *fn*
    (on Starlette, with its other parameters taken by name from the path parameters, else
    the query string: a missing or invalid one is a 400 naming it); the scope's
    resources close after the response is sent (a `StreamingResponse` streams
    with them open), also when the client disconnects or *fn* raises. A WebSocket
    endpoint's CALL scope lasts as long as the connection. A generator *fn* is a FastAPI
    dependency with ``yield``: set up before the route, torn down after the response,
    seeing the route's error.

    Args:
        container: the container holding the providers.

    Raises:
        InvalidSignature: the dependency graph cannot be compiled, or it needs SESSION
            values, which a web request does not have (at decoration).
    """
    container.add_value_type(Request)
    container.add_value_type(WebSocket)

    def decorate(fn: F) -> F:
        return typing.cast(F, _wrap(container, fn))

    return decorate


def _wrap(container: Container, fn: Callable[..., Any]) -> Callable[..., Any]:
    plan = container.compile(fn)
    if Lifetime.SESSION in plan.scopes:
        names = ", ".join(s.name for s in plan.steps if s.scope is Lifetime.SESSION)
        raise InvalidSignature(
            f"{plan.name} needs SESSION-scoped values ({names}), and a web request or "
            "WebSocket connection has no session: its CALL scope is the request and its APP "
            "scope the app's lifespan.\n"
            "  fix: make the provider Scope.CALL (one per request) or Scope.APP (shared by all)"
        )
    hints = shown_hints(fn, plan.arguments)
    open_call = call_opener(container)
    request_call = contextlib.asynccontextmanager(open_call)
    instance = instance_parameter(fn, plan.arguments)
    params = argument_parameters(fn, [name for name in plan.arguments if name != instance], hints)
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        return dressed(_dependency(container, fn, plan, instance), fn, params, instance, hints)
    taken = [Argument(p) for p in params]
    short = getattr(fn, "__name__", plan.name)  # what a client's 400 names

    async def respond(
        connection: HTTPConnection,
        bound: dict[str, Any],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        # Starlette: the whole request, response included, runs in one CALL scope:
        # `open_call`, written out (no generator context manager on every request).
        calls = request_calls(connection)
        call = calls.get(container)
        if call is not None:  # entered already in this request: its opener closes it
            try:
                response = await call.run(plan, **bound)
            except StoreUnavailable as exc:  # while the call loads: the store is down
                raise unavailable(exc) from exc
            await settled(call.settle)  # before the response leaves
            await response(scope, receive, send)
            return
        async with container.call(values={Request: connection}) as call:
            calls[container] = call
            try:
                try:
                    response = await call.run(plan, **bound)
                except StoreUnavailable as exc:  # while the call loads: the store is down
                    raise unavailable(exc) from exc
                await settled(call.settle)  # before the response leaves
                await response(scope, receive, send)
            finally:
                del calls[container]

    alone = Alone(container, plan)
    launcher, routes = alone.launcher, alone.routes
    ready, blocks, overrides = launcher.ready, launcher.blocks, launcher.override_var
    scopes = launcher.scopes

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        connection: HTTPConnection | None = kwargs.pop(CONNECTION, None)
        try:
            if connection is not None:
                # FastAPI: the request's CALL scope stays open until the response is sent. A
                # sync (def) function runs in a worker thread unless marked `inline`, as in
                # the core and the MCP adapter.
                if args:  # a method, bound to its instance
                    kwargs.update(bind(plan.name, instance, args))
                scope = connection.scope
                calls = scope.get(CALLS)
                if not calls or container not in calls:
                    # The route's own function, first in its request to enter resolvent:
                    # FastAPI has solved every dependency by now, so nothing else in the
                    # request can share its CALL values, and it needs no call scope object.
                    # Its CALL resources close on FastAPI's request exit stack, after the
                    # response, as the call scope's would.
                    stack = scope.get(REQUEST_STACK)
                    route = scope.get("route")
                    last = routes.get(id(route))  # (route, last), see `Alone.last_in`
                    if (
                        stack is not None
                        and (
                            last[1]
                            if last is not None and last[0] is route
                            else alone.last_in(route)
                        )
                        and not (blocks and overrides.get() is not None)
                    ):
                        start = ready.get(launcher)
                        if start is None:
                            start = launcher.prepare()
                        if start is not None:
                            # Its values: the connection by its type, told by the ASGI scope.
                            values = {
                                WebSocket if scope["type"] == "websocket" else Request: connection
                            }
                            if not launcher.kept:
                                return await start(kwargs, values, scopes(), fn)
                            kept = Kept.on(stack)  # closed after the response
                            result = await start(kwargs, values, scopes(kept), fn)
                            if launcher.settles:  # what settles the writes, before the response
                                await settled(kept.settle)
                            return result
                held = await held_call(container, connection)
                if held is not None:
                    result = await held.run(plan, **kwargs)
                    if FUNCTION_STACK not in scope and alone.last_in(scope.get("route")):
                        await settled(held.settle)  # a FastAPI with no stack to settle on
                    return result
                async with request_call(connection) as call:  # not in a FastAPI route
                    return await call.run(plan, **kwargs)
        except StoreUnavailable as exc:  # while the call loads: the store is down
            if isinstance(connection, WebSocket):
                raise
            raise unavailable(exc) from exc
        # Starlette calls an endpoint with the request (or WebSocket), a method with its
        # instance first.
        if not args:
            raise TypeError(
                f"{plan.name} needs the request (or WebSocket) it serves\n  fix: call it "
                "as Starlette does, with the request (or WebSocket) as its last argument"
            )
        *before, last = args
        connection = typing.cast(HTTPConnection, last)
        bound = bind(plan.name, instance, before) if before else {}
        if taken:  # its call arguments: from the path, else the query string
            bound.update(request_arguments(short, connection, taken))
        if isinstance(connection, WebSocket):
            async with request_call(connection) as call:
                return await call.run(plan, **bound)
        return functools.partial(respond, connection, bound)

    alone.wrapper = wrapper
    return dressed(wrapper, fn, params, instance, hints)


def _dependency(
    container: Container, fn: Callable[..., Any], plan: Plan, instance: str | None
) -> Callable[..., AsyncIterator[Any]]:
    """The wrapper of a FastAPI dependency written with ``yield``: an async generator
    itself, so FastAPI enters it as it enters its own (set-up before the route, teardown
    after it, seeing the route's error). Its injected parameters resolve in the request's
    CALL scope, which closes after it; a sync one's steps run in a worker thread unless
    it is marked `inline`."""
    name, is_async, threaded = plan.name, inspect.isasyncgenfunction(fn), not is_inline(fn)

    async def dependency(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        connection: HTTPConnection | None = kwargs.pop(CONNECTION, None)
        call = None if connection is None else await held_call(container, connection)
        if call is None:
            raise TypeError(
                f"{name} is a generator: resolvent.starlette.inject serves one only as a "
                "FastAPI dependency (FastAPI 0.118 or later); a Starlette endpoint returns "
                "its response.\n"
                f"  fix: use it as `Annotated[T, Depends({getattr(fn, '__name__', name)})]` "
                "in a FastAPI route, or as a resolver, `Annotated[T, Resolve(...)]`"
            )
        if args:  # a method, bound to its instance
            kwargs.update(bind(name, instance, args))
        kwargs.update(await call.resolve(plan, kwargs))
        if is_async:
            async with contextlib.asynccontextmanager(fn)(**kwargs) as value:
                yield value
        else:
            async with _entered(contextlib.contextmanager(fn)(**kwargs), threaded) as value:
                yield value

    return dependency


@contextlib.asynccontextmanager
async def _entered(
    manager: contextlib.AbstractContextManager[Any], threaded: bool
) -> AsyncGenerator[Any, None]:
    """A sync context manager entered and left in a worker thread (if *threaded*)."""

    async def step(method: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(method, *args) if threaded else method(*args)

    value = await step(manager.__enter__)
    try:
        yield value
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            if not await step(manager.__exit__, type(exc), exc, exc.__traceback__):
                raise
    else:
        with anyio.CancelScope(shield=True):
            await step(manager.__exit__, None, None, None)


# Whether a route's exit goes on FastAPI's stack with one append (see `Kept.on`).
_appends = Kept.probe
_APPENDS = Kept.appends
