"""resolvent without any framework: a tiny shop served to two clients, on asyncio and trio.

Each client gets a SESSION (its shopping cart lives there); each request is a CALL (with
its own request id and a timer resource); the price list and the stock service live in
the APP scope. The same container runs on asyncio and then on trio.

Run it with ``python examples/plain_anyio.py``; the trio half needs trio
(``pip install ".[trio]"``) and says so when it is missing.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Annotated

import anyio

from resolvent import Container, Resolve, Scope, Session

container = Container(concurrent=True)  # independent async branches run at the same time
log: list[str] = []


@container.provider(scope=Scope.APP)
def prices() -> dict[str, int]:
    """A plain sync provider: runs once, in a worker thread."""
    return {"apple": 3, "pear": 4, "fig": 9}


@dataclass
class Stock:
    left: dict[str, int]

    def take(self, item: str) -> None:
        if self.left.get(item, 0) <= 0:
            raise LookupError(f"{item} is sold out")
        self.left[item] -= 1


@container.provider(scope=Scope.APP)
async def stock() -> AsyncIterator[Stock]:
    log.append("app: stock service up")
    yield Stock({"apple": 5, "pear": 1, "fig": 2})
    log.append("app: stock service down")


@dataclass
class Cart:
    number: int
    items: list[str] = field(default_factory=list[str])


_carts = itertools.count(1)


@container.provider(scope=Scope.SESSION)
async def cart() -> AsyncIterator[Cart]:
    """One cart per session, created on the session's first use of it."""
    c = Cart(number=next(_carts))
    log.append(f"session: cart {c.number} opened")
    yield c
    log.append(f"session: cart {c.number} closed with {c.items}")


_ids = itertools.count(1)


@container.provider(scope=Scope.CALL, inline=True)
def request_id() -> Iterator[int]:
    """A sync generator resource; ``inline=True`` keeps it on the event loop."""
    rid = next(_ids)
    try:
        yield rid
    finally:  # runs when the call ends, also when it failed
        log.append(f"call: request {rid} finished")


async def add(
    client: str,
    item: str,
    rid: Annotated[int, Resolve(request_id)],
    basket: Annotated[Cart, Resolve(cart)],
    shop: Annotated[Stock, Resolve(stock)],
) -> str:
    shop.take(item)
    basket.items.append(item)
    return f"#{rid} {client}: added {item}"


async def total(
    client: str,
    rid: Annotated[int, Resolve(request_id)],
    basket: Annotated[Cart, Resolve(cart)],
    price: Annotated[dict[str, int], Resolve(prices)],
) -> str:
    return f"#{rid} {client}: total {sum(price[i] for i in basket.items)}"


async def serve(session: Session, client: str, requests: list[tuple[str, str]]) -> None:
    """What a framework would do per request: one CALL scope inside the client's SESSION."""
    for action, arg in requests:
        try:
            if action == "add":
                log.append(await session.run(add, client=client, item=arg))
            else:
                log.append(await session.run(total, client=client))
        except LookupError as exc:
            log.append(f"error: {exc}")


async def main() -> None:
    global _carts, _ids
    log.clear()
    _carts, _ids = itertools.count(1), itertools.count(1)
    async with container:
        for client, requests in [
            ("ada", [("add", "apple"), ("add", "pear"), ("total", "")]),
            ("bob", [("add", "pear"), ("add", "fig"), ("total", "")]),
        ]:
            async with container.session() as session:
                await serve(session, client, requests)
    print("\n".join(log))
    print(container.compile(total).describe())


if __name__ == "__main__":
    import importlib

    for backend in ("asyncio", "trio"):
        print(f"== {backend}")
        try:
            importlib.import_module(backend)
        except ImportError:
            print(f'{backend} is not installed: pip install ".[{backend}]" runs this part too')
            continue
        anyio.run(main, backend=backend)
