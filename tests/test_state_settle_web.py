"""On the web, a call's writes settle before the response is sent.

A write refused as the call settles answers the request (409 for a `StateConflict`, 413
for a `StateTooLarge` value, 503 for a store that cannot be reached) instead of the
handler's 200, on a FastAPI route, through a
FastAPI dependency, and on a Starlette endpoint; the value stored is unchanged. Under
Starlette's `TestClient` on asyncio and trio, every store and container setting
(pairwise: `stores_and_modes`); then
under uvicorn in a subprocess, where a response leaves before the request's exit stack
closes: `State.new`'s value, written slowly, is there for the request that follows its
response at once.
"""

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

import resolvent
from modes import MODES, make_container
from resolvent import MemoryStore
from settle_apps import build
from settle_helpers import Faulty
from state_helpers import stores_and_modes
from uvicorn_helpers import serve

pytest.importorskip("fastapi")

BACKENDS = ["asyncio", "trio"]
WEB_MODES = [m for m in MODES if m != "interpreter"]  # no rounds on the web


def store_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "memory":
        return "memory:"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'seats.db'}"
    url: str = request.getfixturevalue("valkey_url")
    return url


@pytest.fixture
def web(
    request: pytest.FixtureRequest, tmp_path: Path, store_kind: str, mode: str, backend: str
) -> Iterator[tuple[TestClient, Faulty]]:
    faulty = Faulty(MemoryStore())  # its real store opens with the app
    api, _ = build(faulty, make_container(mode), store_url(store_kind, tmp_path, request))
    with TestClient(api, backend=backend) as client:
        yield client, faulty


def noted(client: TestClient, path: str, text: str) -> httpx.Response:
    return client.post(path, params={"text": text})


@stores_and_modes(WEB_MODES, backend="backend")
def test_a_refused_write_answers_the_request(web: tuple[TestClient, Faulty]) -> None:
    client, store = web
    show = client.post("/shows").json()
    for way in ("notes", "notes-by-dependency"):
        path = f"/shows/{show}/{way}"
        assert noted(client, path, way).status_code == 200
        too_large = noted(client, path, "x" * 400)
        assert too_large.status_code == 413, too_large.text
        assert "over the limit of 300" in too_large.json()["detail"]
        store.refuse = True
        conflict = noted(client, path, "lost")
        store.refuse = False
        assert conflict.status_code == 409, conflict.text
        assert "nothing of this call was written" in conflict.json()["detail"]
        store.fail = ConnectionError("the store is down")
        down = noted(client, path, "lost")
        store.fail = None
        assert (down.status_code, down.json()) == (503, {"detail": "the store is down"})
    assert client.get(f"/shows/{show}").json()["notes"] == ["notes", "notes-by-dependency"]
    starlette = client.post("/starlette/shows", params={"note": "x" * 400})
    assert starlette.status_code == 413
    assert "over the limit of 300" in starlette.text
    store.fail = ConnectionError("the store is down")
    down = client.post("/starlette/shows")
    store.fail = None
    assert (down.status_code, down.text) == (503, "the store is down")
    assert client.post("/starlette/shows", params={"note": "ok"}).status_code == 200


@pytest.fixture(scope="module")
def seats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('settle') / 'seats.db'}"
    os.environ["SETTLE_STORE"] = url
    try:
        with serve("settle_apps:served", factory=True) as served:
            yield served.url
    finally:
        del os.environ["SETTLE_STORE"]


def fault(base: str, *, refuse: bool = False, slow: float = 0.0) -> None:
    answer = httpx.post(f"{base}/fault", params={"refuse": int(refuse), "slow": slow})
    assert answer.json() == "ok"


def test_under_uvicorn_writes_settle_before_the_response(seats_server: str) -> None:
    base = seats_server
    with httpx.Client(base_url=base, timeout=30) as client:
        fault(base, slow=0.15)  # every write waits: a response sent first would be seen
        for path in ("/shows", "/starlette/shows"):
            show = client.post(path).json()
            found = client.get(f"/shows/{show}")  # at once, on another connection too
            assert found.status_code == 200, found.text
            assert httpx.get(f"{base}/shows/{show}").json()["left"] == 10
        for count, way in enumerate(("notes", "notes-by-dependency"), 1):
            note = client.post(f"/shows/{show}/{way}", params={"text": way})
            assert note.json() == count
            assert client.get(f"/shows/{show}").json()["notes"][-1] == way
        fault(base, refuse=True)
        conflict = client.post(f"/shows/{show}/notes", params={"text": "lost"})
        assert conflict.status_code == 409
        assert "nothing of this call was written" in json.loads(conflict.text)["detail"]
        fault(base)
        too_large = client.post("/starlette/shows", params={"note": "x" * 400})
        assert too_large.status_code == 413
        assert client.get(f"/shows/{show}").json()["notes"] == ["notes", "notes-by-dependency"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", WEB_MODES)
def test_any_settling_resource_settles_before_the_response(mode: str, backend: str) -> None:
    # An outbox, not State: what it sends is sent before the response, and a send that
    # fails is the request's error, not a 200 whose messages were lost.
    api, _ = build(Faulty(MemoryStore()), make_container(mode), "memory:")
    with TestClient(api, backend=backend, raise_server_exceptions=False) as client:
        assert client.post("/outbox", params={"text": "a"}).json() == []
        assert client.get("/outbox").json() == ["a"]
        assert client.post("/outbox", params={"text": "fail"}).status_code == 500
        down = client.post("/outbox", params={"text": "down"})
        assert down.status_code == 503
        assert down.json() == {"detail": "the mail server refused the connection"}
        assert client.get("/outbox").json() == ["a"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["generated", "concurrent"])  # kept resources, a call scope
def test_an_unavailable_store_answers_503_without_its_address(mode: str, backend: str) -> None:
    unavailable = getattr(resolvent, "StoreUnavailable", None)
    if unavailable is None:
        pytest.skip("this resolvent has no StoreUnavailable error yet")
    store = Faulty(MemoryStore())
    api, _ = build(store, make_container(mode), "memory:")
    with TestClient(api, backend=backend) as client:
        show = client.post("/shows").json()
        store.fail = unavailable("redis://:secret@10.0.0.9:6379/0", "connection refused")
        for answer in (
            client.post(f"/shows/{show}/notes", params={"text": "lost"}),
            client.post("/starlette/shows"),
        ):
            assert answer.status_code == 503, answer.text
            assert "unavailable" in answer.text
            assert "10.0.0.9" not in answer.text and "secret" not in answer.text
        store.fail = None
        assert client.get(f"/shows/{show}").json()["notes"] == []
