"""`MemoryStore`: state in this process's memory, the default store."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from .._vocabulary.errors import StateConflict
from . import StateKey

__all__ = ("MemoryStore",)


class _Entry:
    __slots__ = ("data", "deadline", "expires", "lease", "lease_until")

    def __init__(self, data: bytes, expires: float, deadline: float) -> None:
        self.data = data
        self.expires = expires
        self.deadline = deadline
        self.lease = ""
        self.lease_until = 0.0


class MemoryStore:
    """State in a dict of this process: fast, gone when the process ends, not shared.

    The default store of `resolvent.State`. Each operation runs on the event loop without
    awaiting, so it is atomic against other tasks. Expired values are swept out once a
    *sweep* interval has passed, on the next operation.

    Args:
        clock: seconds, monotonic (default `time.monotonic`; tests pass their own).
        sweep: seconds between sweeps of expired values.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, sweep: float = 1.0) -> None:
        self._entries: dict[StateKey, _Entry] = {}
        self._receipts: dict[tuple[StateKey, str], tuple[bytes, float]] = {}
        # When each receipt expires, soonest first (a heap): a sweep visits the spent ones
        # only, not every receipt kept, which a busy server keeps for the whole key TTL.
        self._receipts_due: list[tuple[float, tuple[StateKey, str]]] = []
        self._clock = clock
        self._sweep_every = sweep
        self._next_sweep = clock() + sweep

    def __len__(self) -> int:
        """How many values the store holds, expired ones not yet swept included."""
        return len(self._entries)

    def _now(self) -> float:
        now = self._clock()
        if now >= self._next_sweep:
            self._next_sweep = now + self._sweep_every
            expired = [key for key, entry in self._entries.items() if entry.expires <= now]
            for key in expired:
                del self._entries[key]
            due = self._receipts_due
            while due and due[0][0] <= now:
                name = heapq.heappop(due)[1]
                found = self._receipts.get(name)
                if found is not None and found[1] <= now:  # not kept again since, for longer
                    del self._receipts[name]
        return now

    def _live(self, key: StateKey, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires <= now:
            del self._entries[key]
            return None
        return entry

    async def create(self, key: StateKey, data: bytes, idle: float, lifetime: float) -> None:
        """Store a new value (see `StateStore.create`)."""
        now = self._now()
        deadline = now + lifetime
        self._entries[key] = _Entry(data, min(now + idle, deadline), deadline)

    async def load(self, key: StateKey, idle: float, token: str, lease: float) -> bytes | None:
        """The value, optionally leased (see `StateStore.load`)."""
        now = self._now()
        entry = self._live(key, now)
        if entry is None:
            return None
        if entry.lease and entry.lease != token and entry.lease_until > now:
            raise StateConflict(f"{key.kind} {key.handle!r} is leased by another call")
        if lease > 0:
            entry.lease, entry.lease_until = token, now + lease
        # Not idle while leased: an edit outlasting idle_ttl keeps its value.
        entry.expires = min(max(now + idle, entry.lease_until), entry.deadline)
        return entry.data

    async def load_recalling(
        self, key: StateKey, idle: float, token: str, lease: float, name: str
    ) -> tuple[bytes | None, bytes | None]:
        """`load`, and the result a save kept under *name* (see `recall`), at once."""
        data = await self.load(key, idle, token, lease)
        if data is None:
            return None, None
        found = self._receipts.get((key, name))
        return data, (None if found is None or found[1] <= self._clock() else found[0])

    async def renew(self, key: StateKey, token: str, lease: float) -> bool:
        """Extend the lease while *token* holds it (see `StateStore.renew`)."""
        now = self._now()
        entry = self._live(key, now)
        if entry is None or entry.lease != token:
            return False
        entry.lease_until = now + lease
        entry.expires = min(max(entry.expires, entry.lease_until), entry.deadline)
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
        """End the lease, writing or deleting (see `StateStore.save`)."""
        now = self._now()
        entry = self._live(key, now)
        if entry is None or entry.lease != token:
            return False
        if remember is not None:
            name, result, ttl = remember
            self._receipts[key, name] = (result, now + ttl)
            heapq.heappush(self._receipts_due, (now + ttl, (key, name)))
        if delete:
            del self._entries[key]
            return True
        if data is not None:
            entry.data = data
        entry.lease, entry.lease_until = "", 0.0
        entry.expires = min(now + idle, entry.deadline)
        return True

    async def recall(self, key: StateKey, name: str) -> bytes | None:
        """A result a save kept (see `StateStore.recall`)."""
        now = self._now()
        found = self._receipts.get((key, name))
        return None if found is None or found[1] <= now else found[0]

    async def aclose(self) -> None:
        """Drop every value."""
        self._entries.clear()
        self._receipts.clear()
        self._receipts_due.clear()
