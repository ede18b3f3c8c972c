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
import importlib.util
import inspect
import logging
import typing
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

import resolvent

from . import (
    Call,
    Container,
    InvalidSignature,
    Plan,
    StateConflict,
    StateTooLarge,
    StoreUnavailable,
)
from . import Scope as Lifetime  # not starlette.types.Scope, the ASGI scope
from ._integration import (
    HANDLER,
    Kept,
    Launcher,
    argument_converter,
    argument_parameters,
    instance_parameter,
    is_inline,
    shown_hints,
    type_name,
    with_article,
)

__all__ = ("inject", "refused")

F = TypeVar("F", bound=Callable[..., Any])

_CONNECTION = "resolvent_connection"  # FastAPI passes the request (or WebSocket) by this name
_CALLS = "resolvent.calls"  # the ASGI scope key of a request's open CALL scopes
# FastAPI's exit stack of one request (FastAPI >= 0.118), which it leaves after the
# response is sent, also when the route fails or the client leaves: where its own
# dependencies with `yield` close.
_REQUEST_STACK = "fastapi_inner_astack"
# The stack FastAPI leaves as soon as the route function has returned or raised, before
# the response is sent (FastAPI >= 0.121): where a request's call settles.
_FUNCTION_STACK = "fastapi_function_astack"


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
    if isinstance(exc, StateConflict):
        return HTTPException(409, str(exc))
    if isinstance(exc, StateTooLarge):
        return HTTPException(413, str(exc))
    if isinstance(exc, _UNAVAILABLE):  # its brief: no URL, no cause for a remote caller
        return HTTPException(503, getattr(exc, "brief", None) or str(exc))
    if isinstance(exc, OSError):
        return HTTPException(503, str(exc) or type(exc).__name__)
    return None


def _unavailable(exc: StoreUnavailable) -> HTTPException:
    """503 for a state store that failed while the call loaded its state, saying only
    that and to retry; the server's log has one warning line naming the store and the
    cause (the traceback at DEBUG)."""
    logging.getLogger("resolvent").warning("resolvent: %s", str(exc).split("\n")[0])
    logging.getLogger("resolvent").debug("resolvent: the store's error", exc_info=exc)
    return HTTPException(503, exc.brief, headers={"Retry-After": "1"})


# The public error of a store that cannot be reached, where this resolvent has one.
_UNAVAILABLE: tuple[type[BaseException], ...] = tuple(
    found for found in (getattr(resolvent, "StoreUnavailable", None),) if isinstance(found, type)
)


async def _settled(settle: Callable[[BaseException | None], Any]) -> None:
    """Settle a call that succeeded: a write refused now answers the request instead."""
    try:
        await settle(None)
    except StoreUnavailable as exc:  # logged once, as while loading
        raise _unavailable(exc) from exc
    except Exception as exc:
        answer = refused(exc)
        if answer is None:
            raise
        raise answer from exc


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


def _values(connection: HTTPConnection) -> dict[Any, Any]:
    # By the ASGI scope's type: an isinstance test of a Mapping subclass costs a frame.
    return {WebSocket if connection.scope["type"] == "websocket" else Request: connection}


def _request_calls(connection: HTTPConnection) -> dict[Container, Call]:
    """The CALL scopes open in this request, by container: kept in its ASGI scope, one
    dict per request, which Starlette's routers and mounts update in place."""
    scope = connection.scope
    calls: dict[Container, Call] | None = scope.get(_CALLS)
    if calls is None:
        calls = scope[_CALLS] = {}
    return calls


def _call_opener(container: Container) -> Callable[[HTTPConnection], AsyncGenerator[Call, None]]:
    """``open_call(connection)``: the request's CALL scope on *container* for the length
    of a block (a Starlette request and its response, a WebSocket connection), or the
    one an earlier `inject` of the same request opened (see `_held_call`).
    """

    async def open_call(connection: HTTPConnection) -> AsyncGenerator[Call, None]:
        calls = _request_calls(connection)
        call = calls.get(container)
        if call is not None:  # entered already in this request: its opener closes it
            yield call
            return
        async with container.call(values=_values(connection)) as call:
            calls[container] = call
            try:
                yield call
            finally:
                del calls[container]

    return open_call


