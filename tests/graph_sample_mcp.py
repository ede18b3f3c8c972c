"""An MCP tool wrapped with ``@inject`` for the graph tests; needs resolvent.mcp."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer

from graph_sample import container as unrelated  # a second Container global
from resolvent import Container, Resolve
from resolvent.mcp import inject

__all__ = ("container", "lookup", "server", "unrelated")

container = Container()
server = MCPServer("graph-sample", lifespan=container.lifespan)


async def request_id(ctx: Context) -> str:
    return str(ctx.request_id)


@server.tool()
@inject(container)
async def lookup(city: str, rid: Annotated[str, Resolve(request_id)]) -> str:
    return f"{city} ({rid})"
