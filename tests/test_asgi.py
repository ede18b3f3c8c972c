"""`resolvent.asgi`: handlers as plain ASGI endpoints, under a real uvicorn and called
in process on asyncio and trio (uvicorn serves on asyncio only)."""

from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import pytest

from package_imports import PACKAGE, imports_of, modules, trees
from resolvent import Container, Resolve, settles
from resolvent.asgi import inject, router
from test_integration_boundary import INTERFACE, is_core
from uvicorn_helpers import serve


def test_the_module_reaches_the_core_only_through_the_launcher_interface() -> None:
    """Like every integration: the public package and `_integration`, nothing else."""
    name = f"{PACKAGE}.asgi"
    tree, is_package = trees()[name]
    reached = imports_of(name, tree, is_package, set(modules()))
    assert INTERFACE in reached
    assert not {target for target in reached if is_core(target)}


@pytest.mark.network
def test_an_asgi_app_under_uvicorn() -> None:
    with (
        serve("asgi_apps:app", factory=True) as served,
        httpx.Client(base_url=served.url, timeout=30) as http,
    ):
        first = http.get("/notes/ab", params={"times": "2"})
        second = http.get("/notes/c?times=3")
        missing = http.get("/notes/c")
        invalid = http.get("/notes/c?times=many")
        wrote = http.post("/write?text=hello")
        failed = http.post("/write?text=boom")
        nowhere = http.get("/nowhere")
    assert first.json() == {"note": "abab", "cursor": 1}
    assert second.json() == {"note": "ccc", "cursor": 2}
    assert (missing.status_code, invalid.status_code) == (400, 400)
    assert "'times' is missing" in missing.json()["detail"]
    assert "'times' is not a valid int" in invalid.json()["detail"]
    assert wrote.json() == {"wrote": "hello"}
    assert failed.status_code == 500
    assert failed.json() == {"detail": "Internal Server Error"}  # the cause stays in the log
    assert any("the handler failed" in line for line in served.output)
    assert nowhere.status_code == 404
    events = [line.removeprefix("event: ") for line in served.printed("event: ")]
    assert events == [
        "pool open",  # the lifespan opened the container
        "cursor 1 open",
        "cursor 1 close",  # each request's CALL resource closes
        "cursor 2 open",
        "cursor 2 close",
        "handler hello",
        "commit hello",
        "rollback",
        "pool close",  # and the lifespan closed it
    ]


def _container(events: list[str]) -> tuple[Container, Any, Any]:
    container = Container()

    async def cursor() -> AsyncIterator[str]:
        events.append("cursor open")
        yield "real"
        events.append("cursor close")

    @settles
    async def transaction() -> AsyncIterator[None]:
        yield None
        events.append("commit")

    async def read(
        c: Annotated[str, Resolve(cursor)], tx: Annotated[None, Resolve(transaction)]
    ) -> str:
        events.append("handler")
        return c

    return container, cursor, read


async def _get(app: Any, path: str, events: list[str]) -> tuple[int, Any]:
    """One request through *app*, as a server calls it; what it sent joins *events*."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            events.append(f"answer {message['status']}")
        sent.append(message)

    path, _, query = path.partition("?")
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query.encode()}
    await app(scope, receive, send)
    import json

    return sent[0]["status"], json.loads(sent[1]["body"])


async def test_writes_settle_before_the_answer_and_resources_close_after_it() -> None:
    events: list[str] = []
    container, _, read = _container(events)
    app = router(container, {"/read": inject(container)(read)})
    async with container:
        for _ in range(4):  # cold, then hot: the same order either way
            assert await _get(app, "/read", events) == (200, "real")
    assert events == ["cursor open", "handler", "commit", "answer 200", "cursor close"] * 4


async def test_a_test_override_reaches_a_hot_handler() -> None:
    events: list[str] = []
    container, cursor, read = _container(events)
    app = router(container, {"/read": inject(container)(read)})

    async def fake() -> AsyncIterator[str]:
        events.append("fake open")
        yield "fake"
        events.append("fake close")

    async with container:
        for _ in range(4):
            assert await _get(app, "/read", events) == (200, "real")
        events.clear()
        async with container.override(cursor, fake):
            assert await _get(app, "/read", events) == (200, "fake")
        assert await _get(app, "/read", events) == (200, "real")
    assert events == [
        *("fake open", "handler", "commit", "answer 200", "fake close"),
        *("cursor open", "handler", "commit", "answer 200", "cursor close"),
    ]
