"""A FastAPI route served by uvicorn, traced: the call's spans under the request's."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from uvicorn_helpers import serve

SECRET = "s3cret-user"


def _tree(spans: list[dict[str, Any]], parent: Any) -> list[Any]:
    return sorted(
        ((s["name"], _tree(spans, s["id"])) for s in spans if s["parent"] == parent), key=repr
    )


def test_a_fastapi_route_under_uvicorn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace_file = tmp_path / "spans.jsonl"
    monkeypatch.setenv("TRACE_FILE", str(trace_file))
    with serve("trace_web_app:app") as served:
        response = httpx.get(f"{served.url}/balance/{SECRET}", timeout=30)
        assert response.status_code == 200, response.text
        assert response.json() == {"account": f"account of {SECRET}", "session": "session"}
    spans = [json.loads(line) for line in trace_file.read_text().splitlines()]
    call = "call trace_web_app.balance"
    resolved = [
        ("resolve trace_web_app.account", []),
        ("setup trace_web_app.session", []),
        ("teardown trace_web_app.session", []),
    ]
    if any(span["name"].startswith("fastapi.") for span in spans):
        # FastAPI's own spans (newer FastAPI makes them): the request's, and its
        # endpoint's, where the route runs.
        assert _tree(spans, None) == [
            (
                "GET /balance/{user}",
                [
                    ("fastapi.dependencies", []),
                    ("fastapi.endpoint", [(call, resolved)]),
                    ("fastapi.serialization", []),
                ],
            )
        ]
    else:  # a FastAPI without spans of its own: the call's is the root
        assert _tree(spans, None) == [(call, resolved)]
    for span in spans:  # resolvent's (FastAPI's request span has the path, as it should)
        if not span["name"].startswith(("GET ", "fastapi.")):
            assert SECRET not in json.dumps(span), span
