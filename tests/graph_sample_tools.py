"""Tools wrapped like ``@inject(container)`` would wrap them, for the graph tests.

This module holds two containers, so the command must find the one the wrapper uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

from graph_sample import container, current_user
from resolvent import Container, Resolve

__all__ = ("container", "kept", "logged_tool", "other", "tool")


def wrap(c: Container) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Stands in for ``resolvent.mcp.inject``: a wrapper that closes over its container."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def wrapper(**kwargs: Any) -> Any:
            return await c.run(fn, **kwargs)

        return wrapper

    return decorate


other = Container()


@wrap(other)
async def tool(city: str, user_id: str, user: Annotated[str, Resolve(current_user)]) -> str:
    return f"{city}: {user}"


def logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A plain decorator over the wrapped tool: the container is one layer further in."""

    @functools.wraps(fn)
    async def logging(**kwargs: Any) -> Any:
        return await fn(**kwargs)

    return logging


logged_tool = logged(tool)


async def kept(city: str, user_id: str, user: Annotated[str, Resolve(current_user)]) -> str:
    return f"{city}: {user}"


kept.container = other  # type: ignore[attr-defined]  # a wrapper keeping it as an attribute
