"""Shared pieces of the settle tests: a store that refuses or delays writes, a transaction
that records its outcome, and a seat-booking `State` whose rounds ask a question."""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

import anyio
from pydantic import BaseModel

from resolvent import (
    Container,
    Elicit,
    ElicitationResult,
    Held,
    Resolve,
    Scope,
    State,
    StateKey,
    StateStore,
)


class Faulty:
    """A `StateStore` around a real one that refuses or delays what a test says.

    *refuse*: every ``save`` returns False (the lease was lost: `StateConflict`).
    *fail*: an exception every write (``create``, a ``save`` that writes or deletes)
    raises, as an unreachable store's; a ``save`` that only ends a lease gets through.
    *slow*: seconds every ``create`` and ``save`` waits before writing.
    """

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.refuse = False
        self.fail: BaseException | None = None
        self.slow = 0.0
        self.created: list[str] = []  # handles, as their values were written

    async def _write(self, writes: bool = True) -> None:
        if self.slow:
            await anyio.sleep(self.slow)
        if self.fail is not None and writes:
            raise self.fail

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        await self._write()
        await self.inner.create(key, data, idle, lifetime)
        self.created.append(key.handle)

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        return await self.inner.load(key, idle, token, lease)

    async def save(
        self, key: StateKey, idle: float, token: str, data: bytes | None, delete: bool
    ) -> bool:
        await self._write(data is not None or delete)
        if self.refuse:
            await self.inner.save(key, idle, token, None, False)  # end the lease only
            return False
        return await self.inner.save(key, idle, token, data, delete)

    async def aclose(self) -> None:
        """The test closes the store it wrapped."""


class Seats(BaseModel):
    left: int = 10
    reserved: int = 0
    notes: list[str] = []


class Ok(BaseModel):
    ok: bool


class Booking:
    """A container with a seat-booking `State` on *store*, and the tools people write.

    ``reserve`` is a resolver that takes a seat through ``edit`` and then asks to
    confirm, naming the state in its question (as docs/mcp.md advises); ``book`` is the
    handler that keeps the seat only if confirmed.
    """

    def __init__(
        self,
        store: Faulty,
        container: Container | None = None,
        opener: Callable[[], AbstractAsyncContextManager[StateStore]] | None = None,
    ) -> None:
        self.container = container if container is not None else Container()
        self.store = store
        self.minted: list[str] = []  # every handle `new` gave a handler or resolver

        @self.container.provider(scope=Scope.APP)
        async def seat_store() -> AsyncIterator[StateStore]:
            if opener is None:
                yield store
                return
            async with opener() as inner:  # opened in the app's own event loop
                store.inner = inner
                yield store

        self.seats = seats = State("seats", Seats, store=seat_store, argument="show", max_size=300)

        async def reserve(edit: Annotated[Held[Seats], Resolve(seats.edit)]) -> Held[Seats]:
            edit.value.left -= 1
            edit.value.reserved += 1
            return edit

        async def confirm(held: Annotated[Held[Seats], Resolve(reserve)]) -> Elicit[Ok]:
            now = held.value
            return Elicit(f"Book 1 of {now.left + 1} seats ({now.reserved} held)?", Ok)

        async def book(
            show: str,
            held: Annotated[Held[Seats], Resolve(reserve)],
            answer: Annotated[Ok, Resolve(confirm)],  # declined: NotAccepted
        ) -> dict[str, int]:
            if not answer.ok:
                raise Declined("not booked")
            return {"left": held.value.left, "reserved": held.value.reserved}

        async def opened(new: Annotated[Held[Seats], Resolve(seats.new)]) -> Held[Seats]:
            self.minted.append(new.handle)
            return new

        async def ask_first(held: Annotated[Held[Seats], Resolve(opened)]) -> Elicit[Ok]:
            return Elicit("Open a new show?", Ok)

        async def open_show(
            held: Annotated[Held[Seats], Resolve(opened)],
            answer: Annotated[ElicitationResult[Ok], Resolve(ask_first)],
        ) -> str:
            return held.handle

        async def open_plain(new: Annotated[Held[Seats], Resolve(seats.new)]) -> str:
            self.minted.append(new.handle)
            return new.handle

        async def note(
            show: str, text: str, edit: Annotated[Held[Seats], Resolve(seats.edit)]
        ) -> int:
            edit.value.notes.append(text)
            return len(edit.value.notes)

        async def look(show: str, value: Annotated[Seats, Resolve(seats.read)]) -> Seats:
            return value

        self.book, self.open_show, self.open_plain = book, open_show, open_plain
        self.note, self.look = note, look


class Declined(Exception):
    """The handler's own error: the user declined the booking."""


async def values(booking: Booking, handle: str) -> Any:
    """The stored value of *handle* (read through the container, as a handler would)."""
    return await booking.container.run(booking.look, show=handle)
