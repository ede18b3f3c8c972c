"""The gateway example: an APP resource that is itself an MCP client session.

The upstream connection holds a task group across its ``yield``; it is opened by the
first ``tools/call``, shared by every later call and session, and closed once when the
server's lifespan ends. Driven by the SDK's own client on both protocol revisions.
"""

import anyio
import pytest
from examples.gateway_server import create_gateway

from mcp_helpers import MODES, client, text


@pytest.mark.parametrize("mode", MODES)
async def test_the_gateway_forwards_calls_over_one_upstream_session(mode: str) -> None:
    events: list[str] = []
    gateway = create_gateway(events)
    async with client(gateway, mode) as c:
        tools = await c.list_tools()
        (tool,) = tools.tools
        assert set(tool.input_schema["properties"]) == {"city"}  # the client stays hidden
        assert text(await c.call_tool("ask_weather", {"city": "Oslo"})) == "sunny in Oslo"

        async def ask(city: str) -> None:
            result = await c.call_tool("ask_weather", {"city": city})
            assert text(result) == f"sunny in {city}"

        async with anyio.create_task_group() as group:  # concurrent calls share it
            for city in ("Lima", "Pune", "Kyiv"):
                group.start_soon(ask, city)
        assert events == ["upstream connected"]
    assert events == ["upstream connected", "upstream closed"]


async def test_a_second_client_session_reuses_the_open_upstream() -> None:
    events: list[str] = []
    gateway = create_gateway(events)
    async with client(gateway, "legacy") as first:
        await first.call_tool("ask_weather", {"city": "Oslo"})
        async with client(gateway, "legacy") as second:
            result = await second.call_tool("ask_weather", {"city": "Rome"})
            assert text(result) == "sunny in Rome"
        assert events == ["upstream connected"]
    assert events == ["upstream connected", "upstream closed"]
