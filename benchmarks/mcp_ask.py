"""An MCP tool that may ask (but does not), over both protocols, for each scenario's graph.

    python -m benchmarks --only "Ask"

The tool resolves the scenario's graph and one more resolver that may ask the user a
question (``-> Confirm | Elicit[Confirm]``) and, on every call, answers by itself: the
question is never sent. A tool that may ask runs its plan in a call scope that can ask (on
the 2026-07-28 protocol, a multi-round call): the path of every MCP tool with a question in
its graph. Each call is a real ``tools/call`` from the SDK's in-memory ``Client``:

- ``legacy``: the initialize handshake, a session; a question would be a standalone
  ``elicitation/create`` request;
- ``2026-07-28``: sessionless requests; a question would end the round with an
  ``InputRequiredResult``.

The hand-written tool computes the same graph in its body and calls the same resolver
itself (it never asks either). The SDK's own resolvers are not here: the graph's resolvers
would be the same, but the SDK has no APP scope and no resources, and whether a resolver
may ask is known only when it returns.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic import BaseModel

from .graphs import Graph, expected
from .impls import Instance, _exec, _instance, handwritten
from .runner import Factory, Scenario

PROTOCOLS = ("legacy", "2026-07-28")


class Confirm(BaseModel):
    ok: bool


CONFIRMED = Confirm(ok=True)


def _result(res: Any) -> Any:
    structured = getattr(res, "structured_content", None)
    if isinstance(structured, dict) and "result" in structured:
        return structured["result"]
    return int(res.content[0].text)


async def _client(server: Any, protocol: str, stack: contextlib.AsyncExitStack) -> Any:
    from mcp.client import Client

    return await stack.enter_async_context(Client(server, mode=protocol, cache=None))


async def build(
    graph: Graph, protocol: str, variant: str, stack: contextlib.AsyncExitStack
) -> Instance | str:
    """The tool over *graph* on an MCPServer, called through an in-memory client."""
    from mcp.server.mcpserver import MCPServer

    from resolvent import Elicit
    from resolvent.mcp import inject

    if graph.threaded:
        return "measured on the inline graphs"
    if variant == "hand-written":
        inner = await handwritten(graph, stack)
        hand_once = inner.once

        async def maybe_confirm() -> Confirm:
            return CONFIRMED

        async def hand_tool(user_id: str) -> int:
            ok = await maybe_confirm()
            assert ok.ok
            result: int = await hand_once()  # the graph, for the call argument it reads
            return result

        server = MCPServer("bench")
        server.tool(name="graph")(hand_tool)
        ns = {"counts": inner.counts, "teardowns": inner.teardowns}
    else:
        from .impls import resolvent_setup

        container, _, ns = resolvent_setup(graph)
        ns.update(Elicit=Elicit, Confirm=Confirm, CONFIRMED=CONFIRMED)
        src = [
            "async def maybe_confirm() -> Confirm | Elicit[Confirm]:\n    return CONFIRMED\n",
            f"async def tool(user_id: str, r: Annotated[int, Resolve(n{graph.root})],"
            " ok: Annotated[Confirm, Resolve(maybe_confirm)]) -> int:\n"
            "    assert ok.ok\n    return r\n",
        ]
        _exec("\n".join(src), ns, "mcp ask")
        server = MCPServer("bench", lifespan=container.lifespan)
        server.tool(name="graph")(inject(container)(ns["tool"]))
    client = await _client(server, protocol, stack)
    call_tool = client.call_tool
    args = {"user_id": "user-1"}

    async def once() -> Any:
        return _result(await call_tool("graph", args))

    return _instance(ns, once)


def factories(graph: Graph, protocol: str) -> dict[str, Factory]:
    def make(variant: str) -> Factory:
        return lambda stack: build(graph, protocol, variant, stack)

    return {"hand-written": make("hand-written"), "resolvent": make("resolvent")}


def scenarios(graphs: dict[str, Graph]) -> list[Scenario]:
    """One scenario per graph and protocol, keyed ``Ask legacy S2`` and so on."""
    out = []
    for key, graph in graphs.items():
        for protocol in PROTOCOLS:
            out.append(
                Scenario(
                    f"Ask {protocol} {key}",
                    f"MCP tool that may ask, {protocol}: {key}",
                    graph,
                    factories(graph, protocol),
                    nodes=len(graph.nodes),
                    expect=expected(graph),
                )
            )
    return out
