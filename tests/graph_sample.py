"""A small module for the ``resolvent graph`` tests (imported by name from tests/)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from resolvent import Container, Resolve, Scope

container = Container()


class Settings:
    dsn = "memory://"


@container.provider(scope=Scope.APP)
async def settings() -> Settings:
    return Settings()


@container.provider(scope=Scope.APP)
async def pool(s: Annotated[Settings, Resolve(settings)]) -> AsyncIterator[str]:
    yield s.dsn


async def current_user(user_id: str, p: Annotated[str, Resolve(pool)]) -> str:
    return f"{user_id}@{p}"


async def handler(user_id: str, user: Annotated[str, Resolve(current_user)]) -> str:
    return user


@container.provider(scope=Scope.APP)
async def captive(user: Annotated[str, Resolve(current_user)]) -> int:
    return len(user)


async def broken(n: Annotated[int, Resolve(captive)]) -> int:
    return n
