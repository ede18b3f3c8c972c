"""A gateway MCP server: its APP resource is a client session to another MCP server.

This is what an MCP proxy or gateway does. The upstream client keeps a task group open
for as long as it is connected (it reads replies in the background), so the provider
holds that task group across its ``yield``. resolvent opens the connection in a home task
of the APP scope: the first ``tools/call`` that needs it starts it, every later call (from
any session, in any task) shares it, and it is closed once, when the server shuts down.

The upstream here is an in-process server (`upstream`), reached over the SDK's in-memory
transport; a real gateway would use ``stdio_client(...)`` or ``streamable_http_client(...)``
the same way. Run it over stdio with ``python -m examples.gateway_server``.
"""

from collections.abc import AsyncIterator
from typing import Annotated

try:
    import mcp  # noqa: F401  (the first thing this example needs beyond resolvent)
except ModuleNotFoundError:
    raise SystemExit(
        'This example needs the MCP SDK: pip install ".[mcp]" (or run python3 dev.py demo).'
    ) from None

from mcp.client import Client
from mcp.server.mcpserver import MCPServer

from resolvent import Container, Resolve, Scope
from resolvent.mcp import inject

__all__ = ("create_gateway", "upstream")

upstream = MCPServer("weather")
"""The server behind the gateway: it knows the weather."""


@upstream.tool()
def forecast(city: str) -> str:
    """Tomorrow's weather in *city*."""
    return f"sunny in {city}"


def create_gateway(events: list[str] | None = None) -> MCPServer:
    """A gateway server with its own container; *events* records the upstream's lifecycle."""
    log = events if events is not None else []
    container = Container()

    @container.provider(scope=Scope.APP)
    async def weather() -> AsyncIterator[Client]:
        # Client keeps a task group open while connected: held across the yield.
        async with Client(upstream) as client:
            log.append("upstream connected")
            yield client
        log.append("upstream closed")

    gateway = MCPServer("gateway", lifespan=container.lifespan)

    @gateway.tool()
    @inject(container)
    async def ask_weather(city: str, client: Annotated[Client, Resolve(weather)]) -> str:
        """Ask the upstream weather server about *city*."""
        result = await client.call_tool("forecast", {"city": city})
        return " ".join(block.text for block in result.content if block.type == "text")

    return gateway


if __name__ == "__main__":
    from examples.serving import stdio_hint

    stdio_hint("gateway", "python -m examples.gateway_server")
    create_gateway().run("stdio")
