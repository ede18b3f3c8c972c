"""What a framework reads of a wrapper and of its route: the signature the wrapper shows
(`dressed`: the call arguments, FastAPI's request parameter, a method's instance), and
whether a FastAPI route is first and last in its request to enter resolvent (`Alone`),
when it may start its plan with no call scope object."""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

from starlette.requests import HTTPConnection

from .. import Container, Plan
from .._integration import HANDLER, Launcher

__all__ = ("CONNECTION", "Alone", "dressed", "has_fastapi")

CONNECTION = "resolvent_connection"  # FastAPI passes the request (or WebSocket) by this name


class Alone:
    """Whether a FastAPI route is first and last in its request to enter resolvent (see
    `resolvent.starlette`'s wrapper): then it starts its plan with no call scope object,
    as its launcher decides, keeping its CALL resources open in a `Kept` on FastAPI's
    request exit stack."""

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


def dressed(
    wrapper: Callable[..., Any],
    fn: Callable[..., Any],
    params: list[inspect.Parameter],
    instance: str | None,
    hints: dict[str, Any],
) -> Callable[..., Any]:
    """*wrapper* with *fn*'s names and the signature the framework reads: *params* (the
    call arguments), the request's for FastAPI, and the instance of a method."""
    if has_fastapi():  # FastAPI passes a parameter annotated so the request itself
        params.insert(
            0,
            inspect.Parameter(
                CONNECTION, inspect.Parameter.KEYWORD_ONLY, annotation=HTTPConnection
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


def _unbound(fn: Any) -> Any:
    """*fn*'s function if it is a bound method, else *fn*."""
    return getattr(fn, "__func__", fn)


def has_fastapi() -> bool:
    """Whether FastAPI may call the wrapper (it passes the request by name; Starlette
    calls an endpoint with the request alone)."""
    return importlib.util.find_spec("fastapi") is not None
