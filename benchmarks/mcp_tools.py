"""The MCP scenario: an in-process ``server.call_tool`` of a tool whose diamond is injected.

Three tools on one MCPServer compute the same thing: the 8-resolver diamond resolved by
resolvent's adapter (``resolvent.mcp.inject``), written by hand in the tool body, and
resolved by the SDK's built-in resolvers.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from .graphs import USER_ID, diamond, expected, node_source
from .impls import Instance, _exec, _namespace
from .runner import Scenario

TITLE = "MCP tools/call in process: 8-resolver diamond"


def _result(res: Any) -> Any:
    structured = getattr(res, "structured_content", None)
    if isinstance(structured, dict) and "result" in structured:
        return structured["result"]
    return int(res.content[0].text)


def scenario() -> Scenario | str:
    try:
        from resolvent.mcp import inject  # noqa: F401
    except ImportError as exc:
        return f"adapter not available (resolvent.mcp: {exc})"
    graph = diamond()
    factories = {
        "hand-written": lambda stack: _build(stack, "hand"),
        "resolvent": lambda stack: _build(stack, "resolvent"),
        "mcp-sdk": lambda stack: _build(stack, "sdk"),
    }
    return Scenario(
        "MCP",
        TITLE,
        None,
        factories,
        nodes=len(graph.nodes),
        expect=expected(graph),
    )


async def _build(stack: contextlib.AsyncExitStack, variant: str) -> Instance | str:
    from mcp.server.mcpserver import MCPServer

    from resolvent import Container

    graph = diamond()
    container = Container()
    server = MCPServer("bench", lifespan=container.lifespan)
    if variant == "hand":
        ns = _namespace(graph)
        src = [
            node_source(i, n, lambda j: f"d{j}", "user_id", "") for i, n in enumerate(graph.nodes)
        ]
        body = "\n".join(
            # By position, as the other scenarios' floor (see benchmarks.impls._call).
            f"    v{i} = await n{i}({', '.join([f'v{j}' for j in n.deps] + (['user_id'] if n.arg else []))})"
            for i, n in enumerate(graph.nodes)
        )
        src.append(f"async def tool(user_id: str) -> int:\n{body}\n    return v{graph.root}\n")
        _exec("\n".join(src), ns, "mcp hand-written")
        tool = ns["tool"]
    else:
        if variant == "resolvent":
            from resolvent import Resolve
            from resolvent.mcp import inject

            wrap: Any = inject(container)
        else:
            from mcp.server.mcpserver.resolve import Resolve  # type: ignore[assignment]

            def wrap(fn: Any) -> Any:
                return fn

        ns = _namespace(graph, Resolve=Resolve, Annotated=Annotated)
        src = [
            node_source(
                i, n, lambda j: f"d{j}: Annotated[int, Resolve(n{j})]", "user_id: str", " -> int"
            )
            for i, n in enumerate(graph.nodes)
        ]
        src.append(
            f"async def tool(user_id: str, r: Annotated[int, Resolve(n{graph.root})]) -> int:\n"
            "    return r\n"
        )
        _exec("\n".join(src), ns, f"mcp {variant}")
        tool = wrap(ns["tool"])
    server.tool(name="diamond")(tool)
    await stack.enter_async_context(container)
    call_tool = server.call_tool
    args = {"user_id": USER_ID}

    async def once() -> Any:
        return _result(await call_tool("diamond", args))

    return Instance(once, ns["counts"], ns["teardowns"])
