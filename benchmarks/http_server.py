"""One MCP server of the end-to-end scenario, served over streamable HTTP on 127.0.0.1.

    python -m benchmarks.http_server VARIANT PORT

VARIANT is ``hand-written``, ``resolvent`` or ``fastmcp``. Each server has two tools:
``graph(user_id)`` resolves the scenario's graph (an APP singleton, a per-call
async-generator resource and three async resolvers) and returns the root's value, and
``counts()`` returns how often each resolver ran and each resource was torn down, so the
driver can verify the server before and after timing.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any

from .graphs import Graph, Node, node_source
from .impls import _app_once, _exec, _namespace

VARIANTS = ("hand-written", "resolvent", "fastmcp")


def graph() -> Graph:
    """An APP singleton, a per-call resource using it, and three CALL resolvers (5 in all)."""
    return Graph(
        (
            Node(app=True),
            Node((0,), kind="agen"),
            Node((0,), arg=True),
            Node((1, 2)),
            Node((3, 1)),
        )
    )


def _hand(g: Graph) -> tuple[Any, Any, dict[str, Any]]:
    from mcp.server.mcpserver import MCPServer

    ns = _namespace(g, app_once=_app_once)
    src = [node_source(i, n, lambda j: f"d{j}", "user_id", "") for i, n in enumerate(g.nodes)]
    src.append(
        "n0 = app_once(n0)\n"
        "async def tool(user_id: str) -> int:\n"
        "    v0 = await n0()\n"
        "    g1 = n1(d0=v0)\n"
        "    v1 = await g1.__anext__()\n"
        "    try:\n"
        "        v2 = await n2(d0=v0, user_id=user_id)\n"
        "        v3 = await n3(d1=v1, d2=v2)\n"
        "        return await n4(d3=v3, d1=v1)\n"
        "    finally:\n"
        "        try:\n"
        "            await g1.__anext__()\n"
        "        except StopAsyncIteration:\n"
        "            pass\n"
    )
    _exec("\n".join(src), ns, "http hand-written")
    server = MCPServer("bench-hand")
    return server, ns["tool"], ns


def _resolvent(g: Graph) -> tuple[Any, Any, dict[str, Any]]:
    from mcp.server.mcpserver import MCPServer

    from resolvent.mcp import inject

    from .impls import resolvent_setup

    container, handler, ns = resolvent_setup(g)
    server = MCPServer("bench-resolvent", lifespan=container.lifespan)
    return server, inject(container)(handler), ns


def _fastmcp(g: Graph) -> tuple[Any, Any, dict[str, Any]]:
    from fastmcp import FastMCP
    from fastmcp.dependencies import Depends
    from uncalled_for import CallArgument

    ns = _namespace(
        g,
        Depends=Depends,
        CallArgument=CallArgument,
        acm=contextlib.asynccontextmanager,
        app_once=_app_once,
    )
    src = []
    for i, n in enumerate(g.nodes):
        text = node_source(i, n, lambda j: f"d{j}=Depends(n{j})", "user_id=CallArgument()", "")
        if n.kind == "agen":
            text = "@acm\n" + text
        if n.app:  # Depends has no APP scope: the same hand-written cache as the baseline
            text += f"n{i} = app_once(n{i})\n"
        src.append(text)
    src.append(f"async def tool(user_id: str, r=Depends(n{g.root})) -> int:\n    return r\n")
    _exec("\n".join(src), ns, "http fastmcp")
    return FastMCP("bench-fastmcp"), ns["tool"], ns


def build(variant: str) -> Any:
    """The variant's ASGI app (streamable HTTP, stateless, JSON responses)."""
    g = graph()
    make = {"hand-written": _hand, "resolvent": _resolvent, "fastmcp": _fastmcp}[variant]
    server, tool, ns = make(g)

    def counts() -> dict[str, list[int]]:
        return {"counts": list(ns["counts"]), "teardowns": list(ns["teardowns"])}

    server.tool(name="graph")(tool)
    server.tool(name="counts")(counts)
    if variant == "fastmcp":
        return server.http_app(path="/mcp", stateless_http=True, json_response=True)
    return server.streamable_http_app(stateless_http=True, json_response=True)


def main() -> None:
    import uvicorn

    variant, port = sys.argv[1], int(sys.argv[2])
    app = build(variant)
    # The server configures logging at INFO (session manager start and stop): only
    # warnings reach the benchmark's output.
    logging.getLogger().setLevel(logging.WARNING)
    uvicorn.run(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False
    )


if __name__ == "__main__":
    main()
