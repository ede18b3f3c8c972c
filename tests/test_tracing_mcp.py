"""Spans of MCP tool calls: resolvent's call under the SDK's ``tools/call NAME`` span, and
each question a person answers, on both protocols."""

from typing import Annotated

import pytest
from mcp.server.mcpserver import MCPServer

from mcp_helpers import MODES, Name, Script, client, text
from resolvent import Container, Elicit, Resolve
from resolvent.mcp import inject
from trace_helpers import Installed, assert_nothing_secret, otel, tree

__all__ = ("otel",)  # the fixture, used by name

SECRET = "s3cret-argument"


def build() -> MCPServer:
    container = Container()
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
        word: str,
    ) -> str:
        return f"{a.name}-{b.name}-{c.name}"

    return server


@pytest.mark.parametrize("mode", MODES)
async def test_a_question_chain_is_one_tree_per_tool_call(otel: Installed, mode: str) -> None:
    script = Script(
        **{
            "first?": ("accept", {"name": "A"}),
            "second, after A?": ("accept", {"name": "B"}),
            "third, after A and B?": ("accept", {"name": "C"}),
        }
    )
    async with client(build(), mode, elicitation_callback=script) as c:
        result = await c.call_tool("chain", {"word": SECRET})
    assert text(result) == "A-B-C"
    spans = otel.spans()
    f = "test_tracing_mcp.build.<locals>."
    resolved = [(f"resolve {f}{name}", []) for name in ("first", "second", "third")]
    calls = [s for s in spans if s.name == "tools/call chain"]
    if mode == "legacy":  # one tool call; each question waits for its answer in it
        asked = [
            (f"ask {f}{n}", [("MCP send elicitation/create", [])])
            for n in ("first", "second", "third")
        ]
        (call,) = calls
        assert tree(spans, call) == [(f"call {f}chain", asked + resolved)]
        for name in ("first", "second", "third"):
            (ask,) = [s for s in spans if s.name == f"ask {f}{name}"]
            assert ask.attributes is not None
            assert ask.attributes["resolvent.answer.outcome"] == "accepted"
        waits = otel.metrics()["resolvent.answer.wait"]  # one point per resolver and outcome
        assert sorted((p.count, p.attributes["code.function.name"]) for p in waits) == [
            (1, f"{f}{name}") for name in ("first", "second", "third")
        ]
    else:  # a tool call per round: each resolves up to its unanswered question
        trees = sorted((tree(spans, call) for call in calls), key=len)
        assert sorted(len(t[0][1]) for t in trees) == [1, 2, 3, 3]
        assert all(t[0][1] == resolved[: len(t[0][1])] for t in trees)
        # Numbered, and each later round linked to the first round's call.
        rounds = sorted(
            (s for s in spans if s.name == f"call {f}chain"),
            key=lambda s: (s.attributes or {})["resolvent.round"],
        )
        assert [(s.attributes or {})["resolvent.round"] for s in rounds] == [1, 2, 3, 4]
        assert rounds[0].links == ()
        for later in rounds[1:]:
            assert [link.context.span_id for link in later.links] == [rounds[0].context.span_id]
            assert later.links[0].context.trace_id == rounds[0].context.trace_id
    assert_nothing_secret(spans, SECRET)
