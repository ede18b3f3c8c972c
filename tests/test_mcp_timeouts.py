"""Expected failures reach the MCP client as tool errors and cost the server one log line.

An expired ``call_timeout``, a declined question and a bad answer are answers, not crash
reports: the client reads what failed and why, and the server logs one line without a
traceback (with the SDK's default logging, a traceback per call costs real CPU under load).
The user's own unexpected errors keep the SDK's treatment: a generic text and a traceback.
"""

import logging
from collections.abc import Iterator
from typing import Annotated

import anyio
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES, Confirm, answering, client, run_uvicorn, text
from resolvent import Container, Elicit, Resolve
from resolvent.mcp import inject

CALLS = 50


def build(call_timeout: float | None = 0.05) -> MCPServer:
    container = Container(call_timeout=call_timeout)
    server = MCPServer("slow", lifespan=container.lifespan)  # the SDK's default logging

    async def load_rows() -> list[str]:
        await anyio.Event().wait()  # never answers: only the deadline ends it
        return []

    @server.tool()
    @inject(container)
    async def list_rows(rows: Annotated[list[str], Resolve(load_rows)]) -> str:
        return ", ".join(rows)

    async def broken() -> str:
        raise RuntimeError("disk on fire")

    @server.tool()
    @inject(container)
    async def crash(value: Annotated[str, Resolve(broken)]) -> str:
        return value

    async def own_timeout() -> str:
        raise TimeoutError("the upstream API timed out")  # the user's own, not call_timeout

    @server.tool()
    @inject(container)
    async def upstream(value: Annotated[str, Resolve(own_timeout)]) -> str:
        return value

    async def confirm() -> Elicit[Confirm]:
        return Elicit("Sure?", Confirm)

    @server.tool()
    @inject(container)
    async def careful(answer: Annotated[Confirm, Resolve(confirm)]) -> str:
        return str(answer.ok)

    return server


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO)
    yield caplog


def server_lines(records: pytest.LogCaptureFixture, tool: str) -> list[logging.LogRecord]:
    found = records.records
    return [r for r in found if r.name.startswith("mcp") and repr(tool) in r.getMessage()]


def one_line_each(found: list[logging.LogRecord], count: int) -> None:
    assert len(found) == count, [r.getMessage() for r in found]
    for record in found:
        assert record.exc_info is None, "logged with a traceback"
        assert record.levelno < logging.ERROR
        assert "\n" not in record.getMessage()


@pytest.mark.parametrize("mode", MODES)
async def test_many_timed_out_calls_are_tool_errors_logged_in_one_line_each(
    mode: str, records: pytest.LogCaptureFixture
) -> None:
    server = build()
    results = []
    async with client(server, mode) as c:

        async def one() -> None:
            results.append(await c.call_tool("list_rows", {}))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for _ in range(CALLS):
                    group.start_soon(one)
    assert len(results) == CALLS
    for result in results:
        assert result.is_error
        assert "resolving `rows` took longer than call_timeout=0.05 s" in text(result)
        assert "load_rows" in text(result)
    one_line_each(server_lines(records, "list_rows"), CALLS)


@pytest.mark.parametrize("mode", MODES)
async def test_a_refused_question_is_logged_in_one_line(
    mode: str, records: pytest.LogCaptureFixture
) -> None:
    server = build(call_timeout=None)
    async with client(server, mode, elicitation_callback=answering("decline")) as c:
        result = await c.call_tool("careful", {})
    assert result.is_error and "declined" in text(result)
    one_line_each(server_lines(records, "careful"), 1)


@pytest.mark.parametrize("mode", MODES)
async def test_unexpected_errors_keep_their_traceback_and_stay_hidden(
    mode: str, records: pytest.LogCaptureFixture
) -> None:
    server = build(call_timeout=30)
    async with client(server, mode) as c:
        crashed = await c.call_tool("crash", {})
        timed = await c.call_tool("upstream", {})
    # A resolver's own TimeoutError is the user's error, not an expired call_timeout.
    for result, tool, secret in ((crashed, "crash", "fire"), (timed, "upstream", "upstream API")):
        assert result.is_error
        assert text(result) == f"Error executing tool {tool}"
        assert secret not in text(result)
        [record] = server_lines(records, tool)
        assert record.levelno == logging.ERROR and record.exc_info is not None


async def test_timed_out_calls_over_streamable_http(
    anyio_backend: str, records: pytest.LogCaptureFixture
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("uvicorn serves on asyncio only")
    from mcp.client import Client

    server = build()
    results = []
    with anyio.fail_after(60):
        async with run_uvicorn(server.streamable_http_app()) as url:

            async def one() -> None:
                async with Client(url, mode="legacy") as c:
                    results.append(await c.call_tool("list_rows", {}))

            async with anyio.create_task_group() as group:
                for _ in range(10):
                    group.start_soon(one)
    assert [r.is_error for r in results] == [True] * 10
    assert all("took longer than call_timeout=0.05 s" in text(r) for r in results)
    one_line_each(server_lines(records, "list_rows"), 10)
