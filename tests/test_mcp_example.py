"""The notes server example, run as a real process over stdio and streamable HTTP."""

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcp_helpers import ACROSS_PROCESSES, Script, free_port, text, wait_listening
from uvicorn_helpers import run_server

ROOT = Path(__file__).resolve().parent.parent
ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def stdio_server() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "examples.notes_server", "--transport", "stdio"],
        cwd=ROOT,
        env=ENV,
    )


async def exercise(c: Client, script: Script) -> None:
    first = await c.call_tool("add_note", {"text": "buy milk"})
    assert not first.is_error, text(first)
    assert first.structured_content is not None
    author = first.structured_content["author"]
    assert author.startswith("writer-")
    await c.call_tool("add_note", {"text": "call mum"})
    listed = await c.call_tool("list_notes", {})
    assert listed.structured_content is not None
    assert [n["text"] for n in listed.structured_content["result"]] == ["buy milk", "call mum"]
    assert text(await c.call_tool("delete_note", {"note_id": 1})) == "kept note 1"
    assert text(await c.call_tool("delete_note", {"note_id": 2})) == "deleted note 2"
    missing = await c.call_tool("delete_note", {"note_id": 99})
    assert missing.is_error
    assert "there is no note 99" in text(missing)
    # Each question names the note; nothing is asked about a note that does not exist.
    assert script.asked == ["Delete note 1: 'buy milk'?", "Delete note 2: 'call mum'?"]
    listed = await c.call_tool("list_notes", {})
    assert listed.structured_content is not None
    assert [n["id"] for n in listed.structured_content["result"]] == [1]


def answers() -> Script:
    script = Script(
        **{
            "Delete note 1: 'buy milk'?": ("decline", None),
            "Delete note 2: 'call mum'?": ("accept", {"confirm": True}),
        }
    )
    return script


@ACROSS_PROCESSES
async def test_notes_server_over_stdio(mode: str) -> None:
    script = answers()
    with anyio.fail_after(60):
        async with Client(stdio_server(), mode=mode, elicitation_callback=script) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert tools["delete_note"].input_schema["properties"].keys() == {"note_id"}
            assert tools["add_note"].input_schema["properties"].keys() == {"text"}
            await exercise(c, script)


NOTES_HTTP = [sys.executable, "-m", "examples.notes_server", "--transport", "http"]
SAID_WHERE = re.compile(r"--cli (http://127\.0\.0\.1:\d+/mcp) --transport http")


@contextmanager
def http_server(
    command: list[str], env: dict[str, str], printed: list[str] | None = None
) -> Iterator[str]:
    """Run an example server over HTTP on a free port (``--port 0``: it binds one, then says
    where it is) until the block ends; yield the URL it printed. Everything it printed
    (stdout and stderr) is added to *printed* when it has stopped.

    Its output is read by a thread, so a server that never prints its address fails the
    test within the start-up bound with all it printed (stderr too), instead of hanging.
    """
    command = [*command, "--port", "0"]
    with run_server(command, cwd=ROOT, started=SAID_WHERE, env=env) as served:
        yield started_at(served.output)
    if printed is not None:
        printed += served.output


def started_at(output: list[str]) -> str:
    """The URL a server process printed; it also prints the MCP Inspector command for it."""
    [at] = [i for i, line in enumerate(output) if " MCP over streamable HTTP at " in line]
    first, inspector = output[at], output[at + 1]
    assert " MCP over streamable HTTP at http://127.0.0.1:" in first, first
    url = first.rsplit(" ", 1)[1].strip()
    assert url.endswith("/mcp")
    assert inspector.split() == [
        "list", "its", "tools:", "npx", "@modelcontextprotocol/inspector",
        "--cli", url, "--transport", "http", "--method", "tools/list",
    ]  # fmt: skip
    return url