async def _held_call(container: Container, connection: HTTPConnection) -> Call | None:
    """The request's CALL scope on *container* under FastAPI, open until FastAPI has sent
    the response; None if this request has no exit stack of FastAPI's.

    The first `inject` entered in the request (a FastAPI dependency, the route) opens it
    and puts its exit on FastAPI's request exit stack, where FastAPI's own dependencies
    with ``yield`` close (after the response, also when the route fails or the client
    leaves); every later one finds it in the request's ASGI scope (one dict per request,
    which Starlette's routers and mounts update in place), so a dependency and the route
    that uses it resolve in one CALL scope. No dependency of resolvent's own: solving one
    with ``yield`` costs FastAPI more per request than the whole resolution.
    """
    calls = _request_calls(connection)
    call = calls.get(container)
    if call is not None:
        return call
    stack = connection.scope.get(_REQUEST_STACK)
    if not isinstance(stack, AsyncExitStack):
        return None
    call = container.call(values=_values(connection))
    await call.__aenter__()
    calls[container] = call
    stack.push_async_exit(_Leave(calls, container, call))
    # FastAPI leaves the stack of the function's own dependencies once the route has
    # returned (or raised) and before it sends the response: the call settles there,
    # whichever of the request's functions opened what settles.
    settling = connection.scope.get(_FUNCTION_STACK)
    if isinstance(settling, AsyncExitStack):
        settling.push_async_exit(_Settle(call))
    return call


class _Settle(contextlib.AbstractAsyncContextManager[None]):
    """The settling of a request's CALL scope, on FastAPI's stack of the route function
    (see `_held_call`): the route's outcome is known, its response not yet sent."""

    __slots__ = ("call",)

    def __init__(self, call: Call) -> None:
        self.call = call

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            await self.call.settle(exc)
        else:
            await _settled(self.call.settle)


class _Leave(contextlib.AbstractAsyncContextManager[None]):
    """The exit of a request's CALL scope, on FastAPI's request exit stack (an object with
    ``__aexit__``: the stack takes it with less work than a callback)."""

    __slots__ = ("call", "calls", "container")

    def __init__(self, calls: dict[Container, Call], container: Container, call: Call) -> None:
        self.calls = calls
        self.container = container
        self.call = call

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        del self.calls[self.container]  # the request's scope dict no longer refers to it
        await self.call.__aexit__(exc_type, exc, tb)


