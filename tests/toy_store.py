"""A store of the tests' own, added under the ``toy:`` scheme the way a user adds one.

Two dicts and a clock, written from `StateStore`'s docstrings alone; the conformance suite
opens it by URL (``toy:NAME``, through `open_store`) and runs every test on it.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable

from resolvent import StateConflict, StateKey, add_store_scheme

CLOCKS: dict[str, Callable[[], float]] = {}  # a test's clock, by the name in its toy: URL
OPENED: list[str] = []  # every URL a ToyStore was opened for


def toy_url(clock: Callable[[], float] | None = None) -> str:
    """A fresh ``toy:`` URL; the store it opens runs on *clock* (default: monotonic)."""
    name = secrets.token_hex(4)
    if clock is not None:
        CLOCKS[name] = clock
    return f"toy:{name}"


class Value:
    __slots__ = ("data", "deadline", "expires", "held_until", "holder")

    def __init__(self, data: bytes, expires: float, deadline: float) -> None:
        self.data, self.expires, self.deadline = data, expires, deadline
        self.holder, self.held_until = "", 0.0


class ToyStore:
    """Values in a dict; every operation first drops what has expired."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.values: dict[StateKey, Value] = {}
        self.results: dict[tuple[StateKey, str], tuple[bytes, float]] = {}

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, url: str) -> AsyncIterator[ToyStore]:
        OPENED.append(url)
        store = cls(CLOCKS.pop(url.partition(":")[2], time.monotonic))
        try:
            yield store
        finally:
            await store.aclose()

    def now(self) -> float:
        now = self.clock()
        self.values = {k: v for k, v in self.values.items() if v.expires > now}
        self.results = {k: r for k, r in self.results.items() if r[1] > now}
        return now

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        now = self.now()
        self.values[key] = Value(data, min(now + idle, now + lifetime), now + lifetime)

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        now = self.now()
        value = self.values.get(key)
        if value is None:
            return None
        if value.holder not in ("", token) and value.held_until > now:
            raise StateConflict(f"{key.handle} is held by another call")
        if lease > 0:
            value.holder, value.held_until = token, now + lease
        value.expires = min(max(now + idle, value.held_until), value.deadline)
        return value.data

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        now = self.now()
        value = self.values.get(key)
        if value is None or value.holder != token:
            return False
        value.held_until = now + lease
        value.expires = min(max(value.expires, value.held_until), value.deadline)
        return True

    async def save(
        self,
        key: StateKey,
        idle: float,
        token: str,
        data: bytes | None,
        delete: bool,
        remember: tuple[str, bytes, float] | None = None,
    ) -> bool:
        now = self.now()
        value = self.values.get(key)
        if value is None or value.holder != token:
            return False
        if remember is not None:
            self.results[key, remember[0]] = (remember[1], now + remember[2])
        if delete:
            del self.values[key]
            return True
        value.data = value.data if data is None else data
        value.holder, value.held_until = "", 0.0
        value.expires = min(now + idle, value.deadline)
        return True

    async def recall(self, key: StateKey, name: str) -> bytes | None:
        self.now()
        found = self.results.get((key, name))
        return None if found is None else found[0]

    async def aclose(self) -> None:
        self.values.clear()
        self.results.clear()


add_store_scheme("toy", ToyStore.connect)
