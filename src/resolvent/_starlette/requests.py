"""A request's CALL scope: kept in its ASGI scope, one per container, whichever `inject` of
the request opens it (a FastAPI dependency, the route); on FastAPI, its exit on the
request's exit stack and its settling on the route function's; and what a write refused as
it settles answers instead of the handler (`refusal`, `settled`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.websockets import WebSocket

import resolvent

from .. import Call, Container, StateConflict, StateTooLarge, StoreUnavailable

__all__ = (
    "CALLS",
    "FUNCTION_STACK",
    "REQUEST_STACK",
    "call_opener",
    "held_call",
    "refusal",
    "request_calls",
    "request_values",
    "settled",
    "unavailable",
)

CALLS = "resolvent.calls"  # the ASGI scope key of a request's open CALL scopes
# FastAPI's exit stack of one request (FastAPI >= 0.118), which it leaves after the
# response is sent, also when the route fails or the client leaves: where its own
# dependencies with `yield` close.
REQUEST_STACK = "fastapi_inner_astack"
# The stack FastAPI leaves as soon as the route function has returned or raised, before
# the response is sent (FastAPI >= 0.121): where a request's call settles.
FUNCTION_STACK = "fastapi_function_astack"


def refusal(exc: BaseException) -> HTTPException | None:
    """`resolvent.starlette.refused`: the error response for a write the call could not
    make, or None for any other error."""
    if isinstance(exc, StateConflict):
        return HTTPException(409, str(exc))
    if isinstance(exc, StateTooLarge):
        return HTTPException(413, str(exc))
    if isinstance(exc, _UNAVAILABLE):  # its brief: no URL, no cause for a remote caller
        return HTTPException(503, getattr(exc, "brief", None) or str(exc))
    if isinstance(exc, OSError):
        return HTTPException(503, str(exc) or type(exc).__name__)
    return None


def unavailable(exc: StoreUnavailable) -> HTTPException:
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


async def settled(settle: Callable[[BaseException | None], Any]) -> None:
    """Settle a call that succeeded: a write refused now answers the request instead."""
    try:
        await settle(None)
    except StoreUnavailable as exc:  # logged once, as while loading
        raise unavailable(exc) from exc
    except Exception as exc:
        answer = refusal(exc)
        if answer is None:
            raise
        raise answer from exc


def request_values(connection: HTTPConnection) -> dict[Any, Any]:
    # By the ASGI scope's type: an isinstance test of a Mapping subclass costs a frame.
    return {WebSocket if connection.scope["type"] == "websocket" else Request: connection}


def request_calls(connection: HTTPConnection) -> dict[Container, Call]:
    """The CALL scopes open in this request, by container: kept in its ASGI scope, one
    dict per request, which Starlette's routers and mounts update in place."""
    scope = connection.scope
    calls: dict[Container, Call] | None = scope.get(CALLS)
    if calls is None:
        calls = scope[CALLS] = {}
    return calls


def call_opener(container: Container) -> Callable[[HTTPConnection], AsyncGenerator[Call, None]]:
    """``open_call(connection)``: the request's CALL scope on *container* for the length
    of a block (a Starlette request and its response, a WebSocket connection), or the
    one an earlier `inject` of the same request opened (see `held_call`).
    """

    async def open_call(connection: HTTPConnection) -> AsyncGenerator[Call, None]:
        calls = request_calls(connection)
        call = calls.get(container)
        if call is not None:  # entered already in this request: its opener closes it
            yield call
            return
        async with container.call(values=request_values(connection)) as call:
            calls[container] = call
            try:
                yield call
            finally:
                del calls[container]

    return open_call


async def held_call(container: Container, connection: HTTPConnection) -> Call | None:
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
    calls = request_calls(connection)
    call = calls.get(container)
    if call is not None:
        return call
    stack = connection.scope.get(REQUEST_STACK)
    if not isinstance(stack, AsyncExitStack):
        return None
    call = container.call(values=request_values(connection))
    await call.__aenter__()
    calls[container] = call
    stack.push_async_exit(_Leave(calls, container, call))
    # FastAPI leaves the stack of the function's own dependencies once the route has
    # returned (or raised) and before it sends the response: the call settles there,
    # whichever of the request's functions opened what settles.
    settling = connection.scope.get(FUNCTION_STACK)
    if isinstance(settling, AsyncExitStack):
        settling.push_async_exit(_Settle(call))
    return call


class _Settle(contextlib.AbstractAsyncContextManager[None]):
    """The settling of a request's CALL scope, on FastAPI's stack of the route function
    (see `held_call`): the route's outcome is known, its response not yet sent."""

    __slots__ = ("call",)

    def __init__(self, call: Call) -> None:
        self.call = call

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            await self.call.settle(exc)
        else:
            await settled(self.call.settle)


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
