"""A plain ASGI app served by uvicorn in the `resolvent.asgi` tests: it prints its events
(``event: ...``) so the test reads what the server did, in order."""

from collections.abc import AsyncIterator
from typing import Annotated

from resolvent import Container, Resolve, Scope, settles
from resolvent.asgi import inject, router


def say(event: str) -> None:
    print(f"event: {event}", flush=True)


def app() -> object:
    container = Container()
    opened = iter(range(1, 1000))

    @container.provider(scope=Scope.APP)
    async def pool() -> AsyncIterator[str]:
        say("pool open")
        yield "pool"
        say("pool close")

    async def cursor(p: Annotated[str, Resolve(pool)]) -> AsyncIterator[int]:
        n = next(opened)
        say(f"cursor {n} open")
        yield n
        say(f"cursor {n} close")

    @settles
    async def transaction() -> AsyncIterator[list[str]]:
        writes: list[str] = []
        try:
            yield writes
        except Exception:
            say("rollback")
            raise
        say(f"commit {' '.join(writes)}")

    async def note(note: str, times: int, c: Annotated[int, Resolve(cursor)]) -> dict[str, object]:
        return {"note": note * times, "cursor": c}

    async def write(text: str, tx: Annotated[list[str], Resolve(transaction)]) -> dict[str, str]:
        if text == "boom":
            raise RuntimeError("the handler failed")
        tx.append(text)
        say(f"handler {text}")
        return {"wrote": text}

    endpoint = inject(container)
    return router(container, {"/notes/{note}": endpoint(note), "/write": endpoint(write)})
