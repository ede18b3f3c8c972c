"""State kept across calls: pydantic values in a shared store, addressed by handles.

A `State` declares one kind of state ("cart": a model, a store, expiry). Its three
resolvers give a handler a new value (`State.new`), a value to read (`State.read`) or to
change (`State.edit`). The handle is an ordinary call argument the handler declares; every
access checks it against the caller's principal; an edit holds a lease on the handle from
resolution to the end of the call and writes only if the handler succeeded.

State is data, not a live object, and not a scope: APP, SESSION and CALL hold objects in
one process, state outlives processes (see docs/state.md).

The package's modules, bottom up: this one (who is calling, the `Held` value and what one
call has loaded: it imports none of the others, so each may import it); `codec` (a value
as stored bytes); `access` (loading for a read or an edit, the lease, commit and release);
`idempotency` (retries that do not double); `state` (`State`, its resolvers and stores).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
from pydantic import BaseModel

from .._integration import StateKey, StateStore, inline

__all__ = (
    "ANONYMOUS",
    "LEDGER",
    "Held",
    "Ledger",
    "Loaded",
    "add_principal_source",
    "call_ledger",
    "current_principal",
    "owner_digest",
)

M = TypeVar("M", bound=BaseModel)

ANONYMOUS = "anonymous"
"""The principal of a caller nobody authenticated."""

LEDGER = "resolvent_call"
"""The keyword argument that carries the call's `Ledger` to the state resolvers and to
`State.idempotent`'s wrapper."""

# -- principals ---------------------------------------------------------------------------

_SOURCES: list[Callable[[], str | None]] = []


def add_principal_source(source: Callable[[], str | None]) -> None:
    """Let an integration name the caller: *source()* returns a principal or None.

    ``resolvent.mcp`` adds the SDK's authenticated token (its subject, else its client
    id). The first source that names someone wins; nobody named is `ANONYMOUS`.
    """
    if source not in _SOURCES:
        _SOURCES.append(source)


@inline
def current_principal() -> str:
    """The caller's principal: the first integration source that names one, else anonymous."""
    for source in _SOURCES:
        found = source()
        if found:
            return found
    return ANONYMOUS


@functools.lru_cache(maxsize=4096)
def owner_digest(principal: str) -> str:
    # Stores see a digest: the principal is never kept in clear.
    return hashlib.blake2b(principal.encode(), digest_size=16).hexdigest()


# -- the value being created or edited -------------------------------------------------------


class Held(Generic[M]):
    """A value this call creates (`State.new`) or edits (`State.edit`).

    Change ``value`` in place or assign a new one; call `delete` to remove it. The change
    is written when the call ends, only if the handler succeeded.

    Attributes:
        handle: the handle the client passes back to reach this value again.
        value: the value (a model instance).
    """

    __slots__ = ("_deleted", "handle", "value")

    def __init__(self, handle: str, value: M) -> None:
        self.handle = handle
        self.value = value
        self._deleted = False

    def delete(self) -> None:
        """Remove the value when the call succeeds; the handle is not found afterwards."""
        self._deleted = True

    @property
    def deleted(self) -> bool:
        """Whether `delete` was called."""
        return self._deleted

    def __repr__(self) -> str:
        return f"Held({self.handle!r}, {self.value!r}{', deleted' if self._deleted else ''})"


class Loaded:
    """One handle as a call loaded it: *held* if the call edits it (under its lease),
    else the *value* it read; *data* as stored. *ready* once loaded, *failed* if not."""

    __slots__ = (
        "data",
        "earlier",
        "failed",
        "held",
        "model",
        "name",
        "ready",
        "receipt",
        "replayed",
        "value",
        "waiters",
        "where",
    )

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model
        self.data = b""
        self.held: Held[Any] | None = None
        self.value: Any = None
        self.ready = self.failed = False
        self.waiters: anyio.Event | None = None
        # For `State.idempotent`: where an edited value lives, the result to keep with its
        # save, and whether the call repeats one already committed (then it writes nothing).
        self.where: tuple[StateStore, StateKey] | None = None
        self.receipt: tuple[str, bytes] | None = None
        self.replayed = False
        # The request (its result's name) the edit loaded the handle for, and the result
        # a call with that key kept, found in the same step as the load.
        self.name: str | None = None
        self.earlier: bytes | None = None

    def done(self, *, failed: bool = False) -> None:
        self.ready, self.failed = True, failed
        if self.waiters is not None:
            self.waiters.set()


class Ledger:
    """One call's lease token, the handles it has loaded and what it has written.

    Every parameter of a call that reaches one handle (``merge(src=h, dst=h)``) goes
    through its entry here: one load, one lease, one value, one write.
    """

    __slots__ = ("loaded", "refused", "token", "written")

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)  # the lease owner for every edit in this call
        self.loaded: dict[tuple[int, StateKey], Loaded] = {}
        self.written: list[tuple[str, str]] = []  # (kind, handle) written, for messages
        self.refused = False  # a write was refused: the call's other writes are not made

    def entry(self, store: StateStore, key: StateKey) -> Loaded | None:
        return self.loaded.get((id(store), key))

    def open(self, store: StateStore, key: StateKey, model: type[BaseModel]) -> Loaded:
        entry = self.loaded[(id(store), key)] = Loaded(model)
        return entry

    def drop(self, store: StateStore, key: StateKey, entry: Loaded) -> None:
        if self.loaded.get((id(store), key)) is entry:
            del self.loaded[(id(store), key)]
        entry.done(failed=True)


@inline
def call_ledger() -> Ledger:
    """Per call: the `Ledger` every state resolver of the call shares."""
    return Ledger()