class _Alone:
    """Whether a FastAPI route is first and last in its request to enter resolvent (see
    `_wrap`): then it starts its plan with no call scope object, as its launcher decides,
    keeping its CALL resources open in a `Kept` on FastAPI's request exit stack."""

    __slots__ = ("launcher", "routes", "wrapper")

    def __init__(self, container: Container, plan: Plan) -> None:
        self.launcher = Launcher(container, plan, keep=True)
        self.wrapper: Callable[..., Any] | None = None
        # FastAPI routes by id (a route is unhashable): whether it calls the wrapper as
        # its endpoint, and nowhere among its dependencies.
        self.routes: dict[int, tuple[Any, bool]] = {}

    def last_in(self, route: Any) -> bool:
        """Whether *route* (the request's FastAPI route) calls the wrapper as its endpoint
        and nowhere among its dependencies: then when the wrapper runs, every dependency
        of the request has been solved, and nothing after it enters resolvent."""
        entry = self.routes.get(id(route))
        if entry is not None and entry[0] is route:
            return bool(entry[1])
        last = _unbound(getattr(route, "endpoint", None)) is self.wrapper
        dependant = getattr(route, "dependant", None)
        if dependant is None:
            last = False
        pending = list(getattr(dependant, "dependencies", ()))
        while last and pending:
            dependency = pending.pop()
            last = _unbound(getattr(dependency, "call", None)) is not self.wrapper
            pending.extend(getattr(dependency, "dependencies", ()))
        if len(self.routes) >= 256:
            self.routes.clear()  # bounded: a forgotten route is looked at again
        self.routes[id(route)] = (route, last)
        return last


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
    open_call = _call_opener(container)
    request_call = contextlib.asynccontextmanager(open_call)
    instance = instance_parameter(fn, plan.arguments)
    params = argument_parameters(fn, [name for name in plan.arguments if name != instance], hints)
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        return _dressed(_dependency(container, fn, plan, instance), fn, params, instance, hints)
    taken = [_Argument(p) for p in params]
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
        calls = _request_calls(connection)
        call = calls.get(container)
        if call is not None:  # entered already in this request: its opener closes it
            try:
                response = await call.run(plan, **bound)
            except StoreUnavailable as exc:  # while the call loads: the store is down
                raise _unavailable(exc) from exc
            await _settled(call.settle)  # before the response leaves
            await response(scope, receive, send)
            return
        async with container.call(values={Request: connection}) as call:
            calls[container] = call
            try:
                try:
                    response = await call.run(plan, **bound)
                except StoreUnavailable as exc:  # while the call loads: the store is down
                    raise _unavailable(exc) from exc
                await _settled(call.settle)  # before the response leaves
                await response(scope, receive, send)
            finally:
                del calls[container]

    alone = _Alone(container, plan)
    launcher, routes = alone.launcher, alone.routes
    ready, blocks, overrides = launcher.ready, launcher.blocks, launcher.override_var
    scopes = launcher.scopes

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        connection: HTTPConnection | None = kwargs.pop(_CONNECTION, None)
        try:
            if connection is not None:
                # FastAPI: the request's CALL scope stays open until the response is sent. A
                # sync (def) function runs in a worker thread unless marked `inline`, as in
                # the core and the MCP adapter.
                if args:  # a method, bound to its instance
                    kwargs.update(_bind(plan.name, instance, args))
                scope = connection.scope
                calls = scope.get(_CALLS)
                if not calls or container not in calls:
                    # The route's own function, first in its request to enter resolvent:
                    # FastAPI has solved every dependency by now, so nothing else in the
                    # request can share its CALL values, and it needs no call scope object.
                    # Its CALL resources close on FastAPI's request exit stack, after the
                    # response, as the call scope's would.
                    stack = scope.get(_REQUEST_STACK)
                    route = scope.get("route")
                    last = routes.get(id(route))  # (route, last), see `_Alone.last_in`
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
                                await _settled(kept.settle)
                            return result
                held = await _held_call(container, connection)
                if held is not None:
                    result = await held.run(plan, **kwargs)
                    if _FUNCTION_STACK not in scope and alone.last_in(scope.get("route")):
                        await _settled(held.settle)  # a FastAPI with no stack to settle on
                    return result
                async with request_call(connection) as call:  # not in a FastAPI route
                    return await call.run(plan, **kwargs)
        except StoreUnavailable as exc:  # while the call loads: the store is down
            if isinstance(connection, WebSocket):
                raise
            raise _unavailable(exc) from exc
        # Starlette calls an endpoint with the request (or WebSocket), a method with its
        # instance first.
        if not args:
            raise TypeError(f"{plan.name} needs the request (or WebSocket) it serves")
        *before, last = args
        connection = typing.cast(HTTPConnection, last)
        bound = _bind(plan.name, instance, before) if before else {}
        if taken:  # its call arguments: from the path, else the query string
            bound.update(_request_arguments(short, connection, taken))
        if isinstance(connection, WebSocket):
            async with request_call(connection) as call:
                return await call.run(plan, **bound)
        return functools.partial(respond, connection, bound)

    alone.wrapper = wrapper
    return _dressed(wrapper, fn, params, instance, hints)


