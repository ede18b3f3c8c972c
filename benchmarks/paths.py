"""resolvent's other public paths, built from a `Graph` like the implementations in `impls`.

`container.run` (``impls.resolvent``) is the path the main table times. A user reaches the
same plan through others, and each is timed (and counted in instructions) beside it:

- ``call.resolve``: ``async with session.call() as call: kwargs = await call.resolve(fn,
  args)``, then the function called with them: how a custom integration is written
  (docs/getting-started.md), in a session opened once, as a connection's;
- ``interpreter``: ``async with container.call(rounds=True) as call: await call.run(fn,
  ...)``: a multi-round call, which runs the plan step by step (as a plan's first calls and
  every MCP tool that may ask do);
- ``concurrent``: ``Container(concurrent=True)``, ``container.run``: independent branches
  at once.

The MCP tool that may ask is in `benchmarks.mcp_ask`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from typing import Any

from .graphs import USER_ID, Graph
from .impls import Builder, Instance, _instance, resolvent_setup


def _arg(graph: Graph) -> dict[str, Any]:
    return {"user_id": USER_ID}


async def call_resolve(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    """``call.resolve`` in a ``session.call()`` scope, then the handler with its result."""
    container, handler, ns = resolvent_setup(graph)
    container.compile(handler)
    await stack.enter_async_context(container)
    session = await stack.enter_async_context(container.session())
    opener = session.call
    args = _arg(graph)

    async def once() -> Any:
        async with opener() as call:
            kwargs = await call.resolve(handler, args)
            return await handler(user_id=USER_ID, **kwargs)

    return _instance(ns, once, container=container)


async def interpreter(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    """A multi-round call scope: the plan interpreted step by step."""
    if graph.threaded:
        return "measured on the inline graphs"
    container, handler, ns = resolvent_setup(graph)
    container.compile(handler)
    await stack.enter_async_context(container)
    opener = container.call

    async def once() -> Any:
        async with opener(rounds=True) as call:
            return await call.run(handler, user_id=USER_ID)

    return _instance(ns, once, container=container)


async def concurrent(graph: Graph, stack: contextlib.AsyncExitStack) -> Instance | str:
    """``Container(concurrent=True)``: independent async branches at once."""
    if graph.threaded:
        return "measured on the inline graphs"
    container, handler, ns = resolvent_setup(graph)
    container.concurrent = True
    container.compile(handler)
    await stack.enter_async_context(container)
    run = container.run

    def once() -> Awaitable[Any]:
        return run(handler, user_id=USER_ID)

    return _instance(ns, once, container=container)


PATHS: dict[str, Builder] = {
    "call.resolve": call_resolve,
    "interpreter": interpreter,
    "concurrent": concurrent,
}
"""The other paths, by the name the tables give them."""
