"""The web pages of the docs, run the way they tell a reader to: saved as a module and served
by ``uvicorn`` in a subprocess on 127.0.0.1, then called with httpx, a WebSocket client and
the MCP SDK's client over the network. (test_docs.py runs the same blocks in process, where
their own `TestClient` checks run the apps' lifespans.)
"""

import contextlib
import importlib.metadata
import io
import re
from pathlib import Path

import httpx
import pytest

from uvicorn_helpers import ROOT, serve

pytestmark = pytest.mark.network

BLOCK = re.compile(r"(<!-- skip: next[^>]*-->\n)?^```python\n(.*?)^```", re.M | re.S)


def blocks(page: str) -> list[tuple[bool, str]]:
    """(skipped, code) for each Python block of docs/*page*, in order."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return [(match[1] is not None, match[2]) for match in BLOCK.finditer(text)]


def save(page: str, directory: Path, module: str, *, first_only: bool = False) -> None:
    """Save the page's blocks (those it does not skip) as *module*, as a reader would."""
    code = [c for skipped, c in blocks(page) if not skipped]
    text = code[0] if first_only else "\n\n".join(code)
    (directory / f"{module}.py").write_text(text, encoding="utf-8")


def _fastapi_version() -> tuple[int, ...]:
    return tuple(int(part) for part in importlib.metadata.version("fastapi").split(".")[:2])


def test_the_fastapi_app_of_the_starlette_page_under_uvicorn(tmp_path: Path) -> None:
    save("starlette.md", tmp_path, "notes")
    with (
        serve("notes:app", app_dir=tmp_path) as served,
        httpx.Client(base_url=served.url, timeout=30) as http,
    ):
        one = http.get("/notes/1", params={"verbose": True}, headers={"x-client": "curl"})
        assert one.json() == {"id": 1, "text": "buy milk", "asked_by": "curl"}
        assert http.get("/notes/2").json() == {"id": 2, "text": "call Ada"}
        assert http.get("/summary").json() == "2 notes, first: buy milk"
        assert http.get("/api/notes/2").json() == "note: call Ada"
        missing = http.get("/strict/7")
        assert (missing.status_code, missing.json()) == (404, {"detail": "there is no note 7"})
        schema = http.get("/openapi.json").json()
        parameters = schema["paths"]["/notes/{note_id}"]["get"]["parameters"]
        assert [p["name"] for p in parameters] == ["note_id", "verbose"]
        # The page asks for the schema before it adds /summary: FastAPI before 0.137 keeps
        # serving that first one (the fastapi extra allows 0.118, CI's floors job runs it).
        if "/summary" in schema["paths"] or _fastapi_version() >= (0, 137):
            assert "parameters" not in schema["paths"]["/summary"]["get"]
    assert served.returncode == 0, "\n".join(served.output)
    assert "Application shutdown complete." in "\n".join(served.output)


def test_the_starlette_app_of_the_starlette_page_under_uvicorn(tmp_path: Path) -> None:
    websockets = pytest.importorskip("websockets.sync.client", reason="needs websockets")
    save("starlette.md", tmp_path, "notes")
    with serve("notes:web", app_dir=tmp_path) as served:
        with httpx.Client(base_url=served.url, timeout=30) as http:
            with http.stream("GET", "/export") as response:
                chunks = list(response.iter_text())
            assert "".join(chunks) == "row 0\nrow 1\nrow 2\n"
            assert http.get("/rows", params={"n": 4}).text == "row 4\n"
        ws_url = served.url.replace("http://", "ws://") + "/live"
        with websockets.connect(ws_url, open_timeout=30) as websocket:
            for word in ("hello", "again"):
                websocket.send(word)
                assert websocket.recv(timeout=30) == f"{word}: row 0\n"
    assert served.returncode == 0, "\n".join(served.output)


def test_the_one_app_page_under_uvicorn(tmp_path: Path) -> None:
    """The page's module served as it says, and its client script run against it: a note
    added over MCP is read back over HTTP, from one store opened once."""
    pytest.importorskip("resolvent.mcp", reason="needs the mcp extra")
    save("one-app.md", tmp_path, "notes_app", first_only=True)
    (client_script,) = [code for skipped, code in blocks("one-app.md") if skipped]
    with serve("notes_app:app", app_dir=tmp_path) as served:
        script = client_script.replace("http://127.0.0.1:8000", served.url)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(script, "one-app.md client", "exec"), {"__name__": "__main__"})
        assert printed.getvalue().splitlines() == ["note 1 added", "['buy milk']"]
        with httpx.Client(base_url=served.url, timeout=30) as http:
            assert http.get("/notes").json() == ["buy milk"]
    assert served.returncode == 0, "\n".join(served.output)
    assert served.printed("store ") == ["store opened", "store closed"]
