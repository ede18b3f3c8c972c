"""How a call reaches a handle's value in the store: loading it for a read or for an edit
(one load per handle and call, waiting out another call's lease), then, when the call
ends, committing the edit under its lease or releasing the lease without writing.
"""

from __future__ import annotations

import functools
import random
import re
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel

from .._integration import (
    StateConflict,
    StateError,
    StateKey,
    StateNotFound,
    StateStore,
    StoreUnavailable,
    logger,
)
from . import Held, Ledger, Loaded, owner_digest
from .codec import Codec
from .leases import Lease, Leases

__all__ = ("Access",)

M = TypeVar("M", bound=BaseModel)

_HANDLE = re.compile(r"[A-Za-z0-9_-]{32}")


class Access(Codec[M]):
    """Loading, leasing and settling a kind's values; a base of `State`, which sets these."""

    lease: float
    wait: float
    idle_ttl: float
    idempotency_ttl: float

    def _key(self, handle: Any, principal: Any) -> StateKey:
        if type(handle) is not str or not _HANDLE.fullmatch(handle):
            raise self._not_found(handle)
        return StateKey(self.name, owner_digest(str(principal)), handle)

    def _not_found(self, handle: Any) -> StateNotFound:
        shown = repr(handle) if len(repr(handle)) <= 48 else repr(handle)[:45] + "..."
        return StateNotFound(
            f"{self.name} {shown} not found or expired.\n"
            f"  fix: pass a handle this server returned to you for a {self.name}, "
            "and use it before it expires; otherwise create a new one"
        )

    async def _look(self, ledger: Ledger, store: StateStore, key: StateKey) -> M:
        """The value of *key* for a read: the one this call loaded already (an edit's,
        changes included), else loaded now."""
        seen = ledger.entry(store, key)
        if seen is not None:
            await self._wait_loaded(seen, key)
            shared: M = seen.value if seen.held is None else seen.held.value
            return shared
        entry = ledger.open(store, key, self.model)
        try:
            data, _ = await self._load(store, key, ledger.token, 0.0)
            entry.value = self._decode(key, data)
        except BaseException:
            ledger.drop(store, key, entry)
            raise
        entry.data = data
        entry.done()
        return entry.value  # type: ignore[no-any-return]

    async def _take(
        self,
        ledger: Ledger,
        store: StateStore,
        key: StateKey,
        leases: Leases,
        name: str | None = None,
    ) -> tuple[Held[M], Loaded | None]:
        """*key* for an edit, under this call's lease: ``(held, its ledger entry)``, or
        ``(held, None)`` when another parameter of this call edits it already (it
        writes it). A value this call read already is the one it edits, if nothing
        changed it since; else `StateConflict`, before anything is written. With a
        *name* (a request's idempotency key), the result kept for it comes with the load."""
        seen = ledger.entry(store, key)
        if seen is not None:
            await self._wait_loaded(seen, key)
            if seen.held is not None:
                return seen.held, None
            entry = seen  # read earlier in this call: lease it now
            entry.ready, entry.waiters = False, None
        else:
            entry = ledger.open(store, key, self.model)
        token = ledger.token
        try:
            loaded, earlier = await self._load(store, key, token, self.lease, name)
        except BaseException as exc:
            ledger.drop(store, key, entry)
            if not isinstance(exc, StateNotFound | StateConflict):
                # Cancelled, or the store failed, after the lease may have been granted:
                # released in the background, so a call_timeout holds even then.
                leases.later(functools.partial(self._release, store, key, token))
            raise
        try:
            if seen is None:
                value = self._decode(key, loaded)
            elif loaded == seen.data:
                value = seen.value
            else:
                raise StateConflict(
                    f"{self.name} {key.handle!r} was changed by another call between this "
                    "call's read of it and its edit; nothing of this call was written.\n"
                    "  fix: try again"
                )
        except BaseException:
            ledger.drop(store, key, entry)
            await self._release(store, key, token)
            raise
        entry.data, entry.held = loaded, Held(key.handle, value)
        entry.where = (store, key)
        entry.name, entry.earlier = name, earlier
        entry.done()
        return entry.held, entry

    async def _wait_loaded(self, entry: Loaded, key: StateKey) -> None:
        """Wait for another parameter of this call that loads *key*; refuse a model
        other than the one it loaded."""
        while not entry.ready:  # (an edit may lease a value read, meanwhile: wait again)
            if entry.waiters is None:
                entry.waiters = anyio.Event()
            await entry.waiters.wait()
        if entry.failed:
            raise StateError(
                f"{self.name} {key.handle!r} could not be loaded for another parameter of "
                "this call (its error is the call's); nothing of this call was written"
            )
        if entry.model is not self.model:
            raise StateError(
                f"{self.name} {key.handle!r} is reached in one call through two State "
                f"kinds with different models, {entry.model.__qualname__} and "
                f"{self.model.__qualname__}; nothing of this call was written.\n"
                f"  fix: give the kinds different names, or the same model"
            )

    async def _load(
        self, store: StateStore, key: StateKey, token: str, lease: float, name: str | None = None
    ) -> tuple[bytes, bytes | None]:
        """The value of *key* (leased when *lease* > 0), and with a *name*, the result a
        call kept under it (see `_fetch`)."""
        try:
            if name is None:
                data, earlier = await store.load(key, self.idle_ttl, token, lease), None
            else:
                data, earlier = await self._fetch(store, key, token, lease, name)
        except StateConflict:  # another call holds its lease: wait for it
            data, earlier = await _traced(self.name, self._wait_for(store, key, token, lease, name))
        if data is None:
            raise self._not_found(key.handle)
        return data, earlier

    async def _fetch(
        self, store: StateStore, key: StateKey, token: str, lease: float, name: str | None
    ) -> tuple[bytes | None, bytes | None]:
        """One load; with a *name*, and the result kept under it, in one round trip where
        the store offers ``load_recalling`` (see `StateStore.recall`)."""
        if name is None:
            return await store.load(key, self.idle_ttl, token, lease), None
        both: Any = getattr(store, "load_recalling", None)
        if both is not None:
            found: tuple[bytes | None, bytes | None] = await both(
                key, self.idle_ttl, token, lease, name
            )
            return found
        data = await store.load(key, self.idle_ttl, token, lease)
        return data, (None if data is None else await store.recall(key, name))

    async def _wait_for(
        self, store: StateStore, key: StateKey, token: str, lease: float, name: str | None
    ) -> tuple[bytes | None, bytes | None]:
        """Retry the load while another call's lease holds the key, at most `wait` seconds."""
        give_up = anyio.current_time() + self.wait
        delay = 0.001
        while True:
            await anyio.sleep(delay * (0.5 + random.random()))
            try:
                return await self._fetch(store, key, token, lease, name)
            except StateConflict:
                if anyio.current_time() >= give_up:
                    raise StateConflict(
                        f"{self.name} {key.handle!r} is being changed by another call, "
                        f"which held it for longer than this call waits ({self.wait:g} s); "
                        "nothing was changed.\n"
                        "  fix: try again; if edits often take this long, raise "
                        f"State({self.name!r}, ..., wait=...)"
                    ) from None
                delay = min(delay * 2, 0.05)

    async def _release(self, store: StateStore, key: StateKey, token: str) -> None:
        """End the lease without writing: the handler failed or was cancelled. Bounded by
        the lease time: past it, the unrenewed lease has lapsed by itself."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.lease):
            try:
                await store.save(key, self.idle_ttl, token, None, False)
            except StoreUnavailable:  # the call fails saying so; the lease lapses by itself
                pass
            except Exception:  # the lease runs out by itself; the handler's error matters
                logger.error("resolvent: could not release %s %r", self.name, key.handle)

    async def _commit(
        self,
        store: StateStore,
        key: StateKey,
        ledger: Ledger,
        held: Held[M],
        entry: Loaded,
        lease: Lease,
    ) -> None:
        token = ledger.token
        if ledger.refused:  # another write of this call was refused: write nothing more
            await self._release(store, key, token)
            return
        if not lease.held():
            await self._release(store, key, token)
            raise self._refused(
                key,
                ledger,
                "this call lost its lease (the store refused its renewal, or did not "
                f"confirm one within {self.lease:g} s), so another call may have changed it",
            )
        try:
            receipt = entry.receipt
            if entry.replayed:  # the first call wrote it all
                data, delete = None, False
            elif held.deleted:
                data, delete = None, True
            else:
                data, delete = self._encode(key.handle, held.value), False
                if data == entry.data:
                    data = None  # unchanged: only end the lease
            if receipt is not None:
                remember = (*receipt, self.idempotency_ttl)
                saved = await store.save(key, self.idle_ttl, token, data, delete, remember)
            else:
                saved = await store.save(key, self.idle_ttl, token, data, delete)
        except BaseException:
            ledger.refused = True
            await self._release(store, key, token)
            raise
        if saved:
            if data is not None or delete:
                ledger.written.append((self.name, key.handle))
            return
        raise self._refused(
            key,
            ledger,
            f"this call's lease lapsed (unrenewed for {self.lease:g} s) and another call "
            "changed or removed it meanwhile",
        )

    def _refused(self, key: StateKey, ledger: Ledger, why: str) -> StateConflict:
        """The error of a write refused for a lost lease; no other write of the call is made."""
        ledger.refused = True
        if ledger.written:
            written = "nothing of this change was written, but this call's changes to "
            written += ", ".join(f"{kind} {handle!r}" for kind, handle in ledger.written)
            written += " were"
        else:
            written = "nothing of this call was written"
        return StateConflict(
            f"{self.name} {key.handle!r} was not saved: {why}; {written}.\n"
            f"  fix: try again; if the store is slow to answer, raise "
            f"State({self.name!r}, ..., lease=...)"
        )


T = TypeVar("T")


def _traced(name: str, waiting: Awaitable[T]) -> Awaitable[T]:
    """*waiting* (a load waiting for another call's lease on a value of the `State`
    *name*), in a span of its own when a traced plan has loaded the spans."""
    spans = sys.modules.get("resolvent._engine.spans")
    return waiting if spans is None else spans.lease_wait(name, waiting)
