"""The notes server example, run as a real process over stdio and streamable HTTP."""

import os
import subprocess
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from mcp_helpers import Script, free_port, text, wait_listening

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
    assert script.asked == ["Delete note 1?", "Delete note 2?", "Delete note 99?"]
    listed = await c.call_tool("list_notes", {})
    assert listed.structured_content is not None
    assert [n["id"] for n in listed.structured_content["result"]] == [1]


def answers() -> Script:
    script = Script(
        **{
            "Delete note 1?": ("decline", None),
            "Delete note 2?": ("accept", {"confirm": True}),
            "Delete note 99?": ("accept", {"confirm": True}),
        }
    )
    return script


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_notes_server_over_stdio(mode: str) -> None:
    script = answers()
    with anyio.fail_after(60):
        async with Client(stdio_server(), mode=mode, elicitation_callback=script) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert tools["delete_note"].input_schema["properties"].keys() == {"note_id"}
            assert tools["add_note"].input_schema["properties"].keys() == {"text"}
            await exercise(c, script)


@pytest.mark.network
async def test_notes_server_over_http() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.notes_server", "--transport", "http", "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, **ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anyio.fail_after(60):
            await wait_listening(port)
            url = f"http://127.0.0.1:{port}/mcp"
            script = answers()
            async with Client(url, mode="legacy", elicitation_callback=script) as c:
                await exercise(c, script)
            # A 2026-07-28 client gets the confirmation as an InputRequiredResult round.
            async with Client(url, elicitation_callback=Script()) as c:
                first = await c.session.call_tool(
                    "delete_note", {"note_id": 1}, allow_input_required=True
                )
                assert isinstance(first, types.InputRequiredResult)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
