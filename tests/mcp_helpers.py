"""Shared pieces for the MCP adapter tests: answer models, scripted clients, a uvicorn runner."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext
from pydantic import BaseModel

from ports import free_port as free_port

MODES = ("legacy", "2026-07-28")
"""Protocol modes of the in-memory client: the handshake protocol and the sessionless one."""

ACROSS_PROCESSES = pytest.mark.parametrize(
    ("mode", "anyio_backend"), [("legacy", "asyncio"), ("2026-07-28", "trio")]
)
"""Protocol mode and test backend, paired, for a test of a server in another process.

There the test's backend runs only the SDK's client; resolvent runs in the server
process, on its own loop. Each mode once, each backend once: the product would start the
same server twice for each promise, which the in-process tests keep on both backends.
"""


class Name(BaseModel):
    name: str


class Confirm(BaseModel):
    ok: bool


ElicitCallback = Callable[
    [ClientRequestContext, types.ElicitRequestParams], Awaitable[types.ElicitResult]
]


class Script:
    """A real elicitation callback that answers from a table and records every question."""

    def __init__(self, **answers: tuple[str, dict[str, Any] | None]) -> None:
        self.answers = answers  # message -> (action, content)
        self.default: tuple[str, dict[str, Any] | None] = ("cancel", None)
        self.asked: list[str] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        message = params.message
        self.asked.append(message)
        action, content = self.answers.get(message, self.default)
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]


def answering(action: str, content: dict[str, Any] | None = None) -> Script:
    """A callback giving the same answer to every question."""
    script = Script()
    script.default = (action, content)
    return script


def client(server: Any, mode: str, **kwargs: Any) -> Client:
    """An in-memory client; the list cache is off so each test sees the live tool list."""
    return Client(server, mode=mode, cache=None, **kwargs)


def text(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


@asynccontextmanager
async def run_uvicorn(app: Any) -> AsyncIterator[str]:
    """Serve *app* on 127.0.0.1 (a free port) in this event loop; yield the MCP URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                while not server.started:
                    await anyio.sleep(0.01)
            try:
                yield f"http://127.0.0.1:{port}/mcp"
            finally:
                server.should_exit = True
    finally:
        sock.close()


async def wait_listening(port: int, timeout: float = 60) -> None:
    """Wait until something accepts TCP connections on 127.0.0.1:*port*.

    The bound is generous: a server process started in a fresh virtualenv compiles its
    imports first, which takes long on a loaded two-core machine.
    """
    with anyio.fail_after(timeout):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
            else:
                await stream.aclose()
                return
