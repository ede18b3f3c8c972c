"""A chain of three dependent questions over MCP: the 2026-07-28 client sends only the
newest answer each round, and the earlier ones ride the request state to the end; the
legacy protocol asks each question once. The core's version is in test_core_promises.py."""

from typing import Annotated, Any

import mcp_types as types
import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import Name, Script, client, text
from resolvent import Container, Elicit, Resolve
from resolvent.mcp import inject


def build(concurrent: bool) -> MCPServer:
    container = Container(concurrent=concurrent)
    server = MCPServer("chain", lifespan=container.lifespan)

    async def first() -> Elicit[Name]:
        return Elicit("first?", Name)

    async def second(a: Annotated[Name, Resolve(first)]) -> Elicit[Name]:
        return Elicit(f"second, after {a.name}?", Name)

    async def third(
        a: Annotated[Name, Resolve(first)], b: Annotated[Name, Resolve(second)]
    ) -> Elicit[Name]:
        return Elicit(f"third, after {a.name} and {b.name}?", Name)

    @server.tool()
    @inject(container)
    async def chain(
        a: Annotated[Name, Resolve(first)],
        b: Annotated[Name, Resolve(second)],
        c: Annotated[Name, Resolve(third)],
    ) -> str:
        return f"{a.name}-{b.name}-{c.name}"

    return server


def only_question(result: Any) -> tuple[str, str]:
    """The key and message of the one question an InputRequiredResult asks."""
    assert isinstance(result, types.InputRequiredResult), result
    assert result.input_requests is not None
    [(key, request)] = result.input_requests.items()
    assert isinstance(request, types.ElicitRequest)
    return key, request.params.message  # type: ignore[union-attr]


@pytest.mark.parametrize("concurrent", [False, True], ids=["sequential", "concurrent"])
async def test_three_questions_one_answer_per_round_over_2026_07_28(concurrent: bool) -> None:
    server = build(concurrent)
    # The callback only declares the capability: this test answers each round itself.
    async with client(server, "2026-07-28", elicitation_callback=Script()) as c:
        result: Any = await c.session.call_tool("chain", {}, allow_input_required=True)
        for answer, expected in [
            ("A", "second, after A?"),
            ("B", "third, after A and B?"),
        ]:
            key, _ = only_question(result)
            result = await c.session.call_tool(
                "chain",
                {},
                input_responses={
                    key: types.ElicitResult(action="accept", content={"name": answer})
                },
                request_state=result.request_state,
                allow_input_required=True,
            )
            assert only_question(result)[1] == expected
        key, _ = only_question(result)
        done = await c.session.call_tool(
            "chain",
            {},
            input_responses={key: types.ElicitResult(action="accept", content={"name": "C"})},
            request_state=result.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, types.CallToolResult)
    assert not done.is_error, text(done)
    assert text(done) == "A-B-C"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_three_questions_through_the_sdk_client(mode: str) -> None:
    """The SDK's own client answering through its callback: each question asked once."""
    script = Script(
        **{
            "first?": ("accept", {"name": "A"}),
            "second, after A?": ("accept", {"name": "B"}),
            "third, after A and B?": ("accept", {"name": "C"}),
        }
    )
    async with client(build(False), mode, elicitation_callback=script) as c:
        result = await c.call_tool("chain", {})
    assert text(result) == "A-B-C"
    assert script.asked == ["first?", "second, after A?", "third, after A and B?"]
