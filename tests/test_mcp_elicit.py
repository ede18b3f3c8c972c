"""Questions over MCP: legacy standalone requests and 2026-07-28 InputRequiredResult rounds.

Every test drives a real MCPServer with the SDK's own in-memory Client and real callbacks.
"""

from typing import Annotated, Any

import mcp_types as types
import pytest
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from mcp_helpers import MODES, Confirm, Name, Script, answering, client, text
from resolvent import (
    Accepted,
    Cancelled,
    Container,
    Declined,
    Elicit,
    ElicitationResult,
    Resolve,
)
from resolvent.mcp import ListRoots, Sample, inject

SECRET = "s3cr3t-client-content"


def build() -> tuple[MCPServer, list[str]]:
    """A server whose tools ask questions; *events* records resolver runs and teardowns."""
    container = Container()
    server = MCPServer("elicit", lifespan=container.lifespan)
    events: list[str] = []

    async def ask_name() -> Elicit[Name]:
        events.append("ask_name")
        return Elicit("Your name?", Name)

    async def ask_city() -> Elicit[Name]:
        events.append("ask_city")
        return Elicit("Your city?", Name)

    async def confirm(name: Annotated[Name, Resolve(ask_name)]) -> Elicit[Confirm]:
        events.append("confirm")
        return Elicit(f"Save {name.name}?", Confirm)

    async def connection():  # a CALL resource: opened and closed in every round
        events.append("open")
        try:
            yield "conn"
        finally:
            events.append("close")

    @server.tool()
    @inject(container)
    async def greet(greeting: str, name: Annotated[Name, Resolve(ask_name)]) -> str:
        """Greet the user by name."""
        return f"{greeting} {name.name}"

    @server.tool()
    @inject(container)
    async def maybe_greet(
        name: Annotated[ElicitationResult[Name], Resolve(ask_name)],
    ) -> str:
        match name:
            case Accepted(data=data):
                return f"hello {data.name}"
            case Declined():
                return "declined"
            case Cancelled():
                return "cancelled"
        return "?"

    @server.tool()
    @inject(container)
    async def two(
        name: Annotated[Name, Resolve(ask_name)],
        city: Annotated[Name, Resolve(ask_city)],
        conn: Annotated[str, Resolve(connection)],
    ) -> str:
        return f"{name.name} from {city.name} via {conn}"

    @server.tool()
    @inject(container)
    async def save(ok: Annotated[Confirm, Resolve(confirm)]) -> str:
        return f"saved={ok.ok}"

    @server.tool()
    @inject(container)
    async def versioned(name: Annotated[Name, Resolve(ask_versioned)]) -> str:
        return name.name

    return server, events


WORDING = ["Your name (v1)?"]


async def ask_versioned() -> Elicit[Name]:
    return Elicit(WORDING[0], Name)


@pytest.mark.parametrize("mode", MODES)
async def test_accept(mode: str) -> None:
    server, _ = build()
    async with client(server, mode, elicitation_callback=answering("accept", {"name": "Ada"})) as c:
        result = await c.call_tool("greet", {"greeting": "Hi"})
    assert not result.is_error
    assert text(result) == "Hi Ada"
    assert result.structured_content == {"result": "Hi Ada"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_unwrapped_consumer_of_a_refusal_gets_an_error_result(mode: str, action: str) -> None:
    server, _ = build()
    async with client(server, mode, elicitation_callback=answering(action)) as c:
        result = await c.call_tool("greet", {"greeting": "Hi"})
    assert result.is_error
    message = text(result)
    assert "'name'" in message
    assert ("declined" if action == "decline" else "cancelled") in message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
async def test_union_consumer_receives_the_outcome(mode: str, action: str) -> None:
    server, _ = build()
    callback = answering(action, {"name": "Ada"} if action == "accept" else None)
    async with client(server, mode, elicitation_callback=callback) as c:
        result = await c.call_tool("maybe_greet", {})
    expected = {"accept": "hello Ada", "decline": "declined", "cancel": "cancelled"}[action]
    assert not result.is_error
    assert text(result) == expected


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "content", [{"name": 7}, {"other": SECRET}, None], ids=["wrong-type", "wrong-field", "none"]
)
async def test_bad_content_is_an_error_that_never_echoes_the_client(
    mode: str, content: dict[str, Any] | None
) -> None:
    server, _ = build()
    async with client(server, mode, elicitation_callback=answering("accept", content)) as c:
        result = await c.call_tool("greet", {"greeting": "Hi"})
        assert result.is_error
        assert SECRET not in text(result)
        assert "7" not in text(result)
        # The error names the resolver and the parameter its value was for.
        assert "ask_name" in text(result)
        assert "parameter 'name'" in text(result)
        # The server keeps serving.
        assert (await c.call_tool("maybe_greet", {})).is_error


@pytest.mark.parametrize("mode", MODES)
async def test_missing_capability_is_the_sdk_error(mode: str) -> None:
    server, _ = build()
    async with client(server, mode) as c:
        with pytest.raises(MCPError) as caught:
            await c.call_tool("greet", {"greeting": "Hi"})
    assert caught.value.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert caught.value.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


@pytest.mark.parametrize("mode", MODES)
async def test_dependent_questions_each_asked_once(mode: str) -> None:
    server, _ = build()
    script = Script(
        **{"Your name?": ("accept", {"name": "Ada"}), "Save Ada?": ("accept", {"ok": True})}
    )
    async with client(server, mode, elicitation_callback=script) as c:
        result = await c.call_tool("save", {})
    assert text(result) == "saved=True"
    assert script.asked == ["Your name?", "Save Ada?"]


