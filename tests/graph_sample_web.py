"""Web routes wrapped with ``resolvent.starlette.inject`` for the graph and bench tests."""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from resolvent import Container, Resolve, Scope
from resolvent.starlette import inject

__all__ = ("app", "container", "fastapi_notes", "starlette_home")

container = Container()
app = FastAPI(lifespan=container.lifespan)


@container.provider(scope=Scope.APP)
async def users() -> dict[str, str]:
    return {"u1": "Ada"}


async def current_user(user_id: str, db: Annotated[dict[str, str], Resolve(users)]) -> str:
    return db[user_id]


async def client_host(request: Request) -> str:
    return request.client.host if request.client else "?"


@inject(container)
async def starlette_home(
    request: Request, host: Annotated[str, Resolve(client_host)]
) -> PlainTextResponse:
    return PlainTextResponse(host)


@app.get("/notes")
@inject(container)
async def fastapi_notes(user_id: str, user: Annotated[str, Resolve(current_user)]) -> str:
    return user
