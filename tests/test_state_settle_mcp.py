"""Over MCP, a call's writes settle before the tool's result is returned, and a round that
asks writes nothing.

The SDK's own client, in memory on both protocol revisions and over streamable HTTP on
127.0.0.1: a write refused as the call settles is a tool error naming what failed; a
booking whose resolver takes a seat through ``edit`` and then asks to confirm (naming
the seats in its question, as docs/mcp.md advises) writes nothing when the user declines,
converges in two rounds when they accept, and ``new`` stores one value per call, not one
per round. Every store; asyncio and trio (pairwise with the protocol revisions:
`stores_and_modes`).
"""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES, answering, client, run_uvicorn, text
from resolvent.mcp import inject
from settle_helpers import Booking, Faulty, values
from state_helpers import open_kind, open_test_store, stores_and_modes

ACCEPT = ("accept", {"ok": True})


def seat_server(store: Faulty) -> tuple[MCPServer, Booking]:
    booking = Booking(store)
    server = MCPServer("seats", lifespan=booking.container.lifespan)
    for tool in (booking.book, booking.open_show, booking.open_plain, booking.note):
        server.tool()(inject(booking.container)(tool))
    return server, booking


@pytest.fixture
async def store(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Faulty]:
    async with open_kind(request, store_kind, tmp_path) as inner:
        yield Faulty(inner)


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error, result
    return text(result)


async def seats_of(booking: Booking, show: str) -> tuple[int, int]:
    now = await values(booking, show)
    return now.left, now.reserved


async def check_settling(c: Any, booking: Booking, store: Faulty, mode: str) -> None:
    """What both transports must show, through the client *c* (answering as *c*'s
    callback says: declining first)."""
    show = text(await c.call_tool("open_plain", {}))
    assert text(await c.call_tool("note", {"show": show, "text": "a"})) == "1"
    too_large = error_text(await c.call_tool("note", {"show": show, "text": "x" * 400}))
    assert "over the limit of 300" in too_large
    store.refuse = True
    conflict = error_text(await c.call_tool("note", {"show": show, "text": "lost"}))
    store.refuse = False
    assert "nothing of this call was written" in conflict

    # Declined: neither the question's round nor the last one writes.
    assert (await c.call_tool("book", {"show": show})).is_error
    assert await seats_of(booking, show) == (10, 0)

    # Accepted: the question names the seats, the same in every round, so the rounds
    # converge; only the last one writes.
    c.callback.default = ACCEPT
    booked = await c.call_tool("book", {"show": show})
    assert not booked.is_error, booked
    assert await seats_of(booking, show) == (9, 1)
    assert c.callback.asked == ["Book 1 of 10 seats (1 held)?"] * 2  # declined, accepted

    # `new` behind a question: one value, the one the last round returned.
    created = len(store.created)
    handle = text(await c.call_tool("open_show", {}))
    assert store.created[created:] == [handle]
    assert (await values(booking, handle)).left == 10
    if mode == "2026-07-28":  # each round minted a handle; only the last one's is stored
        assert booking.minted[-2:-1] != [handle] and booking.minted[-1] == handle


class Answering:
    """An SDK client and the callback that answers it (the tests change its answer)."""

    def __init__(self, session: Any, callback: Any) -> None:
        self.session, self.callback = session, callback

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        result: types.CallToolResult = await self.session.call_tool(name, arguments)
        return result


@stores_and_modes(MODES)
async def test_settling_in_memory(store: Faulty, mode: str) -> None:
    server, booking = seat_server(store)
    callback = answering("decline")
    async with client(server, mode, elicitation_callback=callback) as c:
        await check_settling(Answering(c, callback), booking, store, mode)


@pytest.mark.network
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn in process: asyncio only
@pytest.mark.parametrize("mode", MODES)
async def test_settling_over_streamable_http(tmp_path: Path, mode: str) -> None:
    async with open_test_store("sqlite", tmp_path, None) as inner:
        store = Faulty(inner)
        server, booking = seat_server(store)
        stateless = mode == "2026-07-28"
        app = server.streamable_http_app(stateless_http=stateless, json_response=stateless)
        with anyio.fail_after(60):
            async with run_uvicorn(app) as url:
                callback = answering("decline")
                async with Client(url, mode=mode, elicitation_callback=callback) as c:
                    await check_settling(Answering(c, callback), booking, store, mode)
