"""Type-checker tests for the public API: mypy --strict and pyright check this file.

Nothing here runs; each `assert_type` states what a user's editor should infer.
"""

from collections.abc import AsyncIterator
from typing import Annotated, Any, assert_type

from pydantic import BaseModel

from resolvent import (
    Accepted,
    Container,
    Elicit,
    ElicitationResult,
    Plan,
    Resolve,
    Scope,
    inline,
)


class Settings(BaseModel):
    dsn: str


class Confirm(BaseModel):
    ok: bool


container = Container()


@container.provider(scope=Scope.APP)
async def settings() -> Settings:
    return Settings(dsn="sqlite://")


@container.provider(scope=Scope.APP)
async def pool(s: Annotated[Settings, Resolve(settings)]) -> AsyncIterator[str]:
    yield s.dsn


async def confirm(user_id: str) -> Elicit[Confirm]:
    return Elicit(f"Go ahead, {user_id}?", Confirm)


async def handler(
    user_id: str,
    dsn: Annotated[str, Resolve(pool)],
    answer: Annotated[ElicitationResult[Confirm], Resolve(confirm)],
) -> int:
    # Annotated[T, Resolve(fn)] keeps T for the body.
    assert_type(dsn, str)
    if isinstance(answer, Accepted):
        assert_type(answer.data, Confirm)
    return len(dsn)


def sync_handler(s: Annotated[Settings, Resolve()]) -> str:
    return s.dsn


@inline  # keeps the function's type
def quick_handler(s: Annotated[Settings, Resolve()]) -> int:
    return len(s.dsn)


async def main() -> None:
    # The provider decorator returns the function unchanged.
    assert_type(await settings(), Settings)
    plan = container.compile(handler)
    assert_type(plan, Plan)
    async with container:
        # Eager start takes providers as Resolve does: functions or provided types.
        assert_type(await container.start(pool, Settings), None)
        assert_type(await container.run(handler, user_id="u1"), int)
        assert_type(await container.run(sync_handler), str)
        assert_type(await container.run(quick_handler), int)
        async with container.session() as session:
            assert_type(await session.run(handler, user_id="u1"), int)
            async with session.call() as call:
                kwargs = await call.resolve(plan, {"user_id": "u1"})
                assert_type(kwargs, dict[str, Any])
                assert_type(await call.run(handler, user_id="u1"), int)
    assert_type(Container(warm=[pool, Settings]), Container)
    assert_type(Scope.APP > Scope.CALL, bool)
    assert_type(Elicit("?", Confirm).schema, type[Confirm])


# `container.lifespan` is accepted where each framework takes a lifespan: it yields nothing.
def apps_take_the_lifespan() -> None:
    from fastapi import FastAPI
    from mcp.server.mcpserver import MCPServer
    from starlette.applications import Starlette

    Starlette(lifespan=container.lifespan)
    FastAPI(lifespan=container.lifespan)
    MCPServer("typed", lifespan=container.lifespan)
