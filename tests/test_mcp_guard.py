"""The start-up guard: a handler with resolver markers but no @inject fails the server start."""

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Annotated

import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Resolve as SdkResolve

import resolvent._container.startup
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


def forgetful_server(lifespan: str, kind: str) -> MCPServer:
    """A server whose one *kind* of handler carries markers and no @inject at all."""
    container = Container()

    @contextlib.asynccontextmanager
    async def own_lifespan(server: MCPServer) -> AsyncIterator[dict[str, str]]:
        yield {}

    span = container.lifespan if lifespan == "lifespan" else container.wrap_lifespan(own_lifespan)
    server = MCPServer("forgetful", lifespan=span)

    @container.provider(scope=Scope.APP)
    async def notes() -> dict[str, str]:
        return {"1": "buy milk"}

    async def note(note_id: str, store: Annotated[dict[str, str], Resolve(notes)]) -> str:
        return store[note_id]

    # (A resource with marked parameters is refused by the SDK itself at registration.)
    (server.tool() if kind == "tool" else server.prompt())(note)
    return server


def start_error(caught: pytest.ExceptionInfo[BaseException]) -> BaseException:
    error = caught.value
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("kind", ["tool", "prompt"])
@pytest.mark.parametrize("lifespan", ["lifespan", "wrap_lifespan"])
async def test_the_guard_runs_without_resolvent_mcp_being_imported(
    monkeypatch: pytest.MonkeyPatch, lifespan: str, kind: str, mode: str
) -> None:
    # As in a server module that never imported resolvent.mcp: no guard was registered.
    monkeypatch.setattr(resolvent._container.startup, "_START_CHECKS", [])
    server = forgetful_server(lifespan, kind)
    with pytest.raises(BaseException) as caught:  # the client's task group may wrap it
        async with client(server, mode):
            pass  # pragma: no cover
    error = start_error(caught)
    assert isinstance(error, InvalidSignature), error
    assert f"{kind} " in str(error) and "'store'" in str(error)
    assert "@inject(container)" in str(error)


FRESH = """
import contextlib
from typing import Annotated

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Resolve as SdkResolve

from resolvent import Container, InvalidSignature, Resolve

container = Container()


@contextlib.asynccontextmanager
async def own(server):
    yield {}


async def owner() -> str:
    return "ada"


async def main() -> None:
    for span in (container.lifespan, container.wrap_lifespan(own)):
        server = MCPServer("fresh", lifespan=span)

        @server.tool()
        async def hello(who: Annotated[str, Resolve(owner)]) -> str:
            return who

        try:
            async with server.settings.lifespan(server):
                print("started")
        except InvalidSignature as exc:
            print("refused:", "tool 'hello'" in str(exc))
    # The SDK's own marker, on a prompt (where the SDK does not answer it), is refused too.
    server = MCPServer("fresh", lifespan=container.lifespan)

    @server.prompt()
    async def greet(who: Annotated[str, SdkResolve(owner)]) -> str:
        return who

    try:
        async with server.settings.lifespan(server):
            print("started")
    except InvalidSignature as exc:
        print("refused:", "prompt 'greet'" in str(exc))


anyio.run(main)
import sys

print("resolvent.mcp imported:", "resolvent.mcp" in sys.modules)
"""


def test_a_server_module_that_never_imports_resolvent_mcp_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["refused: True"] * 3, proc.stdout
