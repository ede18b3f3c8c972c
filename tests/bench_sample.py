"""A module for the ``resolvent bench`` tests: resolvers that sleep known times."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Annotated

import anyio

from resolvent import Container, Elicit, Resolve, Scope

__all__ = (
    "COUNTS",
    "SLEEPS",
    "THREADS",
    "asks",
    "asks_late",
    "container",
    "every_kind",
    "fails",
    "fast",
    "handler",
    "needs_value",
    "on_trio",
    "settings",
    "slow",
    "trivial",
)

container = Container()

# Seconds each part sleeps: the bench must find each in the right place. Whole
# milliseconds, distinct where they could be confused: a sleep on asyncio ends on the
# next millisecond tick at the earliest.
SLEEPS = {"settings": 0.002, "slow": 0.004, "setup": 0.001, "teardown": 0.003, "body": 0.001}


@container.provider(scope=Scope.APP)
async def settings() -> dict[str, str]:
    await anyio.sleep(SLEEPS["settings"])
    return {"greeting": "hello"}


async def slow(s: Annotated[dict[str, str], Resolve(settings)]) -> str:
    await anyio.sleep(SLEEPS["slow"])
    return s["greeting"]


async def fast(user_id: str) -> str:
    return user_id.upper()


async def connection() -> AsyncIterator[str]:
    await anyio.sleep(SLEEPS["setup"])
    yield "conn"
    await anyio.sleep(SLEEPS["teardown"])


async def handler(
    user_id: str,
    greeting: Annotated[str, Resolve(slow)],
    name: Annotated[str, Resolve(fast)],
    conn: Annotated[str, Resolve(connection)],
) -> str:
    await anyio.sleep(SLEEPS["body"])
    return f"{greeting} {name} via {conn}"


async def one() -> int:
    return 1


async def trivial(r: Annotated[int, Resolve(one)]) -> int:
    """As benchmarks/ S1: one async resolver."""
    return r


class Token:
    """A framework value the bench cannot supply."""


container.add_value_type(Token)


async def from_token(token: Token) -> str:
    return "t"


async def needs_value(t: Annotated[str, Resolve(from_token)]) -> str:
    return t


def stand_in() -> str:
    return "stand-in"


class Answer:
    pass


async def question() -> Elicit[Answer]:
    return Elicit("Sure?", Answer)  # type: ignore[arg-type]


async def asks(a: Annotated[Answer, Resolve(question)]) -> str:
    return "asked"


# Every kind of step, for the probes: each must run, set up and tear down as unprobed.
COUNTS: dict[str, int] = {}


# The threads each count was made in: the event loop's ("loop") or a worker's ("worker").
THREADS: dict[str, set[str]] = {}


def _count(key: str) -> None:
    COUNTS[key] = COUNTS.get(key, 0) + 1
    here = "loop" if threading.current_thread() is threading.main_thread() else "worker"
    THREADS.setdefault(key, set()).add(here)


def threaded(user_id: str) -> str:
    _count("threaded")
    return user_id


def inline_sync() -> int:
    _count("inline_sync")
    return 1


def sync_gen() -> Iterator[int]:
    _count("sync_gen up")
    yield 2
    _count("sync_gen down")


def threaded_gen() -> Iterator[int]:
    _count("threaded_gen up")
    yield 3
    _count("threaded_gen down")


class Held:
    def __init__(self, value: int) -> None:
        self.value = value

    def __enter__(self) -> int:
        _count("cm up")
        return self.value

    def __exit__(self, *exc: object) -> None:
        _count("cm down")

    async def __aenter__(self) -> int:
        _count("acm up")
        return self.value

    async def __aexit__(self, *exc: object) -> None:
        _count("acm down")


def sync_cm() -> AbstractContextManager[int]:
    return Held(4)


def async_cm() -> AbstractAsyncContextManager[int]:
    return Held(5)


async def awaited_cm() -> AbstractAsyncContextManager[int]:
    return Held(6)


container.provide(inline_sync, inline=True)
container.provide(sync_gen, inline=True)
container.provide(sync_cm, inline=True)


def every_kind(
    user_id: str,
    a: Annotated[str, Resolve(threaded)],
    b: Annotated[int, Resolve(inline_sync)],
    c: Annotated[int, Resolve(sync_gen)],
    d: Annotated[int, Resolve(threaded_gen)],
    e: Annotated[int, Resolve(sync_cm)],
    f: Annotated[int, Resolve(async_cm)],
    g: Annotated[int, Resolve(awaited_cm)],
) -> str:
    """A sync body (run in a worker thread) over one step of every kind."""
    _count("body")
    return f"{a}:{b + c + d + e + f + g}"


async def no_database() -> int:
    raise ValueError("no database here")


async def fails(n: Annotated[int, Resolve(no_database)]) -> int:
    return n


async def undeclared():  # type: ignore[no-untyped-def]  # no annotation: it may ask
    return Elicit("Sure?", Answer)  # type: ignore[arg-type]


async def asks_late(a: Annotated[Answer, Resolve(undeclared)]) -> str:
    return "asked"


async def on_trio(n: int, note: str) -> int:
    """Runs only as `--backend trio --arg n=42 --arg note=a=b` asks: on trio, and with the
    literal 42, not the text."""
    import trio

    trio.lowlevel.current_task()  # RuntimeError anywhere but on trio
    if (n, note) != (42, "a=b"):
        raise ValueError(f"called with n={n!r}, note={note!r}")
    return n