def _dressed(
    wrapper: Callable[..., Any],
    fn: Callable[..., Any],
    params: list[inspect.Parameter],
    instance: str | None,
    hints: dict[str, Any],
) -> Callable[..., Any]:
    """*wrapper* with *fn*'s names and the signature the framework reads: *params* (the
    call arguments), the request's for FastAPI, and the instance of a method."""
    if _has_fastapi():  # FastAPI passes a parameter annotated so the request itself
        params.insert(
            0,
            inspect.Parameter(
                _CONNECTION, inspect.Parameter.KEYWORD_ONLY, annotation=HTTPConnection
            ),
        )
    if instance is not None:  # Python binds it; FastAPI reads the bound signature without it
        params.insert(0, inspect.Parameter(instance, inspect.Parameter.POSITIONAL_OR_KEYWORD))

    returns = hints.get("return", inspect.Signature.empty)
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        value = getattr(fn, attribute, None)
        if value is not None:
            setattr(wrapper, attribute, value)
    annotations = {p.name: p.annotation for p in params if p.annotation is not p.empty}
    if returns is not inspect.Signature.empty:
        annotations["return"] = returns
    wrapper.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    wrapper.__annotations__ = annotations
    # Not `__wrapped__`: FastAPI unwraps to tell async from sync, and a `def` handler
    # behind this async wrapper would then be run in a thread pool as if it were sync.
    setattr(wrapper, HANDLER, fn)  # what `resolvent graph` and `resolvent bench` compile
    return wrapper


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
        connection: HTTPConnection | None = kwargs.pop(_CONNECTION, None)
        call = None if connection is None else await _held_call(container, connection)
        if call is None:
            raise TypeError(
                f"{name} is a generator: resolvent.starlette.inject serves one only as a "
                "FastAPI dependency (FastAPI 0.118 or later); a Starlette endpoint returns "
                "its response.\n"
                f"  fix: use it as `Annotated[T, Depends({getattr(fn, '__name__', name)})]` "
                "in a FastAPI route, or as a resolver, `Annotated[T, Resolve(...)]`"
            )
        if args:  # a method, bound to its instance
            kwargs.update(_bind(name, instance, args))
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


class _Argument:
    """A Starlette endpoint's call argument: its parameter, and what turns a path or query
    string into it, made on first use (a FastAPI route never needs it)."""

    __slots__ = ("_convert", "param")

    def __init__(self, param: inspect.Parameter) -> None:
        self.param = param
        self._convert: Callable[[Any], Any] | None = None

    def convert(self, value: str) -> Any:
        """*value* as the annotation says: a string as it is (``str``, `resolvent.Handle`,
        no annotation, or a type pydantic cannot validate), else validated as pydantic
        validates it, lax (``"3"`` becomes ``3`` for an ``int``)."""
        convert = self._convert
        if convert is None:
            convert = self._convert = argument_converter(self.param.annotation)
        return convert(value)


def _request_arguments(
    name: str,
    connection: HTTPConnection,
    taken: list[_Argument],
) -> dict[str, Any]:
    """A Starlette endpoint's call arguments, by name: each from the request's path
    parameters, else its query string, else the parameter's default. A missing or
    invalid one is the client's mistake: `HTTPException` 400 (for a WebSocket,
    `WebSocketException` 1008 before it is accepted), naming the parameter."""
    from pydantic import ValidationError

    path, query = connection.path_params, connection.query_params
    found: dict[str, Any] = {}
    for argument in taken:
        param = argument.param
        if param.name in path:
            value, where = path[param.name], "path"
        elif param.name in query:
            value, where = query[param.name], "query"
        elif param.default is not param.empty:
            continue
        else:
            _refuse(connection, f"{name} needs {param.name!r}, a path or query parameter")
        try:
            found[param.name] = argument.convert(value)
        except ValidationError:
            shown = with_article(type_name(param.annotation))
            _refuse(connection, f"{where} parameter {param.name!r} of {name} is not {shown}")
    return found


def _refuse(connection: HTTPConnection, detail: str) -> typing.NoReturn:
    if connection.scope["type"] == "websocket":
        from starlette.exceptions import WebSocketException

        raise WebSocketException(code=1008, reason=detail)
    raise HTTPException(status_code=400, detail=detail)


def _bind(name: str, instance: str | None, args: Sequence[Any]) -> dict[str, Any]:
    """The instance a method was bound to, as the call argument *instance*."""
    if instance is not None and len(args) == 1:
        return {instance: args[0]}
    raise TypeError(
        f"{name} was called with {len(args)} positional argument(s) besides the request; "
        "an endpoint under `resolvent.starlette.inject` takes the request (or WebSocket) "
        "only, a method its instance and the request.\n"
        "  fix: use it as a Starlette endpoint, an HTTPEndpoint method or a FastAPI route"
    )


# Whether a route's exit goes on FastAPI's stack with one append (see `Kept.on`).
_appends = Kept.probe
_APPENDS = Kept.appends


def _unbound(fn: Any) -> Any:
    """*fn*'s function if it is a bound method, else *fn*."""
    return getattr(fn, "__func__", fn)


def _has_fastapi() -> bool:
    """Whether FastAPI may call the wrapper (it passes the request by name; Starlette
    calls an endpoint with the request alone)."""
    return importlib.util.find_spec("fastapi") is not None