@pytest.mark.network
@pytest.mark.parametrize("anyio_backend", ["trio"])  # the server's own loop is in its process
async def test_notes_server_over_http() -> None:
    printed: list[str] = []
    with http_server(NOTES_HTTP, ENV, printed) as url, anyio.fail_after(60):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        await wait_listening(port)
        script = answers()
        async with Client(url, mode="legacy", elicitation_callback=script) as c:
            await exercise(c, script)
        # A 2026-07-28 client gets the confirmation as an InputRequiredResult round.
        async with Client(url, elicitation_callback=Script()) as c:
            first = await c.session.call_tool(
                "delete_note", {"note_id": 1}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
    # Quiet by default: where it listens, and not a line per session or request.
    assert printed[0].startswith("notes server: MCP over streamable HTTP at "), printed
    assert len(printed) == 4, printed


# --- safe to deploy: replayed rounds, restarts, several workers ------------------------

KEY = secrets.token_hex(32)  # the request-state key the workers share
CONFIRM = {"confirm": types.ElicitResult(action="accept", content={"confirm": True})}


async def test_a_replayed_round_never_deletes_another_note() -> None:
    from examples.notes_server.server import create_server

    server, _ = create_server()
    async with Client(server, mode="2026-07-28", elicitation_callback=Script()) as c:
        await c.call_tool("add_note", {"text": "buy milk"})
        first = await c.session.call_tool("delete_note", {"note_id": 1}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        [(key, request)] = (first.input_requests or {}).items()
        assert isinstance(request, types.ElicitRequest)
        assert request.params.message == "Delete note 1: 'buy milk'?"
        answered = {
            "input_responses": {key: CONFIRM["confirm"]},
            "request_state": first.request_state,
            "allow_input_required": True,
        }
        done = await c.session.call_tool("delete_note", {"note_id": 1}, **answered)
        assert text(done) == "deleted note 1"
        # A new note after the delete: its id is new, never the deleted one's.
        added = await c.call_tool("add_note", {"text": "empty the bank account"})
        assert added.structured_content is not None and added.structured_content["id"] == 2
        # The same final round, sent again (a retry, a proxy, an attacker) within its TTL.
        replay = await c.session.call_tool("delete_note", {"note_id": 1}, **answered)
        assert isinstance(replay, types.CallToolResult) and replay.is_error
        assert "there is no note 1" in text(replay)
        # The old answer aimed at the new note: it answered another question, so it does not
        # count (the state is refused outright, or the question is asked afresh).
        try:
            aimed = await c.session.call_tool("delete_note", {"note_id": 2}, **answered)
        except MCPError:
            aimed = None
        assert aimed is None or isinstance(aimed, types.InputRequiredResult)
        listed = await c.call_tool("list_notes", {})
        assert listed.structured_content is not None
        assert [n["text"] for n in listed.structured_content["result"]] == [
            "empty the bank account"
        ]


def serve(port: int, db: Path, key: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.notes_server",
            "--transport",
            "http",
            "--port",
            str(port),
            "--db",
            str(db),
        ],
        cwd=ROOT,
        env={**os.environ, **ENV, "NOTES_STATE_KEY": key},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.network
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the servers' loops are theirs
async def test_two_workers_serve_the_rounds_of_one_confirmation(tmp_path: Path) -> None:
    # Two worker processes behind one (imagined) load balancer: one SQLite file, one
    # request-state key. Round 1 lands on the first, round 2 on the second.
    db = tmp_path / "notes.db"
    ports = free_port(), free_port()
    workers = [serve(port, db, KEY) for port in ports]
    try:
        with anyio.fail_after(60):
            for port in ports:
                await wait_listening(port)
            one, two = (f"http://127.0.0.1:{port}/mcp" for port in ports)
            async with Client(one, elicitation_callback=Script()) as a:
                await a.call_tool("add_note", {"text": "buy milk"})
                first = await a.session.call_tool(
                    "delete_note", {"note_id": 1}, allow_input_required=True
                )
            assert isinstance(first, types.InputRequiredResult)
            [key] = (first.input_requests or {}).keys()
            async with Client(two, elicitation_callback=Script()) as b:
                final = await b.session.call_tool(
                    "delete_note",
                    {"note_id": 1},
                    input_responses={key: CONFIRM["confirm"]},
                    request_state=first.request_state,
                    allow_input_required=True,
                )
                assert isinstance(final, types.CallToolResult)
                assert text(final) == "deleted note 1"
                listed = await b.call_tool("list_notes", {})
                assert listed.structured_content == {"result": []}
    finally:
        for proc in workers:
            stop(proc)


@pytest.mark.network
@pytest.mark.slow  # in CI's slow job: the default run stays under 3 minutes
async def test_notes_survive_a_restart_with_db(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    for text_ in ("buy milk", None):
        port = free_port()
        proc = serve(port, db, KEY)
        try:
            with anyio.fail_after(60):
                await wait_listening(port)
                async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as c:
                    if text_ is not None:
                        assert not (await c.call_tool("add_note", {"text": text_})).is_error
                    listed = await c.call_tool("list_notes", {})
        finally:
            stop(proc)  # the first process is gone before the second starts
        assert listed.structured_content is not None
        assert [n["text"] for n in listed.structured_content["result"]] == ["buy milk"]


def test_stdio_server_started_by_hand_says_what_it_waits_for() -> None:
    """In a terminal (stdin is a tty) it says so on stderr; under a client it stays quiet
    (the stdio test above reads its stdout as the protocol)."""
    controller, terminal = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.notes_server", "--transport", "stdio"],
        cwd=ROOT,
        env={**os.environ, **ENV},
        stdin=terminal,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline() for _ in range(3)]
        assert lines[0].startswith("notes server: MCP over stdio, waiting for a client")
        assert lines[1].split() == [
            "list", "its", "tools:", "npx", "@modelcontextprotocol/inspector",
            "--cli", "python", "-m", "examples.notes_server", "--method", "tools/list",
        ]  # fmt: skip
        assert lines[2].split()[-3:] == ["python", "-m", "examples.notes_server"]
    finally:
        proc.kill()
        proc.wait()
        os.close(controller)
        os.close(terminal)
