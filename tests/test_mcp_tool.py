"""The tool as the SDK and its clients see it: schema, Context, output, errors, SDK parity."""

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import mcp_types as types
import pytest
from mcp.server.elicitation import (
    AcceptedElicitation,
    CancelledElicitation,
    DeclinedElicitation,
)
from mcp.server.elicitation import ElicitationResult as SdkElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver import resolve as sdk
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from mcp_helpers import MODES, Name, answering, client, text
from resolvent import Container, Elicit, InvalidSignature, Resolve, Scope
from resolvent.mcp import inject


class Db:
    def __init__(self) -> None:
        self.notes: list[str] = []


class User(BaseModel):
    name: str


class Saved(BaseModel):
    """A saved note."""

    id: int
    text: str
    by: str


def build(events: list[str]) -> MCPServer:
    container = Container()
    server = MCPServer("notes", lifespan=container.lifespan)

    @container.provider(scope=Scope.APP)
    async def database():
        events.append("db open")
        try:
            yield Db()
        finally:
            events.append("db close")

    async def current_user(ctx: Context) -> User:
        assert isinstance(ctx, Context)
        return User(name=f"user-{ctx.protocol_version}")

    async def transaction(db: Annotated[Db, Resolve(database)]):
        events.append("tx begin")
        try:
            yield db
        finally:
            events.append("tx end")

    async def broken(tx: Annotated[Db, Resolve(transaction)]) -> int:
        raise RuntimeError("the disk is on fire: secret-detail")

    async def refusing(tx: Annotated[Db, Resolve(transaction)]) -> int:
        raise ToolError("quota exceeded for today")

    @server.tool(annotations=types.ToolAnnotations(title="Add a note", destructive_hint=False))
    @inject(container)
    async def add_note(
        text: Annotated[str, Field(description="The note's text")],
        db: Annotated[Db, Resolve(transaction)],
        user: Annotated[User, Resolve(current_user)],
        ctx: Context,
        tag: str = "misc",
    ) -> Saved:
        """Add a note to the notebook."""
        assert isinstance(ctx, Context)
        db.notes.append(text)
        return Saved(id=len(db.notes), text=f"{text} #{tag}", by=user.name)

    @server.tool()
    @inject(container)
    async def whoami(user: Annotated[User, Resolve(current_user)]) -> str:
        return user.name

    @server.tool()
    @inject(container)
    def count(db: Annotated[Db, Resolve(database)]) -> int:
        """A sync tool body runs in a worker thread."""
        return len(db.notes)

    @server.tool()
    @inject(container)
    async def crash(n: Annotated[int, Resolve(broken)]) -> int:
        return n

    @server.tool()
    @inject(container)
    async def refuse(n: Annotated[int, Resolve(refusing)]) -> int:
        return n

    return server


@pytest.mark.parametrize("mode", MODES)
async def test_schema_shows_only_caller_arguments(mode: str) -> None:
    async with client(build([]), mode) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    add = tools["add_note"]
    assert add.input_schema["properties"].keys() == {"text", "tag"}
    assert add.input_schema["required"] == ["text"]
    assert add.input_schema["properties"]["text"]["description"] == "The note's text"
    assert add.description == "Add a note to the notebook."
    assert add.annotations is not None
    assert add.annotations.title == "Add a note"
    assert add.output_schema is not None
    assert add.output_schema["properties"].keys() == {"id", "text", "by"}
    assert tools["whoami"].input_schema["properties"] == {}


@pytest.mark.parametrize("mode", MODES)
async def test_call_injects_context_and_returns_structured_output(mode: str) -> None:
    events: list[str] = []
    async with client(build(events), mode) as c:
        # A value sent for an injected name is ignored.
        result = await c.call_tool(
            "add_note", {"text": "milk", "db": "evil", "user": {"name": "x"}}
        )
        assert not result.is_error, text(result)
        assert result.structured_content == {
            "id": 1,
            "text": "milk #misc",
            "by": f"user-{c.protocol_version}",
        }
        second = await c.call_tool("add_note", {"text": "eggs", "tag": "food"})
        assert second.structured_content is not None
        assert second.structured_content["id"] == 2
        counted = await c.call_tool("count", {})
        assert counted.structured_content == {"result": 2}
    assert events == ["db open", "tx begin", "tx end", "tx begin", "tx end", "db close"]


