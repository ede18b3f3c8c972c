"""How a plan calls resolvers and the handler: by position where the function's code
takes a value so (a faster call), by name otherwise; the values always reach the
parameters they were resolved for, whatever signature a function shows.

No ``from __future__ import annotations`` here: resolvers are local functions, and
string annotations could not see them.
"""

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import pytest

from modes import MODES, make_container
from resolvent import Resolve, ResolventError


async def one() -> int:
    return 1


async def two() -> int:
    return 2


def keywords_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator whose wrapper takes keywords only: it shows *fn*'s signature
    (``functools.wraps``), but a value passed by position would fail."""

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        return fn(**kwargs)

    return wrapper


async def reordered(
    a: Annotated[int, Resolve(one)], b: Annotated[int, Resolve(two)]
) -> tuple[int, int]:
    return a, b


# Its signature lists `b` first; its code still takes `a` first.
reordered.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(
            "b", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[int, Resolve(two)]
        ),
        inspect.Parameter(
            "a", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[int, Resolve(one)]
        ),
    ]
)


class Service:
    def __init__(self, base: int) -> None:
        self.base = base

    async def make(self, a: Annotated[int, Resolve(one)], b: Annotated[int, Resolve(two)]) -> int:
        return self.base + 10 * a + b


async def gap(
    a: Annotated[int, Resolve(one)], n: int = 5, *, b: Annotated[int, Resolve(two)]
) -> int:
    return 100 * a + 10 * n + b  # `n` is not resolved: it keeps its default


@keywords_only
async def wrapped(a: Annotated[int, Resolve(one)], b: Annotated[int, Resolve(two)]) -> int:
    return 10 * a + b


def inline_sync(a: Annotated[int, Resolve(one)], user_id: str, tag: str = "t") -> str:
    return f"{a}:{user_id}:{tag}"  # registered inline: runs on the event loop


def threaded(b: Annotated[int, Resolve(two)], s: Annotated[str, Resolve(inline_sync)]) -> str:
    return f"{s}/{b}"  # in a worker thread


async def opened(a: Annotated[int, Resolve(one)]) -> AsyncIterator[int]:
    yield a + 1000


async def plain() -> int:
    return 1000


def graph(resource: bool) -> Callable[..., Any]:
    """A handler over resolvers of every calling shape; with *resource*, a CALL
    async-generator resource among them (its plan sets resources up itself)."""

    async def handler(
        user_id: str,
        g: Annotated[int, Resolve(gap)],
        w: Annotated[int, Resolve(wrapped)],
        r: Annotated[tuple[int, int], Resolve(reordered)],
        m: Annotated[int, Resolve(Service(7).make)],
        t: Annotated[str, Resolve(threaded)],
        o: Annotated[int, Resolve(opened if resource else plain)],
        page: int = 1,
        *,
        flag: bool = False,
        **extra: Any,
    ) -> dict[str, Any]:
        return {
            "user_id": user_id, "g": g, "w": w, "r": r, "m": m, "t": t, "o": o,
            "page": page, "flag": flag, "extra": extra,
        }  # fmt: skip

    return handler


def expected(user_id: str, resource: bool, **given: Any) -> dict[str, Any]:
    extra = {k: v for k, v in given.items() if k not in ("page", "flag")}
    return {
        "user_id": user_id, "g": 152, "w": 12, "r": (1, 2), "m": 19, "t": f"1:{user_id}:t/2",
        "o": 1001 if resource else 1000, "page": given.get("page", 1),
        "flag": given.get("flag", False), "extra": extra,
    }  # fmt: skip


@pytest.mark.parametrize("resource", [False, True], ids=["plain", "resource"])
@pytest.mark.parametrize("mode", [*MODES, "call"])
async def test_every_value_reaches_its_parameter(mode: str, resource: bool) -> None:
    """The handler's own arguments, exactly as declared or in another order, with
    defaults left out or extras, and every resolver shape: a keyword-only parameter,
    a default left unresolved between two resolved ones, a ``functools.wraps`` wrapper
    that takes keywords only, a signature listed in another order than the code, a
    bound method, inline and worker-thread sync resolvers."""
    container = make_container("generated" if mode == "call" else mode)
    container.provide(inline_sync, inline=True)
    handler = graph(resource)

    async def run(**kwargs: Any) -> Any:
        if mode == "interpreter":
            async with container.call(rounds=True) as call:
                return await call.run(handler, **kwargs)
        if mode == "call":
            async with container.call() as call:
                return await call.run(handler, **kwargs)
        return await container.run(handler, **kwargs)

    async with container:
        for _ in range(4):  # the first calls of a plan, and its hot code after them
            assert await run(user_id="u1") == expected("u1", resource)
            assert await run(page=3, user_id="u2") == expected("u2", resource, page=3)
            assert await run(user_id="u3", flag=True, page=2) == expected(
                "u3", resource, flag=True, page=2
            )
            assert await run(user_id="u4", tag="x") == expected("u4", resource, tag="x")
            with pytest.raises(ResolventError, match="call argument 'user_id'"):
                await run(page=2)


@pytest.mark.parametrize("mode", MODES)
async def test_resolve_returns_values_by_parameter(mode: str) -> None:
    """``call.resolve`` names each injected value by its parameter, whichever way the
    resolvers were called."""
    container = make_container(mode)
    container.provide(inline_sync, inline=True)
    handler = graph(False)
    plan = container.compile(handler)
    async with container, container.call() as call:
        for _ in range(3):
            got = await call.resolve(plan, {"user_id": "u1"})
            want = expected("u1", False)
            assert got == {k: want[k] for k in ("g", "w", "r", "m", "t", "o")}
