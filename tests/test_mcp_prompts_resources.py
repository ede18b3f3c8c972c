"""Injection in prompts, resource templates and static resources, as under tools.

Each test drives a real MCPServer with the SDK's in-memory Client on both protocol modes.
"""

from typing import Annotated

import mcp_types as types
import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

from mcp_helpers import MODES, Name, answering, client
from resolvent import Container, Elicit, Resolve, Scope
from resolvent.mcp import inject


def build() -> tuple[MCPServer, list[str]]:
    """A notes-like server whose prompt and resources need injected values and ask questions."""
    container = Container()
    server = MCPServer("prompts", lifespan=container.lifespan)
    events: list[str] = []

    @container.provider(scope=Scope.APP)
    async def catalogue() -> dict[str, str]:
        events.append("catalogue")
        return {"1": "buy milk", "2": "call mum"}

    @container.provider(scope=Scope.SESSION)
    async def visits():
        events.append("session open")
        counter = [0]
        try:
            yield counter
        finally:
            events.append("session close")

    async def connection():  # CALL: one prompts/get or resources/read (one round of it)
        events.append("open")
        try:
            yield "conn"
        finally:
            events.append("close")

    async def ask_name(ctx: Context) -> Elicit[Name]:
        events.append(f"ask from {type(ctx).__name__}")
        return Elicit("Your name?", Name)

    @server.prompt()
    @inject(container)
    async def summarise(
        note_id: str,
        notes: Annotated[dict[str, str], Resolve(catalogue)],
        conn: Annotated[str, Resolve(connection)],
        seen: Annotated[list[int], Resolve(visits)],
    ) -> str:
        """Summarise one note."""
        seen[0] += 1
        return f"Summarise {notes[note_id]!r} (via {conn}, visit {seen[0]})"

    @server.prompt()
    @inject(container)
    async def greet(name: Annotated[Name, Resolve(ask_name)], ctx: Context) -> str:
        """Greet the user by the name they give."""
        return f"Write a greeting for {name.name} ({type(ctx).__name__})"

    @server.resource("notes://{note_id}")
    @inject(container)
    async def note(
        note_id: str,
        notes: Annotated[dict[str, str], Resolve(catalogue)],
        conn: Annotated[str, Resolve(connection)],
    ) -> str:
        return f"{notes[note_id]} via {conn}"

    @server.resource("greeting://{lang}")
    @inject(container)
    async def greeting(lang: str, name: Annotated[Name, Resolve(ask_name)]) -> str:
        return f"[{lang}] hello {name.name}"

    @server.resource("notes://all")
    @inject(container)
    async def all_notes(notes: Annotated[dict[str, str], Resolve(catalogue)]) -> str:
        return ", ".join(sorted(notes.values()))

    return server, events


def contents(result: types.ReadResourceResult) -> str:
    item = result.contents[0]
    assert isinstance(item, types.TextResourceContents)
    return item.text


def prompt_text(result: types.GetPromptResult) -> str:
    content = result.messages[0].content
    assert isinstance(content, types.TextContent)
    return content.text


@pytest.mark.parametrize("mode", MODES)
async def test_prompt_arguments_show_only_caller_facing_parameters(mode: str) -> None:
    server, _ = build()
    async with client(server, mode) as c:
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        assert [a.name for a in prompts["summarise"].arguments or []] == ["note_id"]
        assert prompts["greet"].arguments in (None, [])
        assert prompts["summarise"].description == "Summarise one note."
        templates = (await c.list_resource_templates()).resource_templates
        assert sorted(t.uri_template for t in templates) == [
            "greeting://{lang}",
            "notes://{note_id}",
        ]
        resources = (await c.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["notes://all"]


@pytest.mark.parametrize("mode", MODES)
async def test_prompt_gets_app_session_and_call_values(mode: str) -> None:
    server, events = build()
    async with client(server, mode) as c:
        first = await c.get_prompt("summarise", {"note_id": "1"})
        second = await c.get_prompt("summarise", {"note_id": "2"})
    assert prompt_text(first) == "Summarise 'buy milk' (via conn, visit 1)"
    visit = "2" if mode == "legacy" else "1"  # 2026-07-28 has no session: SESSION is the request
    assert prompt_text(second) == f"Summarise 'call mum' (via conn, visit {visit})"
    assert events.count("catalogue") == 1
    assert events.count("open") == events.count("close") == 2
    assert events.count("session open") == events.count("session close")


@pytest.mark.parametrize("mode", MODES)
async def test_resources_and_templates_get_injected_values(mode: str) -> None:
    server, events = build()
    async with client(server, mode) as c:
        assert contents(await c.read_resource("notes://2")) == "call mum via conn"
        assert contents(await c.read_resource("notes://all")) == "buy milk, call mum"
    assert events.count("open") == events.count("close") == 1


@pytest.mark.parametrize("mode", MODES)
async def test_prompt_and_template_ask_over_the_negotiated_transport(mode: str) -> None:
    server, events = build()
    callback = answering("accept", {"name": "Ada"})
    async with client(server, mode, elicitation_callback=callback) as c:
        prompt = await c.get_prompt("greet", {})
        resource = await c.read_resource("greeting://en")
    assert prompt_text(prompt) == "Write a greeting for Ada (Context)"
    assert contents(resource) == "[en] hello Ada"
    assert callback.asked == ["Your name?", "Your name?"]
    assert "ask from Context" in events


@pytest.mark.parametrize("mode", MODES)
async def test_prompt_refusal_is_an_error_naming_the_parameter(mode: str) -> None:
    server, _ = build()
    async with client(server, mode, elicitation_callback=answering("decline")) as c:
        with pytest.raises(MCPError) as prompt_error:
            await c.get_prompt("greet", {})
        with pytest.raises(MCPError) as resource_error:
            await c.read_resource("greeting://en")
    assert "name" in str(prompt_error.value) and "declined" in str(prompt_error.value)
    assert "name" in str(resource_error.value) and "declined" in str(resource_error.value)


async def test_modern_prompt_and_template_ask_in_input_required_rounds() -> None:
    server, _ = build()
    async with client(server, "2026-07-28", elicitation_callback=answering("cancel")) as c:
        prompt = await c.session.get_prompt("greet", {}, allow_input_required=True)
        resource = await c.session.read_resource("greeting://en", allow_input_required=True)
        for first in (prompt, resource):
            assert isinstance(first, types.InputRequiredResult)
            [(key, request)] = (first.input_requests or {}).items()
            assert isinstance(request, types.ElicitRequest)
            assert request.params.message == "Your name?"
        answer = {key: types.ElicitResult(action="accept", content={"name": "Ada"})}
        assert isinstance(prompt, types.InputRequiredResult)
        done = await c.session.get_prompt(
            "greet",
            {},
            input_responses=answer,
            request_state=prompt.request_state,
            allow_input_required=True,
        )
        assert isinstance(done, types.GetPromptResult)
        assert prompt_text(done) == "Write a greeting for Ada (Context)"
