"""An MCP tool leaves its plan's cold runner once the plan is hot (tiered execution):
its calls then start the generated code directly, as `container.run` does, instead of
asking the cold runner on every call (which cost the in-process tools/call benchmark 7%)."""

from typing import Annotated, Any

import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES, client, text
from resolvent import Container, Resolve
from resolvent._plan import Plan


async def word() -> str:
    return "hi"


@pytest.mark.parametrize("mode", MODES)
async def test_a_hot_tool_starts_its_generated_code(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    heated: list[str] = []
    heat = Plan.heat

    def counting_heat(self: Plan) -> Any:
        heated.append(self.name)
        return heat(self)

    monkeypatch.setattr(Plan, "heat", counting_heat)
    container = Container()
    server = MCPServer("t", lifespan=container.lifespan)

    from resolvent.mcp import inject

    @server.tool()
    @inject(container)
    async def greet(name: str, w: Annotated[str, Resolve(word)]) -> str:
        return f"{w} {name}"

    async with client(server, mode) as c:
        for _ in range(8):
            assert text(await c.call_tool("greet", {"name": "Ada"})) == "hi Ada"
    assert len(heated) == 1  # made hot once; later calls do not go through the cold runner
