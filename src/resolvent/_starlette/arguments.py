"""A Starlette endpoint's call arguments: each from the request's path parameters, else its
query string, else its default, converted as its annotation says (`Argument`); a missing
or invalid one the client's mistake, 400 (1008 on a WebSocket), naming it; and a method's
instance, bound by Python, as the call argument it is (`bind`)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection

from .._integration import argument_converter, type_name, with_article

__all__ = ("Argument", "bind", "request_arguments")


class Argument:
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


def request_arguments(
    name: str,
    connection: HTTPConnection,
    taken: list[Argument],
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


def bind(name: str, instance: str | None, args: Sequence[Any]) -> dict[str, Any]:
    """The instance a method was bound to, as the call argument *instance*."""
    if instance is not None and len(args) == 1:
        return {instance: args[0]}
    raise TypeError(
        f"{name} was called with {len(args)} positional argument(s) besides the request; "
        "an endpoint under `resolvent.starlette.inject` takes the request (or WebSocket) "
        "only, a method its instance and the request.\n"
        "  fix: use it as a Starlette endpoint, an HTTPEndpoint method or a FastAPI route"
    )
