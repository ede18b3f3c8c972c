"""The core's promised behaviours (test_core_promises.py) where they reach an MCP client:
with two failing concurrent branches, the tool error is the first failure."""

from typing import Annotated

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mcp_helpers import MODES, client, text
from resolvent import Container, Resolve
from resolvent.mcp import inject


# ToolErrors, so the SDK shows their text to the client (it hides other exceptions').
class FirstFailure(ToolError):
    pass


class FailedWhileCancelled(ToolError):
    pass


@pytest.mark.parametrize("mode", MODES)
async def test_two_failing_branches_report_the_first_failure(mode: str) -> None:
    container = Container(concurrent=True)
    server = MCPServer("branches", lifespan=container.lifespan)
    waiting = anyio.Event()

    async def fails_first() -> int:
        await waiting.wait()
        raise FirstFailure("the first failure")

    async def fails_while_cancelled() -> int:
        try:
            waiting.set()
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise FailedWhileCancelled("failed in its cancellation") from None
        raise AssertionError("not reached")

    @server.tool()
    @inject(container)
    async def both(
        a: Annotated[int, Resolve(fails_first)],
        b: Annotated[int, Resolve(fails_while_cancelled)],
    ) -> int:
        raise AssertionError("the tool must not run")

    async with client(server, mode) as c:
        result = await c.call_tool("both", {})
    assert result.is_error
    assert "the first failure" in text(result)
    assert "failed in its cancellation" not in text(result)
