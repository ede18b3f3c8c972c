"""Spans of MCP tool calls: resolvent's call under the SDK's ``tools/call NAME`` span, and
each question a person answers, on both protocols."""

import pytest

from mcp_helpers import MODES, Script, client, text
from test_mcp_rounds_chain import build
from trace_helpers import Installed, assert_nothing_secret, otel, tree

__all__ = ("otel",)  # the fixture, used by name

SECRETS = ("Ann-s3cret", "Bob-s3cret", "Cy-s3cret")  # the answers


@pytest.mark.parametrize("mode", MODES)
async def test_a_question_chain_is_one_tree_per_tool_call(otel: Installed, mode: str) -> None:
    script = Script(
        **{
            "first?": ("accept", {"name": "Ann-s3cret"}),
            "second, after Ann-s3cret?": ("accept", {"name": "Bob-s3cret"}),
            "third, after Ann-s3cret and Bob-s3cret?": ("accept", {"name": "Cy-s3cret"}),
        }
    )
    async with client(build(concurrent=False), mode, elicitation_callback=script) as c:
        result = await c.call_tool("chain", {})
    assert text(result) == "-".join(SECRETS)
    spans = otel.spans()
    f = "test_mcp_rounds_chain.build.<locals>."
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
        # Each round is a tree of its own: a tool call with no parent, its own trace.
        assert all(call.parent is None for call in calls)
        assert len({call.context.trace_id for call in calls}) == len(calls) == 4
        assert sorted((tree(spans, call) for call in calls), key=repr) == sorted(
            ([(f"call {f}chain", resolved[:asked])] for asked in (1, 2, 3, 3)), key=repr
        )
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
    assert_nothing_secret(spans, *SECRETS)
