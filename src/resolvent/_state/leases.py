"""Leases that belong to a live holder: the edits of this process renew theirs.

An edit's lease in the store is short (`State(lease=...)`, a few seconds). While the edit
runs, a `Leases` keeper of its store renews it every quarter of that time with a
compare-and-set on the edit's token, so a lease whose holder died (a killed process, a
cancelled call whose release never arrived, a lease request the store ran after its call
had gone) lapses by itself within one lease time, and a live edit keeps its handle for as
long as it runs. An edit whose renewal was refused, or which could not renew within its
lease time, learns it before it commits and commits nothing.

The keeper is an APP resource of the container (one per `State`), holding one task that
sleeps while no edit is under way. An edit shorter than a quarter of its lease costs it a
dictionary entry and no store operation.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from .._integration import StateKey, StateStore

__all__ = ("Lease", "Leases", "keep_leases")

RENEWALS = 4  # renewals per lease time: a holder late by three of them keeps its lease


class Lease:
    """One edit's lease on one key, as its holder knows it.

    Attributes:
        valid_until: the holder's clock (`time.monotonic`: real time, as the store's
            lease runs, read at a tenth of the cost of `anyio.current_time`) when the
            lease it last confirmed runs out: the time its last successful renewal was
            sent (or the load that took it answered), plus the lease time.
        lost: a renewal was refused: another call holds the key, or the value is gone.
    """

    __slots__ = ("due", "key", "lost", "seconds", "token", "valid_until")

    def __init__(self, key: StateKey, token: str, seconds: float, since: float) -> None:
        self.key = key
        self.token = token
        self.seconds = seconds
        self.valid_until = since + seconds
        self.due = since + seconds / RENEWALS
        self.lost = False

    def held(self) -> bool:
        """Whether the holder may still commit: no refusal, and renewed in time."""
        return not self.lost and time.monotonic() < self.valid_until


class Leases:
    """Renews the leases the edits of this process hold on one store (see the module)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._held: dict[int, Lease] = {}
        self._tick = 1.0
        self._wake = anyio.Event()
        self.group: anyio.abc.TaskGroup | None = None
        """The keeper's task group, while it runs."""

    def hold(self, key: StateKey, token: str, seconds: float, since: float) -> Lease:
        """Start renewing a lease granted by *since* (`time.monotonic`) for *seconds*."""
        lease = Lease(key, token, seconds, since)
        self._held[id(lease)] = lease
        if seconds / (2 * RENEWALS) < self._tick:
            self._tick = seconds / (2 * RENEWALS)
        self._wake.set()
        return lease

    def later(self, work: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Run *work* (a release) in the keeper's task, so the call that asks goes on."""
        if self.group is not None:
            self.group.start_soon(work)

    def drop(self, lease: Lease) -> None:
        """Stop renewing *lease*: its edit committed, or released it."""
        self._held.pop(id(lease), None)

    async def run(self, group: anyio.abc.TaskGroup) -> None:
        """Renew due leases until cancelled; each renewal runs in *group*."""
        while True:
            if not self._held:
                self._wake = anyio.Event()
                await self._wake.wait()
            await anyio.sleep(self._tick)
            now = time.monotonic()
            for lease in list(self._held.values()):
                if lease.due <= now:
                    lease.due = now + lease.seconds / RENEWALS
                    group.start_soon(self._renew, lease)

    async def _renew(self, lease: Lease) -> None:
        sent = time.monotonic()
        renewed = False
        try:
            # Past the lease time a late answer changes nothing: the lease is gone.
            with anyio.move_on_after(lease.seconds):
                renewed = await self.store.renew(lease.key, lease.token, lease.seconds)
                if not renewed:
                    lease.lost = True
        except Exception as exc:  # the store is away: the lease lapses, the edit learns it
            import logging  # the edit's own error is what its caller reads; this is detail

            logging.getLogger("resolvent").debug(
                "resolvent: could not renew the lease of %s %r: %r",
                lease.key.kind,
                lease.key.handle,
                exc,
            )
        if renewed:
            lease.valid_until = max(lease.valid_until, sent + lease.seconds)


@contextlib.asynccontextmanager
async def keep_leases(store: StateStore) -> AsyncGenerator[Leases]:
    """A `Leases` keeper for *store*, with its task, until the block ends."""
    leases = Leases(store)
    async with anyio.create_task_group() as group:
        leases.group = group
        group.start_soon(leases.run, group)
        yield leases
        leases.group = None
        group.cancel_scope.cancel()
