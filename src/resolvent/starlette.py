"""`inject`: resolvent dependencies in Starlette endpoints and FastAPI path operations.

CALL is one HTTP request (or one WebSocket connection), APP is the container's lifespan
(pass ``lifespan=container.lifespan`` to the application), and the `Request` (or
`WebSocket`) reaches the endpoint and any resolver by type. Path and query parameters and
the body stay the framework's job: the wrapper shows the framework only the caller-facing
parameters, so injected ones never appear in FastAPI's OpenAPI schema.

This module needs Starlette (``pip install resolvent[starlette]``); the core never imports it.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from starlette.requests import HTTPConnection, Request
from starlette.websockets import WebSocket

from ._container import Container

__all__ = ("inject",)

F = TypeVar("F", bound=Callable[..., Any])

_CONNECTION = "resolvent_connection"


def inject(container: Container) -> Callable[[F], F]:
    """Make *fn*'s resolvent dependencies work as a Starlette endpoint or FastAPI route.

    ```python
    @app.get("/notes")
    @inject(container)
    async def notes(limit: int, db: Annotated[Db, Resolve(database)]) -> list[str]: ...
    ```

    Each request opens a CALL scope, resolves the injected parameters, calls *fn* and
    closes the scope's resources when *fn* returns or raises.

    Args:
        container: the container holding the providers.

    Raises:
        InvalidSignature: the dependency graph cannot be compiled (at decoration).
    """
    container.add_value_type(Request)
    container.add_value_type(WebSocket)

    def decorate(fn: F) -> F:
        return typing.cast(F, _wrap(container, fn))

    return decorate


def _wrap(container: Container, fn: Callable[..., Any]) -> Callable[..., Any]:
    plan = container.compile(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    original = inspect.signature(fn)
    params = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=original.parameters[name].default,
            annotation=hints.get(name, inspect.Parameter.empty),
        )
        for name in plan.arguments
    ]
    websocket = any(hints.get(p) is WebSocket for p in original.parameters)
    connection_type: type[HTTPConnection] = WebSocket if websocket else Request
    params.insert(
        0,
        inspect.Parameter(
            _CONNECTION, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=connection_type
        ),
    )
    is_async = inspect.iscoroutinefunction(fn)

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        connection = args[0] if args else kwargs.pop(_CONNECTION)
        values: dict[Any, Any] = {
            WebSocket if isinstance(connection, WebSocket) else Request: connection
        }
        async with container.call(values=values) as call:
            injected = await call.resolve(plan, kwargs)
            kwargs.update(injected)
            if is_async:
                return await fn(**kwargs)
            return await anyio.to_thread.run_sync(functools.partial(fn, **kwargs))

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
    return wrapper
