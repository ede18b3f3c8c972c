"""The start-up guard: a handler with resolver markers but no @inject fails the server start."""

from typing import Annotated

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Resolve as SdkResolve

from mcp_helpers import client
from resolvent import Container, InvalidSignature, Resolve, Scope
from resolvent.mcp import check_server, inject
from snapshot import assert_snapshot


def build(*, forget_tool: bool, forget_prompt: bool = False) -> MCPServer:
    container = Container()
    server = MCPServer("notes", lifespan=container.lifespan)

    @container.provider(scope=Scope.APP)
    async def notes() -> dict[str, str]:
        return {"1": "buy milk"}

    async def owner() -> str:
        return "ada"

    async def add_note(
        text: str,
        store: Annotated[dict[str, str], Resolve(notes)],
        author: Annotated[str, Resolve(owner)],
    ) -> str:
        store[str(len(store) + 1)] = f"{text} ({author})"
        return "ok"

    server.tool()(add_note if forget_tool else inject(container)(add_note))

    async def note(note_id: str, store: Annotated[dict[str, str], Resolve(notes)]) -> str:
        return store[note_id]

    server.resource("notes://{note_id}")(inject(container)(note))

    async def summarise(note_id: str, store: Annotated[dict[str, str], Resolve(notes)]) -> str:
        return f"Summarise {store[note_id]!r}"

    server.prompt()(summarise if forget_prompt else inject(container)(summarise))

    @server.tool()  # the SDK's own resolvers, handled by the SDK: fine
    async def sdk_tool(who: Annotated[str, SdkResolve(owner)]) -> str:
        return who

    @server.tool()  # no markers at all: fine
    async def plain(text: str) -> str:
        return text

    return server


async def test_a_forgotten_inject_fails_the_server_start() -> None:
    server = build(forget_tool=True)
    with pytest.raises(BaseException) as caught:  # the client's task group may wrap it
        async with client(server, "legacy"):
            pass  # pragma: no cover
    error = caught.value
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, InvalidSignature)
    assert "tool 'add_note'" in str(error)
    assert "@inject(container)" in str(error)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_injected_and_sdk_handlers_start_and_serve(mode: str) -> None:
    server = build(forget_tool=False)
    check_server(server)
    async with client(server, mode) as c:
        assert not (await c.call_tool("add_note", {"text": "hi"})).is_error
        assert text_of(await c.call_tool("sdk_tool", {})) == "ada"


def text_of(result: object) -> str:
    return result.content[0].text  # type: ignore[attr-defined,no-any-return]


def test_check_server_names_every_forgotten_handler() -> None:
    server = build(forget_tool=True, forget_prompt=True)
    with pytest.raises(InvalidSignature) as caught:
        check_server(server)
    message = str(caught.value)
    for qualname in ("add_note", "summarise"):
        message = message.replace(f"build.<locals>.{qualname}", qualname)
    assert_snapshot("mcp_forgotten_inject", message)


def test_sdk_markers_on_a_prompt_are_not_handled_by_the_sdk() -> None:
    server = MCPServer("p")

    async def owner() -> str:
        return "ada"

    @server.prompt()
    async def hello(who: Annotated[str, SdkResolve(owner)]) -> str:
        return who

    with pytest.raises(InvalidSignature, match="prompt 'hello'"):
        check_server(server)
