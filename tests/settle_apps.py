"""The web apps of test_state_settle_web.py: seat-booking routes on FastAPI and Starlette.

`build` makes both apps around one `Booking` whose store a test makes refuse or write
slowly (`Faulty`); the tests run them under Starlette's `TestClient` on asyncio and trio,
and `served` under ``python -m uvicorn --factory`` in a subprocess, where ``POST /fault``
sets the store's faults (the store is the URL in ``SETTLE_STORE``).

Every way a route enters resolvent is here: a FastAPI route alone (its CALL resources
kept open by generated code until after the response), a FastAPI dependency that edits
with a route that is not injected (the request's call scope), and a Starlette endpoint.
"""

import contextlib
import functools
import os
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from resolvent import Container, Held, MemoryStore, Resolve, SqliteStore, StateStore, settles
from resolvent.starlette import inject
from settle_helpers import Booking, Faulty, Seats


def build(store: Faulty, container: Container, url: str) -> tuple[FastAPI, Starlette]:
    """A FastAPI app and a Starlette app over one booking on *store*, around the store at
    *url* (``memory:``, ``sqlite:///PATH`` or a Redis URL), opened as the apps start."""
    booking = Booking(store, container, functools.partial(open_url, url))
    container = booking.container
    seats = booking.seats
    api = FastAPI(lifespan=container.lifespan)

    @api.post("/shows")
    @inject(container)
    async def open_show(new: Annotated[Held[Seats], Resolve(seats.new)], note: str = "") -> str:
        new.value.notes = [note] if note else []
        return new.handle

    @api.post("/shows/{show}/notes")
    @inject(container)
    async def note(show: str, text: str, edit: Annotated[Held[Seats], Resolve(seats.edit)]) -> int:
        edit.value.notes.append(text)
        return len(edit.value.notes)

    @inject(container)
    async def noted(show: str, text: str, edit: Annotated[Held[Seats], Resolve(seats.edit)]) -> int:
        edit.value.notes.append(text)
        return len(edit.value.notes)

    @api.post("/shows/{show}/notes-by-dependency")
    async def note_by_dependency(count: Annotated[int, Depends(noted)]) -> int:
        return count

    outbox: list[str] = []

    @settles
    async def sending() -> AsyncIterator[list[str]]:
        messages: list[str] = []
        yield messages  # an error here: nothing is sent
        if "down" in messages:
            raise ConnectionRefusedError("the mail server refused the connection")
        if "fail" in messages:
            raise RuntimeError("the outbox could not send")
        outbox.extend(messages)

    @api.post("/outbox")
    @inject(container)
    async def send(text: str, messages: Annotated[list[str], Resolve(sending)]) -> list[str]:
        messages.append(text)
        return list(outbox)  # what was sent before this request

    @api.get("/outbox")
    async def sent() -> list[str]:
        return outbox

    @api.get("/shows/{show}")
    @inject(container)
    async def look(show: str, value: Annotated[Seats, Resolve(seats.read)]) -> dict[str, Any]:
        return value.model_dump()

    @inject(container)
    async def s_open(
        request: Request, new: Annotated[Held[Seats], Resolve(seats.new)]
    ) -> JSONResponse:
        new.value.notes = request.query_params.getlist("note")
        return JSONResponse(new.handle)

    # A Starlette endpoint receives no call argument to carry a handle: it creates.
    site = Starlette(routes=[Route("/shows", s_open, methods=["POST"])])
    api.mount("/starlette", site)
    return api, site


@contextlib.asynccontextmanager
async def open_url(url: str) -> AsyncIterator[StateStore]:
    if url == "memory:":
        memory = MemoryStore()
        yield memory
        await memory.aclose()
    elif url.startswith("sqlite:///"):
        sqlite = await SqliteStore.open(url.removeprefix("sqlite:///"))
        yield sqlite
        await sqlite.aclose()
    else:
        from resolvent.redis import RedisStore

        async with RedisStore.connect(url, prefix=f"settle-{os.getpid()}") as redis:
            yield redis


def served() -> FastAPI:
    """The apps for uvicorn: the store named by ``SETTLE_STORE``, faults set by
    ``POST /fault?refuse=0|1&slow=SECONDS``."""
    faulty = Faulty(MemoryStore())  # its real store opens with the app
    container = Container()
    api, _ = build(faulty, container, os.environ["SETTLE_STORE"])

    @api.post("/fault")
    async def fault(refuse: int, slow: float) -> str:
        faulty.refuse, faulty.slow = bool(refuse), slow
        return "ok"

    return api