@pytest.mark.parametrize("mode", MODES)
async def test_resolver_crash_is_hidden_logged_and_cleaned_up(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[str] = []
    caplog.set_level(logging.INFO)
    async with client(build(events), mode) as c:
        result = await c.call_tool("crash", {})
        assert result.is_error
        assert "secret-detail" not in text(result)
        assert "crash" in text(result)
        refused = await c.call_tool("refuse", {})
        assert refused.is_error
        assert "quota exceeded for today" in text(refused)
        # The server keeps serving.
        assert not (await c.call_tool("whoami", {})).is_error
    # Every resource opened for the failing calls was closed.
    assert events.count("tx begin") == events.count("tx end") == 2
    # The server log names the resolver chain of the hidden failure.
    assert "resolvent: raised by" in caplog.text
    assert "broken" in caplog.text


async def test_direct_call_tool_without_a_request() -> None:
    # MCPServer.call_tool builds a Context outside any request; plain resolvers still run.
    server = build([])
    result = await server.call_tool("whoami", {})
    assert isinstance(result, types.CallToolResult)
    assert result.structured_content == {"result": "user-None"}


def test_compile_errors_surface_at_decoration() -> None:
    container = Container()

    async def needs(mystery: bytes) -> int:
        return 1

    with pytest.raises(InvalidSignature, match="mystery"):

        @inject(container)
        async def tool(n: Annotated[int, Resolve(needs)]) -> int:
            return n


def test_a_generator_is_refused_at_decoration() -> None:
    container = Container()

    async def rows() -> AsyncIterator[str]:
        yield "row"

    def numbers() -> Iterator[int]:
        yield 1

    for fn in (rows, numbers):
        with pytest.raises(InvalidSignature, match=f"'{fn.__name__}' .* is a generator"):
            inject(container)(fn)


# --- parity with the SDK's built-in resolvers -------------------------------------------


def build_sdk_style(use_inject: bool) -> MCPServer:
    """One tool written for the SDK's own resolvers; optionally under resolvent's inject."""
    container = Container()
    server = MCPServer("parity", lifespan=container.lifespan)
    wrap: Any = inject(container) if use_inject else (lambda fn: fn)

    async def ask_name(ctx: Context) -> sdk.Elicit[Name]:
        assert isinstance(ctx, Context)
        return sdk.Elicit("Your name?", Name)

    async def shout(name: Annotated[Name, sdk.Resolve(ask_name)], greeting: str) -> str:
        return f"{greeting.upper()} {name.name.upper()}"

    @server.tool()
    @wrap
    async def greet(
        greeting: str,
        loud: Annotated[str, sdk.Resolve(shout)],
        outcome: Annotated[SdkElicitationResult[Name], sdk.Resolve(ask_name)],
        ctx: Context,
    ) -> str:
        assert isinstance(outcome, AcceptedElicitation | DeclinedElicitation | CancelledElicitation)
        return f"{loud} ({type(outcome).__name__})"

    @server.tool()
    @wrap
    async def branch(outcome: Annotated[SdkElicitationResult[Name], sdk.Resolve(ask_name)]) -> str:
        if isinstance(outcome, AcceptedElicitation):
            return f"got {outcome.data.name}"
        return f"no ({type(outcome).__name__})"

    return server


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
async def test_sdk_style_tools_behave_the_same_under_inject(mode: str, action: str) -> None:
    seen: list[tuple[Any, ...]] = []
    for use_inject in (False, True):
        callback = answering(action, {"name": "ada"} if action == "accept" else None)
        async with client(build_sdk_style(use_inject), mode, elicitation_callback=callback) as c:
            schema = {t.name: t.input_schema for t in (await c.list_tools()).tools}
            greet = await c.call_tool("greet", {"greeting": "hi"})
            branch = await c.call_tool("branch", {})
        seen.append(
            (
                schema["greet"]["properties"].keys(),
                greet.is_error,
                text(greet) if not greet.is_error else "error",
                text(branch),
                callback.asked,
            )
        )
    assert seen[0] == seen[1]
    if action == "accept":
        assert seen[1][2] == "HI ADA (AcceptedElicitation)"
        assert seen[1][3] == "got ada"


class Greeting(str):
    pass


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_follows_overrides_and_a_changed_registry(mode: str) -> None:
    """A tool keeps its plan between calls, yet sees a test's override (for the server
    started inside the block) and a provider registered after its first call."""
    container = Container()

    async def real() -> Greeting:
        return Greeting("real")

    container.provide(real)
    server = MCPServer("greeter")

    @server.tool()
    @inject(container)
    async def greet(greeting: Annotated[Greeting, Resolve()]) -> str:
        return str(greeting)

    async def greeting_of(c: Any) -> str:
        result = await c.call_tool("greet", {})
        assert not result.is_error, text(result)
        return text(result)

    async with client(server, mode) as c:
        assert await greeting_of(c) == "real"
    with container.override(Greeting, lambda: Greeting("fake")):
        async with client(server, mode) as c:
            assert await greeting_of(c) == "fake"
    async with client(server, mode) as c:
        assert await greeting_of(c) == "real"

        async def newer() -> Greeting:
            return Greeting("newer")

        container.provide(newer)  # two providers of Greeting now: the plan is rebuilt
        ambiguous = await c.call_tool("greet", {})
        assert ambiguous.is_error, "the tool ran a plan compiled before the registry changed"


METHOD_CONTAINER = Container()
METHOD_EVENTS: list[str] = []


@METHOD_CONTAINER.provider(scope=Scope.APP)
async def method_db() -> Db:
    return Db()


async def method_tx() -> Any:
    METHOD_EVENTS.append("tx begin")
    try:
        yield "tx"
    finally:
        METHOD_EVENTS.append("tx end")


async def ask_name() -> Elicit[Name]:
    return Elicit("Your name?", Name)


class NotesTools:
    """Tools that live on an object holding their settings, decorated in the class body."""

    def __init__(self, prefix: str, events: list[str]) -> None:
        self.prefix = prefix
        self.events = events

    @inject(METHOD_CONTAINER)
    async def plain(self, n: int, db: Annotated[Db, Resolve(method_db)]) -> str:
        return f"{self.prefix}{n} of {len(db.notes)}"

    @inject(METHOD_CONTAINER)
    async def asking(
        self,
        ctx: Context,
        tx: Annotated[str, Resolve(method_tx)],
        name: Annotated[Name, Resolve(ask_name)],
    ) -> str:
        assert isinstance(ctx, Context)
        return f"{self.prefix}{name.name} in {tx}"

    @inject(METHOD_CONTAINER)
    def blocking(self, n: int, tx: Annotated[str, Resolve(method_tx)]) -> str:
        return f"{self.prefix}{n} in {tx}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("options", [{}, {"call_timeout": 30}, {"concurrent": True}])
async def test_methods_decorated_in_their_class_serve_as_tools(
    mode: str, options: dict[str, Any]
) -> None:
    # The instance is bound by Python, hidden from the client, and reaches the method.
    METHOD_CONTAINER.concurrent = options.get("concurrent", False)
    METHOD_CONTAINER.call_timeout = options.get("call_timeout")
    METHOD_EVENTS.clear()
    tools = NotesTools("#", METHOD_EVENTS)
    server = MCPServer("methods", lifespan=METHOD_CONTAINER.lifespan)
    for name in ("plain", "asking", "blocking"):
        server.tool(name=name)(getattr(tools, name))
    async with client(server, mode, elicitation_callback=answering("accept", {"name": "Ada"})) as c:
        listed = {
            t.name: list(t.input_schema.get("properties", {})) for t in (await c.list_tools()).tools
        }
        assert listed == {"plain": ["n"], "asking": [], "blocking": ["n"]}
        for _ in range(2):  # the first call is interpreted, later ones may be generated
            assert text(await c.call_tool("plain", {"n": 2})) == "#2 of 0"
            assert text(await c.call_tool("asking", {})) == "#Ada in tx"
            assert text(await c.call_tool("blocking", {"n": 3})) == "#3 in tx"
    assert METHOD_EVENTS.count("tx begin") == METHOD_EVENTS.count("tx end") > 0