async def test_modern_batches_independent_questions_and_closes_each_round() -> None:
    server, events = build()
    async with client(server, "2026-07-28", elicitation_callback=answering("cancel")) as c:
        first = await c.session.call_tool("two", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None
        requests = first.input_requests
        assert len(requests) == 2
        messages = sorted(
            r.params.message for r in requests.values() if isinstance(r, types.ElicitRequest)
        )
        assert messages == ["Your city?", "Your name?"]
        # The CALL resource of round 1 was opened and closed within the round.
        assert events.count("open") == events.count("close") == 1
        answers: dict[str, types.InputResponse] = {
            key: types.ElicitResult(
                action="accept",
                content={"name": "Ada" if r.params.message == "Your name?" else "Paris"},  # type: ignore[union-attr]
            )
            for key, r in requests.items()
        }
        second = await c.session.call_tool(
            "two",
            {},
            input_responses=answers,
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(second, types.CallToolResult)
    assert text(second) == "Ada from Paris via conn"
    assert events.count("open") == events.count("close") == 2


async def test_modern_ignores_answers_to_questions_it_did_not_ask() -> None:
    server, _ = build()
    async with client(server, "2026-07-28", elicitation_callback=answering("cancel")) as c:
        first = await c.session.call_tool("greet", {"greeting": "Hi"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None
        (key,) = first.input_requests
        forged: dict[str, types.InputResponse] = {
            key: types.ElicitResult(action="accept", content={"name": "Mallory"})
        }
        # An unsolicited answer without the state that recorded the question: asked again.
        again = await c.session.call_tool(
            "greet", {"greeting": "Hi"}, input_responses=forged, allow_input_required=True
        )
        assert isinstance(again, types.InputRequiredResult)
        # With the state, the same answer counts.
        done = await c.session.call_tool(
            "greet",
            {"greeting": "Hi"},
            input_responses=forged,
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, types.CallToolResult)
    assert text(done) == "Hi Mallory"


async def test_modern_rejects_a_tampered_state() -> None:
    server, _ = build()
    async with client(server, "2026-07-28", elicitation_callback=answering("cancel")) as c:
        first = await c.session.call_tool("greet", {"greeting": "Hi"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.request_state is not None
        with pytest.raises(MCPError) as caught:
            await c.session.call_tool(
                "greet",
                {"greeting": "Hi"},
                request_state=first.request_state[:-4] + "AAAA",
                allow_input_required=True,
            )
    assert caught.value.code == types.INVALID_PARAMS


# --- sampling and roots (the SDK's own markers) ----------------------------------------


def build_sampling() -> MCPServer:
    container = Container()
    server = MCPServer("sampling", lifespan=container.lifespan)

    async def haiku(topic: str) -> Sample:
        message = types.SamplingMessage(
            role="user", content=types.TextContent(type="text", text=topic)
        )
        return Sample([message], max_tokens=20)

    async def roots() -> ListRoots:
        return ListRoots()

    @server.tool()
    @inject(container)
    async def poem(
        topic: str,
        sampled: Annotated[types.CreateMessageResult, Resolve(haiku)],
        found: Annotated[types.ListRootsResult, Resolve(roots)],
    ) -> str:
        assert isinstance(sampled.content, types.TextContent)
        return f"{sampled.content.text} / {len(found.roots)} root(s)"

    return server


async def sample_cb(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    first = params.messages[0].content
    assert isinstance(first, types.TextContent)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"ode to {first.text}"),
        model="m",
    )


async def roots_cb(context: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///srv/project")])  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
async def test_sample_and_list_roots(mode: str) -> None:
    server = build_sampling()
    async with client(server, mode, sampling_callback=sample_cb, list_roots_callback=roots_cb) as c:
        result = await c.call_tool("poem", {"topic": "rain"})
    assert not result.is_error, text(result)
    assert text(result) == "ode to rain / 1 root(s)"


@pytest.mark.parametrize("mode", MODES)
async def test_sampling_without_capability(mode: str) -> None:
    server = build_sampling()
    async with client(server, mode, list_roots_callback=roots_cb) as c:
        with pytest.raises(MCPError) as caught:
            await c.call_tool("poem", {"topic": "rain"})
    assert caught.value.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert caught.value.data == {"requiredCapabilities": {"sampling": {}}}


async def test_modern_accepts_an_answer_only_for_the_question_as_asked() -> None:
    server, _ = build()
    WORDING[0] = "Your name (v1)?"
    async with client(server, "2026-07-28", elicitation_callback=answering("cancel")) as c:
        first = await c.session.call_tool("versioned", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None
        (key,) = first.input_requests
        answer: dict[str, types.InputResponse] = {
            key: types.ElicitResult(action="accept", content={"name": "Ada"})
        }
        # The question changed between rounds (say, a redeploy): the old answer is not used.
        WORDING[0] = "Your name (v2)?"
        second = await c.session.call_tool(
            "versioned",
            {},
            input_responses=answer,
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(second, types.InputRequiredResult)
        assert second.input_requests is not None
        request = second.input_requests[key]
        assert isinstance(request, types.ElicitRequest)
        assert request.params.message == "Your name (v2)?"
        done = await c.session.call_tool(
            "versioned",
            {},
            input_responses=answer,
            request_state=second.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, types.CallToolResult)
    assert text(done) == "Ada"
