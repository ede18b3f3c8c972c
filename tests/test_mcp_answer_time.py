"""A person's answer time is not resolver time: call_timeout excludes it, answer_timeout bounds it.

On the handshake protocol (2025-11-25) the server waits mid-call for the answer to an
``elicitation/create``; on 2026-07-28 the answer arrives in a later round. Either way the
time the person takes does not count against ``call_timeout``, and ``answer_timeout``
bounds it with an error of its own. The slow person is a client callback that sleeps.
"""

from typing import Annotated

import anyio
import mcp_types as types
import pytest
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES, Confirm, client, text
from resolvent import Container, Elicit, Resolve
from resolvent.mcp import inject

SLOW_PERSON = 0.4  # seconds the person takes to answer
BOUND = 0.1  # call_timeout, and answer_timeout where one is set


def build(answer_timeout: float | None = None) -> MCPServer:
    container = Container(call_timeout=BOUND, answer_timeout=answer_timeout)
    server = MCPServer("answers", lifespan=container.lifespan)

    async def confirm() -> Elicit[Confirm]:
        return Elicit("Delete everything?", Confirm)

    async def stuck(answer: Annotated[Confirm, Resolve(confirm)]) -> bool:
        await anyio.Event().wait()  # after the answer: resolver time again
        return answer.ok

    @server.tool()
    @inject(container)
    async def delete(answer: Annotated[Confirm, Resolve(confirm)]) -> str:
        return "deleted" if answer.ok else "kept"

    @server.tool()
    @inject(container)
    async def delete_slowly(done: Annotated[bool, Resolve(stuck)]) -> str:
        return "never"

    return server


async def slow_yes(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    await anyio.sleep(SLOW_PERSON)
    return types.ElicitResult(action="accept", content={"ok": True})


@pytest.mark.parametrize("mode", MODES)
async def test_a_slow_answer_does_not_count_against_call_timeout(mode: str) -> None:
    async with client(build(), mode, elicitation_callback=slow_yes) as c:
        result = await c.call_tool("delete", {})
    assert not result.is_error, text(result)
    assert text(result) == "deleted"


@pytest.mark.parametrize("mode", MODES)
async def test_resolvers_after_the_answer_are_still_bounded(mode: str) -> None:
    async with client(build(), mode, elicitation_callback=slow_yes) as c:
        result = await c.call_tool("delete_slowly", {})
    assert result.is_error
    assert "resolving `done` took longer than call_timeout=0.1 s" in text(result)


@pytest.mark.parametrize("mode", MODES)
async def test_answer_timeout_bounds_the_wait_with_its_own_error(mode: str) -> None:
    async with client(build(answer_timeout=BOUND), mode, elicitation_callback=slow_yes) as c:
        result = await c.call_tool("delete", {})
    assert result.is_error
    message = text(result)
    assert "`answer`" in message and "confirm" in message
    assert "not answered within answer_timeout=0.1 s" in message
    assert "call_timeout" not in message
