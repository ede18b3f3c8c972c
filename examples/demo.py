"""resolvent behind an MCP server, in one screen.

Run it with ``python3 dev.py demo`` (or ``python examples/demo.py``). It starts the notes
server of ``examples/notes_server`` in-process and drives it with the MCP SDK's own
`Client`, speaking both protocol revisions: the handshake one (2025-11-25, ``legacy``) and
the sessionless 2026-07-28. A scripted user answers the server's questions, so the demo
needs no terminal, no network, and finishes at once.

The transcript shows the tool list (injected parameters never reach the client), which
scope each value came from, a confirmation question over both revisions, a declined one,
and the teardown order. Lines from the server's scopes are its DEBUG log; lines marked
``client`` are what the client sent (``>``) and received (``<``).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import anyio

try:
    import mcp  # noqa: F401  (the first thing this example needs beyond resolvent)
except ModuleNotFoundError:
    raise SystemExit(
        'This example needs the MCP SDK: pip install ".[mcp]" (or run python3 dev.py demo).'
    ) from None

import mcp_types as types
from mcp.client import Client, ClientRequestContext
from notes_server import server as notes

LEGACY = "legacy"  # the initialize handshake: protocol 2025-11-25
MODERN = "2026-07-28"


def out(line: str) -> None:
    """Print one transcript line; if the reader went away (``| head``), go on silently."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def say(who: str, text: str) -> None:
    out(f"  {who:<8} {text}")


def heading(text: str) -> None:
    out(f"\n== {text}")


class ScopeLog(logging.Handler):
    """Prints the notes server's scope log (its records carry a ``scope`` field)."""

    def emit(self, record: logging.LogRecord) -> None:
        say(getattr(record, "scope", "server"), record.getMessage())


def quiet_logging() -> None:
    """Print the notes server's scope log; keep the SDK's own INFO logging quiet."""
    logging.getLogger().setLevel(logging.WARNING)
    scopes = notes.logger
    scopes.addHandler(ScopeLog())
    scopes.setLevel(logging.DEBUG)
    scopes.propagate = False


class ScriptedUser:
    """The person behind the client: answers each question from a script."""

    def __init__(self, answers: dict[str, types.ElicitResult]) -> None:
        self.answers = answers

    def answer(self, message: str) -> types.ElicitResult:
        reply = self.answers[message]
        say("client", f"> {reply.action} {reply.content or ''}".rstrip())
        return reply

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        """The SDK's elicitation callback: a legacy server asks with a request of its own."""
        say("client", f'< elicitation/create "{params.message}" (request {context.request_id})')
        return self.answer(params.message)


def accept() -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"confirm": True})


def shown(result: types.CallToolResult) -> str:
    data: Any = result.structured_content or {}
    if "author" in data:
        return f"note {data['id']} {data['text']!r} by {data['author']}"
    if isinstance(data.get("result"), list):
        return "notes: " + ", ".join(f"{n['id']} {n['text']!r}" for n in data["result"])
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return ("error: " if result.is_error else "") + content.text


async def call(client: Client, name: str, **arguments: Any) -> types.CallToolResult:
    """One ``tools/call``; a legacy server asks its questions while the request is open."""
    say("client", f"> {name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})")
    result = await client.call_tool(name, arguments)
    say("client", f"< {shown(result)}")
    return result


async def call_in_rounds(
    client: Client, user: ScriptedUser, name: str, **arguments: Any
) -> tuple[types.CallToolResult, int]:
    """One tool call on 2026-07-28, round by round (``Client.call_tool`` loops like this).

    Each round is a complete ``tools/call``; questions come back in an
    ``InputRequiredResult`` and the retry carries the answers and the opaque state.
    """
    args = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    say("client", f"> {name}({args})  [round 1]")
    result = await client.session.call_tool(name, arguments, allow_input_required=True)
    rounds = 1
    while isinstance(result, types.InputRequiredResult):
        answers: dict[str, types.InputResponse] = {}
        for key, request in (result.input_requests or {}).items():
            assert isinstance(request, types.ElicitRequest)
            say("client", f'< InputRequiredResult "{request.params.message}"')
            answers[key] = user.answer(request.params.message)
        rounds += 1
        say("client", f"> {name}({args}) + answers, request_state  [round {rounds}]")
        result = await client.session.call_tool(
            name,
            arguments,
            input_responses=answers,
            request_state=result.request_state,
            allow_input_required=True,
        )
    assert isinstance(result, types.CallToolResult)
    say("client", f"< {shown(result)}")
    return result, rounds


async def list_tools(client: Client) -> None:
    heading("tools/list: injected parameters are hidden from the client")
    rows: list[tuple[str, str]] = []
    for tool in (await client.list_tools()).tools:
        # What the client sees: the inputSchema's properties.
        signature = f"{tool.name}({', '.join(tool.input_schema.get('properties', {}))})"
        # What the tool function declares besides: resolved on the server, by scope.
        plan = notes.container.compile(getattr(notes, tool.name))
        scopes = {step.index: step.scope.name for step in plan.steps}
        hidden = [f"{i.name} ({scopes[i.step]})" for i in plan.inputs if i.source == "step"]
        rows.append((signature, ", ".join(hidden)))
    width = max(len(signature) for signature, _ in rows)
    for signature, hidden in rows:
        out(f"  {signature:<{width}}  injected, hidden from the client: {hidden}")


async def main() -> None:
    quiet_logging()
    user = ScriptedUser(
        {
            "Delete note 1: 'buy milk'?": types.ElicitResult(action="decline"),
            "Delete note 2: 'call mum'?": accept(),
            "Delete note 3: 'water plants'?": accept(),
        }
    )
    out("resolvent MCP demo: examples/notes_server, in-process, with the SDK's Client")
    # The open container stands for the server process: each Client enters the server's
    # lifespan, which shares this APP scope, so the database outlives both connections.
    async with notes.container:
        async with Client(notes.server, mode=LEGACY, elicitation_callback=user) as client:
            await list_tools(client)

            heading(f"scopes: three calls on one legacy connection ({client.protocol_version})")
            for text in ("buy milk", "call mum", "water plants"):
                await call(client, "add_note", text=text)
            say("", "APP database opened once, SESSION writer-1 kept for the connection,")
            say("", "a CALL transaction per call")

            heading("confirmation, legacy: elicitation/create while tools/call is open")
            await call(client, "delete_note", note_id=2)
            say("", "the client sent 1 tools/call request; the server asked in the middle")

            async with Client(notes.server, mode=MODERN, elicitation_callback=user) as modern:
                heading(
                    f"confirmation, {modern.protocol_version}: InputRequiredResult, then a retry"
                )
                _, rounds = await call_in_rounds(modern, user, "delete_note", note_id=3)
            say("", f"the client sent {rounds} tools/call requests, each with its own CALL scope")

            heading("declined confirmation (legacy)")
            await call(client, "delete_note", note_id=1)
            say("", "the tool got the decline as a value, deleted nothing and said so")
            await call(client, "list_notes")

            heading("a note that is not there: refused before anyone is asked")
            await call(client, "delete_note", note_id=9)
            say("", "the resolver that asks checked first: no question about a missing note")

            heading("teardown: CALL after each call (above), then SESSION, then APP")
            say("client", "disconnects")
        say("server", "shuts down")
    out("done")


if __name__ == "__main__":
    anyio.run(main)
