"""The notes example as one web app: the MCP server and HTTP routes on one container."""

import logging
import re
import sqlite3
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from examples.notes_server.providers import Storage, database
from examples.notes_server.web import create_web_app
from fastapi import FastAPI
from mcp.client import Client

from mcp_helpers import run_uvicorn, text
from resolvent.testing import Override
from uvicorn_helpers import ROOT, run_server


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # uvicorn's server loop runs on asyncio only.
    return "asyncio"


def database_events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("database")]


@pytest.mark.network
async def test_mcp_and_http_share_one_database_under_uvicorn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="notes")
    app, _ = create_web_app()
    with anyio.fail_after(30):
        async with run_uvicorn(app) as url:
            base = url.removesuffix("/mcp")
            async with httpx.AsyncClient(base_url=base) as http, Client(url) as mcp:
                assert (await http.get("/health")).json() == {"status": "ok", "notes": 0}
                added = await mcp.call_tool("add_note", {"text": "buy milk"})
                assert "buy milk" in text(added)
                notes = (await http.get("/notes")).json()
                assert [n["text"] for n in notes] == ["buy milk"]
                one = await http.get(f"/notes/{notes[0]['id']}")
                assert one.json() == notes[0]
                listed = await mcp.call_tool("list_notes", {})
                assert "buy milk" in text(listed)
            assert database_events(caplog) == ["database opened (sqlite, in memory)"]
    # One APP scope for the whole app: opened once, closed once, at shutdown.
    assert database_events(caplog) == [
        "database opened (sqlite, in memory)",
        "database closed",
    ]


@pytest.mark.network
async def test_the_web_example_as_its_readme_runs_it(tmp_path: Path) -> None:
    """``python -m examples.notes_server.web --db PATH`` in a subprocess, as a person runs
    it: it says where it listens; a note added over MCP is read over HTTP, and is in the
    database file after Ctrl-C."""
    db = tmp_path / "notes.db"
    command = [sys.executable, "-m", "examples.notes_server.web", "--port", "0", "--db", str(db)]
    started = re.compile(r"MCP over streamable HTTP at (http://127\.0\.0\.1:\d+)/mcp")
    with run_server(command, cwd=ROOT, started=started) as server:
        with anyio.fail_after(60):
            async with (
                httpx.AsyncClient(base_url=server.url) as http,
                Client(f"{server.url}/mcp") as mcp,
            ):
                assert (await http.get("/health")).json() == {"status": "ok", "notes": 0}
                assert "buy milk" in text(await mcp.call_tool("add_note", {"text": "buy milk"}))
                notes = (await http.get("/notes")).json()
                assert [n["text"] for n in notes] == ["buy milk"]
    assert server.returncode == 130, "\n".join(server.output)  # it exits as Ctrl-C asks
    with sqlite3.connect(db) as saved:
        assert saved.execute("select text from notes").fetchall() == [("buy milk",)]


def served(app: FastAPI) -> httpx.AsyncClient:
    """A client calling *app* in process (errors become 500s, as a server would send)."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://notes")


async def test_http_routes_through_asgi_transport(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="notes")
    app, _ = create_web_app()
    async with app.router.lifespan_context(app), served(app) as http:
        assert (await http.get("/notes")).json() == []
        missing = await http.get("/notes/7")
        assert missing.status_code == 404
        assert missing.json() == {"detail": "there is no note 7"}
        assert (await http.get("/health")).json() == {"status": "ok", "notes": 0}
        schema = (await http.get("/openapi.json")).json()
    # The injected database is no query parameter of the API.
    assert schema["paths"]["/notes/{note_id}"]["get"]["parameters"][0]["name"] == "note_id"
    assert len(schema["paths"]["/notes/{note_id}"]["get"]["parameters"]) == 1
    assert "parameters" not in schema["paths"]["/notes"]["get"]
    assert database_events(caplog) == ["database opened (sqlite, in memory)", "database closed"]


async def test_overrides_reach_the_routes(anyio_backend: str, resolvent_override: Override) -> None:
    app, container = create_web_app()
    seeded = sqlite3.connect(":memory:", check_same_thread=False)
    seeded.execute("create table notes (id integer primary key, text text, author text)")
    seeded.execute("insert into notes values (1, 'from the fixture', 'tester')")

    def fake_database() -> sqlite3.Connection:
        return seeded

    resolvent_override(container, database, fake_database)
    async with app.router.lifespan_context(app), served(app) as http:
        notes = (await http.get("/notes")).json()
        assert notes == [{"id": 1, "text": "from the fixture", "author": "tester"}]
        assert (await http.get("/health")).json() == {"status": "ok", "notes": 1}


async def test_a_failing_provider_is_a_500_without_its_text(
    anyio_backend: str, resolvent_override: Override
) -> None:
    app, container = create_web_app()

    def broken_storage() -> Storage:
        raise RuntimeError("secret: the disk is on fire")

    resolvent_override(container, Storage, broken_storage)
    async with app.router.lifespan_context(app), served(app) as http:
        response = await http.get("/health")
    assert response.status_code == 500
    assert "secret" not in response.text
