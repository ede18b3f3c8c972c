"""`resolvent.asgi`: resolvent handlers as plain ASGI applications, with no web framework.

`inject` makes a function an ASGI endpoint: its call arguments come from the path parameters
(``scope["path_params"]``), else the query string; its result is a 200's JSON body. `router`
maps path templates (``/notes/{note}``) to endpoints and serves the lifespan: APP opens at
start-up. A request is one CALL scope: its writes settle before the answer is sent, its other
resources close after it. A missing or invalid argument is 400, a refused write 409, 413 or
503, any other error 500, whose cause goes only to the ``resolvent`` logger.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import pydantic_core

from . import Container, StateConflict, StateTooLarge, StoreUnavailable
from ._integration import Kept, Launcher, argument_converter, argument_parameters, shown_hints

__all__ = ("inject", "router")

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class _BadArgument(Exception):
    """The client's mistake: answered 400 with this text."""


_STATUS = ((_BadArgument, 400), (StateConflict, 409), (StateTooLarge, 413),
           (StoreUnavailable, 503), (OSError, 503))  # fmt: skip


def inject(container: Container) -> Callable[[Callable[..., Any]], ASGIApp]:
    """Make a function an ASGI endpoint: ``router(container, {"/n/{id}": inject(c)(fn)})``.

    Raises:
        InvalidSignature: the dependency graph cannot be compiled (at decoration).
    """

    def decorate(fn: Callable[..., Any]) -> ASGIApp:
        plan = container.compile(fn)
        hints = shown_hints(fn, plan.arguments)
        params = {p.name: _read(p) for p in argument_parameters(fn, [*plan.arguments], hints)}
        launcher = Launcher(container, plan, keep=True)  # how the plan starts: its choice
        ready, blocks, overrides = launcher.ready, launcher.blocks, launcher.override_var

        async def endpoint(scope: dict[str, Any], receive: Any, send: Any) -> None:
            sent: list[int] = []  # the status, once the answer has started
            try:
                kwargs = _arguments(scope, params)
                overridden = blocks and overrides.get() is not None
                start = None if overridden else ready.get(launcher) or launcher.prepare()
                if start is None:  # an override in effect, or a plan that needs a call scope
                    async with container.call() as call:
                        result = await call.run(fn, **kwargs)
                        await call.settle(None)  # before the answer leaves
                        return await _answer(send, 200, result, sent)
                kept = Kept() if launcher.kept else None
                async with contextlib.nullcontext() if kept is None else kept:
                    result = await start(kwargs, {}, launcher.scopes(kept), fn)
                    if kept is not None and launcher.settles:
                        await kept.settle(None)  # before the answer leaves
                    return await _answer(send, 200, result, sent)
            except Exception as exc:
                status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
                if status == 500 or sent:  # the cause for the server's log, not the client
                    logging.getLogger("resolvent").exception("resolvent: %s failed", plan.name)
                if not sent:
                    shown = getattr(exc, "brief", None) or str(exc) or type(exc).__name__
                    detail = "Internal Server Error" if status == 500 else shown
                    await _answer(send, status, {"detail": detail}, sent)

        return endpoint

    return decorate


def router(container: Container, routes: Mapping[str, ASGIApp]) -> ASGIApp:
    """An ASGI application serving *routes* (path template -> endpoint, `{name}` a path
    parameter) and the lifespan, which opens the container's APP scope (404 elsewhere)."""
    table = [(re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$"), app)
             for path, app in routes.items()]  # fmt: skip

    async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(container, receive, send)
        for pattern, app in table:
            found = pattern.match(scope["path"])
            if found is not None:
                return await app({**scope, "path_params": found.groupdict()}, receive, send)
        await _answer(send, 404, {"detail": "Not Found"}, [])

    return application


async def _lifespan(container: Container, receive: Any, send: Any) -> None:
    await receive()  # lifespan.startup
    started = False
    try:
        async with container.lifespan():
            started = True
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
    except Exception as exc:
        failed = f"lifespan.{'shutdown' if started else 'startup'}.failed"
        await send({"type": failed, "message": str(exc)})
        return
    await send({"type": "lifespan.shutdown.complete"})


async def _answer(send: Any, status: int, content: Any, sent: list[int]) -> None:
    body = pydantic_core.to_json(content)
    sent.append(status)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _read(p: inspect.Parameter) -> tuple[Callable[[Any], Any], bool, str]:
    """(What turns the string into the argument; required; its type's name)."""
    kind = p.annotation
    required = p.default is inspect.Parameter.empty
    return argument_converter(kind), required, getattr(kind, "__name__", str(kind))


def _arguments(scope: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The call arguments, by name: each from the path parameters, else the query string."""
    given = {**dict(parse_qsl(scope.get("query_string", b"").decode())),
             **scope.get("path_params", {})}  # fmt: skip
    kwargs: dict[str, Any] = {}
    for name, (validate, required, shown) in params.items():
        if name not in given:
            if required:
                raise _BadArgument(f"{name!r} is missing: a path or query parameter")
            continue
        try:
            kwargs[name] = validate(given[name])
        except ValueError:  # pydantic's ValidationError
            raise _BadArgument(f"{name!r} is not a valid {shown}") from None
    return kwargs
