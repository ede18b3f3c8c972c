"""An MCP tool wrapped with ``@inject`` for the graph tests; needs resolvent.mcp."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer

from graph_sample import container as unrelated  # a second Container global
from resolvent import Container, Resolve
from resolvent.mcp import inject

__all__ = ("container", "greeting", "lookup", "motto_resource", "server", "unrelated", "weather")

container = Container()
server = MCPServer("graph-sample", lifespan=container.lifespan)


async def request_id(ctx: Context) -> str:
    return str(ctx.request_id)


@server.tool()
@inject(container)
async def lookup(city: str, rid: Annotated[str, Resolve(request_id)]) -> str:
    return f"{city} ({rid})"


@server.prompt()
@inject(container)
async def greeting(name: str, rid: Annotated[str, Resolve(request_id)]) -> str:
    return f"Hello {name} ({rid})"


async def motto() -> str:
    return "notes first"


@server.resource("notes://motto")
@inject(container)
async def motto_resource(text: Annotated[str, Resolve(motto)]) -> str:
    return text


@server.resource("notes://{city}/weather")
@inject(container)
async def weather(city: str, text: Annotated[str, Resolve(motto)]) -> str:
    return f"{city}: {text}"
